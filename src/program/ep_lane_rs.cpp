// Expert-parallel lane reduce-scatter (App. F, L_sub = 1; Sec. 4.3 arithmetic, Sec. 5.2 and
// App. E I1-I4 for the inbox reuse).
//
// Steps, for rank n of M nodes x 1 GPU, 2 <= M <= 8. The fp32 output shard of every rank (E =
// S_fp32 / 4 elements, Eq. 5) is cut into `parts` rail parts of part_elems elements; part k
// uses inbox generation q = k mod 2 (the double buffer). Contributor c in [1, M) of
// destination t is rank (t - c) mod M (Eq. 6); its pieces land in inbox block c - 1.
//   net     1. For k = 0..parts-1, for c = 1..M-1, to destination t = (n + c) mod M: wait
//              GEN_FREE[q][t] (t summed every earlier part that used generation q: in this
//              call part k - 2, in a sequence also the previous calls' parts; cumulative);
//              put n's bf16 gradient pieces of part k of t's shard (rows t R_p .. of each G_p,
//              read in place: no Level 1 staging, one descriptor per parameter the part
//              meets) into inbox block c - 1 of generation q on t, signalling ARRIVED[k] there
//              (a part of t's padding only is a signal without data). Record NET_DONE.
//   sum     2. For k = 0..parts-1: wait ARRIVED[k] >= M - 1; one fixed 8-source fp32 sum
//              (kEpSumSources: the M - 1 arrivals in contributor order, then n's own
//              contribution read in place from G_p, times alpha; NOTE [arithmetic order],
//              expert-parallel lane) into the output part, or, when accumulating (or with
//              fold_always), into the scratch part and folded into the output (out + part,
//              or a copy); then, where a later part (or call) reuses generation q, +1
//              GEN_FREE[q][n] on every contributor. Record DONE.
//   host    3. Wait NET_DONE and DONE (the puts and the sums have read every gradient byte:
//              read completion), record READ_DONE and release the gradients.
// Fewer than 8 sources: the sum takes the M sources there are, which is what a fixed 8-source
// kernel computes with its missing sources padded with -0.0f (x + -0 = x for every fp32 x, the
// signed zeros included), so the count of real sources never changes a bit. On CUDA the sum is
// the Level 1 kernel with S = M - 1 staged blocks (tide/kernels/level1_sum.hpp; the runner maps
// the SumOp like TIDE-RS's), the fold a one-source landing.
// Synchronisation contract: an inbox block is read only after every contributor's put into it
// signalled ARRIVED (I4), and rewritten only after the sum that read it (GEN_FREE, I3); the
// gradients live through READ_DONE (I2); each piece lands exactly once in its own block (I1).
// Counters: GEN_FREE (2 M per rank, ids 0 .. 2 M - 1) are shared by every call of a sequence
// (NOTE [call sequences]: the j-th use of a generation, counted from the sequence's start,
// waits for j credits); ARRIVED (one per part) is each call's own.
#include <algorithm>
#include <string>

#include "ep_lane_builder.hpp"
#include "tide/core/error.hpp"
#include "tide/core/topology.hpp"
#include "tide/program/emitter.hpp"
#include "tide/program/ep_lane.hpp"

namespace tide::program {
namespace {

constexpr std::int64_t kAlign = 256;
std::int64_t aligned(std::int64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

// Event ids (per rank).
constexpr int kNetDoneEvent = 0;
constexpr int kDoneEvent = 1;
constexpr int kReadDoneEvent = 2;
constexpr int kEvents = 3;

// Elements [a, b) of the fp32 shard that parameter p's real rows of destination `t` hold inside
// [begin, end); a >= b when none.
struct Piece {
  int param = 0;
  std::int64_t a = 0, b = 0;
  std::int64_t src_elem = 0;  // element of G_p holding shard element a
};

struct Builder : Emitter {
  const GroupLayout& layout;
  const EpRsProgramOptions& options;
  EpRsArenaLayout arena;
  int m = 0;
  int net = 0, sum = 0, host = 0;

  CallPlacement at;  // the call's first private counter (after the shared credits)
  int call = 0;      // calls of the sequence before this one (0: a lone call)
  bool sequence = false;

  int ev(int id) const { return at.event_base + id; }
  bool injected(Fault fault) const { return options.fault == fault; }
  bool folded() const { return options.accumulate || options.fold_always; }
  // Counter ids (per rank): the shared credits, then the call's own.
  int gen_free(int q, int destination) const { return q * m + destination; }
  int arrived(int k) const { return at.counter_base + k; }
  int counters() const { return at.counter_base + arena.parts; }
  // Uses of generation q per call, and the earlier uses of part k's (the credits it needs).
  int uses(int q) const { return (arena.parts - q + arena.generations - 1) / arena.generations; }
  int earlier_uses(int k) const {
    return call * uses(k % arena.generations) + k / arena.generations;
  }

  std::int64_t part_begin(int k) const { return k * arena.part_elems; }
  std::int64_t part_end(int k) const {
    return std::min(layout.shard_elems(), (k + 1) * arena.part_elems);
  }

  std::vector<Piece> pieces(int t, int k) const {
    std::vector<Piece> out;
    for (int p = 0; p < layout.param_count(); ++p) {
      const ParamLayout& pl = layout.param(p);
      const std::int64_t real = layout.valid_rows(p, t) * pl.cols;
      const std::int64_t a = std::max(part_begin(k), pl.out_offset);
      const std::int64_t b = std::min(part_end(k), pl.out_offset + real);
      if (a < b) out.push_back(Piece{p, a, b, t * pl.shard_elems() + (a - pl.out_offset)});
    }
    return out;
  }

  Region inbox_block(int rank, int k, int c, std::int64_t first, std::int64_t elems) const {
    const std::int64_t offset = arena.inbox + (k % arena.generations) * arena.generation_bytes +
                                (c - 1) * arena.block_bytes + first * 2;
    return Region{Buffer{rank, Space::kArena, 0}, offset, elems * 2, elems * 2, 1};
  }

  void build_rank(int n) {
    const std::string who = "EP-RS r" + std::to_string(n) + " ";

    // 1. net: the pieces, part by part, in contributor order of the destinations.
    for (int k = 0; k < arena.parts; ++k) {
      for (int c = 1; c < m; ++c) {
        const int t = mod(n + c, m);
        const std::string what = "part " + std::to_string(k) + " -> r" + std::to_string(t);
        if (earlier_uses(k) > 0 && !injected(Fault::kEpRsInboxReuse)) {
          wait(n, net, gen_free(k % arena.generations, t), earlier_uses(k),
               who + what + ": inbox generation free");
        }
        auto& put = add<RailPutOp>(n, net, who + what);
        for (const Piece& piece : pieces(t, k)) {
          const std::int64_t elems = piece.b - piece.a;
          put.copies.push_back(
              CopyDescriptor{Region{Buffer{n, Space::kTensor, piece.param}, piece.src_elem * 2,
                                    elems * 2, elems * 2, 1},
                             inbox_block(t, k, c, piece.a - part_begin(k), elems)});
        }
        put.counter = Counter{t, arrived(k)};
        put.value = 1;
      }
    }
    record_event(n, net, ev(kNetDoneEvent), who + "pieces sent");

    // 2. sum: one fixed 8-source sum per part.
    for (int k = 0; k < arena.parts; ++k) {
      const std::string part = "part " + std::to_string(k);
      const std::int64_t begin = part_begin(k);
      const std::int64_t elems = part_end(k) - begin;
      if (!injected(Fault::kEpRsSumBeforeArrival)) {
        wait(n, sum, arrived(k), m - 1, who + part + ": every piece arrived");
      }
      const Region out{Buffer{n, Space::kOutput, 0}, begin * 4, elems * 4, elems * 4, 1};
      const Region scratch{Buffer{n, Space::kArena, 0}, arena.scratch, elems * 4, elems * 4, 1};
      auto& s = add<SumOp>(n, sum, who + part + ": 8-source sum");
      s.dst = folded() ? scratch : out;
      for (int c = 1; c < m; ++c)
        s.staged.push_back(inbox_block(n, k, c, 0, elems));
      for (const Piece& piece : pieces(n, k)) {
        s.segments.push_back(
            SumSegment{0, piece.a - begin, piece.param, piece.src_elem, piece.b - piece.a});
      }
      s.in_dtype = layout.grad_dtype();
      s.alpha = options.alpha;
      s.ctas = options.sum_ctas;
      if (folded()) {
        auto& fold = add<LandOp>(n, sum, who + part + ": fold into the output");
        fold.dst = out;
        fold.sources = {scratch};
        fold.accumulate = options.accumulate;
        fold.ctas = options.landing_ctas;
      }
      if (sequence || k + arena.generations < arena.parts) {
        for (int c = 1; c < m; ++c) {
          const int contributor = mod(n - c, m);
          signal(n, sum, contributor, gen_free(k % arena.generations, n),
                 who + part + ": inbox generation free for r" + std::to_string(contributor));
        }
      }
    }
    record_event(n, sum, ev(kDoneEvent), who + "done");

    // 3. host: read completion, then FSDP2 may free the gradients.
    if (!injected(Fault::kEpRsReleaseBeforeRead)) {
      wait_event(n, host, ev(kNetDoneEvent), who + "puts have read the gradients");
      wait_event(n, host, ev(kDoneEvent), who + "sums have read the gradients");
    }
    record_event(n, host, ev(kReadDoneEvent), who + "read done");
    for (int p = 0; p < layout.param_count(); ++p) {
      const ParamLayout& pl = layout.param(p);
      const std::int64_t bytes = pl.rows * pl.cols * 2;
      auto& release = add<ReleaseOp>(n, host, who + "release G_p" + std::to_string(p));
      release.dst = Region{Buffer{n, Space::kTensor, p}, 0, bytes, bytes, 1};
    }
  }
};

// GEN_FREE: two generations' credits per destination rank, shared by a sequence's calls.
int ep_rs_shared_counters(const GroupLayout& layout) {
  return 2 * layout.topology().nodes();
}

BufferSizes ep_rs_buffer_sizes(const GroupLayout& layout, const EpRsArenaLayout& areas) {
  BufferSizes sizes;
  for (const ParamLayout& pl : layout.params())
    sizes.tensor_bytes.push_back(pl.rows * pl.cols * 2);
  sizes.output_bytes = {layout.fp32_shard_bytes()};
  sizes.arena_bytes = areas.arena_bytes;
  return sizes;
}

// Call `call` of the lane's reduce-scatter at `at` (`sequence`: its generations' credits
// span calls), with its arena `areas`; buffer sizes are left to the caller.
Program build_ep_rs_call(const GroupLayout& layout, const EpRsProgramOptions& options,
                         const CallPlacement& at, int call, bool sequence,
                         const EpRsArenaLayout& areas) {
  if (const std::string why = ep_rs_inapplicable(layout); !why.empty()) throw Unsupported(why);
  require_fault_shows_on_lane(options.fault,
                              ep_rs_fault_inapplicable(options.fault, layout, options));
  Builder b{{}, layout, options, areas, layout.topology().nodes(), 0, 0, 0, at, call, sequence};
  Program& p = b.program;
  p.ranks = b.m;
  b.net = p.stream("net");
  b.sum = p.stream("sum");
  b.host = p.stream("host");
  emit_lane_ranks(b, at.event_base + kEvents, BufferSizes{});
  return std::move(b.program);
}

}  // namespace

std::string ep_rs_inapplicable(const GroupLayout& layout) {
  if (std::string why = ep_lane_inapplicable(layout); !why.empty()) return why;
  if (layout.topology().nodes() > kEpSumSources) {
    return "the lane's fixed 8-source sum holds at most 8 contributions (M <= 8; got M = " +
           std::to_string(layout.topology().nodes()) + "): use TIDE-RS's M x 1 plan";
  }
  if (layout.grad_dtype() != DType::kBf16) return "the lane sends bf16 gradient pieces";
  return "";
}

EpRsArenaLayout ep_rs_arena_layout(const GroupLayout& layout, const EpRsProgramOptions& options) {
  if (options.parts < 1) {
    throw InvalidArgument("the lane needs at least one rail part (got " +
                          std::to_string(options.parts) + ")");
  }
  EpRsArenaLayout a;
  const std::int64_t e = layout.shard_elems();
  // Parts of whole 16-byte fp32 vectors (4 elements), at most `parts` of them.
  const std::int64_t per = (e + options.parts - 1) / options.parts;
  a.part_elems = std::max<std::int64_t>(4, (per + 3) / 4 * 4);
  a.parts = static_cast<int>((e + a.part_elems - 1) / a.part_elems);
  a.generations = std::min(2, a.parts);
  a.block_bytes = aligned(a.part_elems * 2);
  a.generation_bytes = a.block_bytes * (layout.topology().nodes() - 1);
  a.inbox = 0;
  a.scratch = a.inbox + a.generation_bytes * a.generations;
  a.arena_bytes =
      a.scratch + (options.accumulate || options.fold_always ? aligned(a.part_elems * 4) : 0);
  return a;
}

Program build_ep_rs_program(const GroupLayout& layout, const EpRsProgramOptions& options,
                            EpRsProgramIds* ids) {
  const EpRsArenaLayout areas = ep_rs_arena_layout(layout, options);
  CallPlacement at;
  at.counter_base = ep_rs_shared_counters(layout);
  Program p = build_ep_rs_call(layout, options, at, 0, false, areas);
  p.buffers.assign(static_cast<std::size_t>(p.ranks), ep_rs_buffer_sizes(layout, areas));
  if (ids) {
    ids->done_event = kDoneEvent;
    ids->read_done_event = kReadDoneEvent;
  }
  return p;
}

EpRsArenaLayout ep_rs_arena_layout_at(EpRsArenaLayout areas, std::int64_t at,
                                      std::int64_t arena_bytes) {
  areas.inbox += at;
  areas.scratch += at;
  areas.arena_bytes = arena_bytes;
  return areas;
}

CallSequence ep_rs_call_sequence(const GroupLayout& layout, const EpRsArenaLayout& areas,
                                 const SequenceOptions& options) {
  EpRsProgramOptions o;
  o.fold_always = true;  // accumulate is bound per call
  CallBuilder build = [&layout, o, areas](int call, const CallPlacement& at) {
    return build_ep_rs_call(layout, o, at, call, true, areas);
  };
  return make_call_sequence(build, ep_rs_shared_counters(layout), ep_rs_buffer_sizes(layout, areas),
                            options);
}

std::string ep_rs_fault_inapplicable(Fault fault, const GroupLayout& layout,
                                     const EpRsProgramOptions& options) {
  if (std::string why = fault_collective_mismatch(fault, "ep-reduce-scatter"); !why.empty()) {
    return why;
  }
  switch (fault) {
    case Fault::kEpRsInboxReuse:
      return ep_rs_arena_layout(layout, options).parts >= 3
                 ? ""
                 : "no inbox generation is reused below three rail parts (use larger shapes or "
                   "more --rail-parts)";
    default:
      return "";
  }
}

}  // namespace tide::program
