// Expert-parallel lane all-gather (App. F, L_sub = 1; Sec. 3.1 Bruck rounds, Sec. 3.2 streams).
//
// Steps, for rank n of M nodes x 1 GPU (one rank per node); R = ceil(log2 M) rounds, round d
// with distance 2^d and c_d = min(2^d, M - 2^d) shards (Sec. 3.1):
//   compute    0. (consumer) The landing's previous user reads it; record LANDING_FREE.
//   readiness  1. After LANDING_FREE: for d = 0..R-1, +1 on FREE[d] of rank (n + 2^d) mod M,
//                 the one rank whose round-d put writes n's landing (Sec. 3.2: a landing is
//                 free before it is overwritten).
//   caller     2. After LANDING_FREE: copy the own resident shard into the landing (P
//                 descriptors, Landing(p, n)); record OWN_LANDED.
//              3. For d = 0..R-1: wait FREE[d] (the target's landing is free); wait DATA[d'] for
//                 each earlier round d' whose shards this round forwards (2^d' < c_d); put the
//                 landing rows of nodes n .. n + c_d - 1 (mod M; one descriptor per parameter
//                 and contiguous run of nodes, at the same offsets) into the landing of rank
//                 (n - 2^d) mod M, signalling DATA[d] there. Record ROUNDS_DONE.
//   completion 4. Wait OWN_LANDED and DATA[d] for every d (each of the M - 1 other shards
//                 arrived exactly once: the rounds deliver disjoint runs of nodes); record
//                 READY, which FSDP2 waits on before consuming the parameters.
//   compute    5. (consumer) After READY the layer reads the landing into output 0; record USED.
// No receive stage and no scatter: the rail puts land in the parameter-major landing directly,
// since with one GPU per node the landing is the only place a shard is needed (App. F).
// Synchronisation contract: a landing is written (by the own copy or a peer's put) only after
// its previous user finished (LANDING_FREE -> FREE[d]); landing rows are forwarded only after
// the DATA signal of the put that wrote them (or, for the own rows, in stream order after the
// own copy); parameters are consumed only after READY. Pacing (Sec. 3.1's head/tail split)
// is left out: each target has one sender per round, so there is no incast to pace.
// In a call sequence (ep_ag_call_sequence, NOTE [call sequences]) the caller's stream is the
// landing's user (no consumer): step 0 is replaced by waits, on the readiness stream, for this
// rank's previous call's ROUNDS_DONE (its rounds read the landing) and READY (its arrivals
// are in), so that FREE[d] of call e + 1 follows call e on this rank. Every counter is the
// call's own (FREE and DATA are signalled afresh each call): no credit spans calls.
#include <algorithm>
#include <string>

#include "ep_lane_builder.hpp"
#include "tide/core/cta_budgets.hpp"
#include "tide/core/error.hpp"
#include "tide/core/topology.hpp"
#include "tide/program/emitter.hpp"
#include "tide/program/ep_lane.hpp"

namespace tide::program {
namespace {

// Event ids (per rank).
constexpr int kLandingFreeEvent = 0;
constexpr int kOwnLandedEvent = 1;
constexpr int kRoundsDoneEvent = 2;
constexpr int kReadyEvent = 3;
constexpr int kUsedEvent = 4;
constexpr int kEvents = 5;

struct Builder : Emitter {
  const GroupLayout& layout;
  const EpAgProgramOptions& options;
  EpAgArenaLayout arena;
  CallPlacement at;  // the call's first counter and event ids, its tensors
  int call = 0;      // in a sequence: calls before this one (0: a lone call)
  std::vector<EpAgRound> rounds;
  int m = 0;
  int readiness = 0, caller = 0, completion = 0, compute = 0;

  bool injected(Fault fault) const { return options.fault == fault; }
  // Counter ids (per rank), the call's own from at.counter_base.
  int free_of(int d) const { return at.counter_base + d; }
  int data(int d) const { return at.counter_base + static_cast<int>(rounds.size()) + d; }
  int counters() const { return at.counter_base + 2 * static_cast<int>(rounds.size()); }
  int ev(int id) const { return at.event_base + id; }
  int previous_ev(int id) const { return at.event_base - kEvents + id; }

  Region landing_rows(int rank, int p, int first_node, int nodes) const {
    const ParamLayout& pl = layout.param(p);
    const std::int64_t bytes = pl.shard_bytes * nodes;
    return Region{Buffer{rank, Space::kArena, 0},
                  arena.landing + layout.landing_offset(p, first_node), bytes, bytes, 1};
  }

  // Landing to landing: the rows of nodes [first, first + count) mod M, per parameter, at the
  // same offsets on `from` and `to` (a run that wraps past node M - 1 is two descriptors).
  std::vector<CopyDescriptor> rows(int from, int to, int first, int count) const {
    std::vector<CopyDescriptor> out;
    const int head = std::min(count, m - first);
    for (int p = 0; p < layout.param_count(); ++p) {
      if (layout.param(p).shard_bytes == 0) continue;
      out.push_back(
          CopyDescriptor{landing_rows(from, p, first, head), landing_rows(to, p, first, head)});
      if (count > head) {
        out.push_back(CopyDescriptor{landing_rows(from, p, 0, count - head),
                                     landing_rows(to, p, 0, count - head)});
      }
    }
    return out;
  }

  void build_rank(int n) {
    const std::string who = "EP-AG r" + std::to_string(n) + " ";
    const std::int64_t unsharded = layout.unsharded_bytes();
    const Region landing{Buffer{n, Space::kArena, 0}, arena.landing, unsharded, unsharded, 1};
    const Region output{Buffer{n, Space::kOutput, 0}, 0, unsharded, unsharded, 1};

    // 0. The landing's previous user: the modelled layer, or in a sequence this rank's
    // previous call (its forwards and arrivals).
    if (options.consumer) {
      auto& previous = add<CopyOp>(n, compute, who + "previous layer reads the landing");
      previous.copies = {CopyDescriptor{landing, output}};
      record_event(n, compute, ev(kLandingFreeEvent), who + "landing free");
      wait_event(n, readiness, ev(kLandingFreeEvent), who + "wait for the landing's previous user");
      wait_event(n, caller, ev(kLandingFreeEvent), who + "own landing free");
    } else if (call > 0) {
      wait_event(n, readiness, previous_ev(kRoundsDoneEvent),
                 who + "previous call's rounds read the landing");
      wait_event(n, readiness, previous_ev(kReadyEvent), who + "previous call's arrivals in");
    }

    // 1. readiness: n's landing is free for each round's sender.
    for (const EpAgRound& round : rounds) {
      const int sender = mod(n + round.distance, m);
      signal(n, readiness, sender, free_of(round.index),
             who + "landing free for round " + std::to_string(round.index) + " from r" +
                 std::to_string(sender));
    }

    // 2. caller: the own shard into the landing.
    own_shard(n, who);
    record_event(n, caller, ev(kOwnLandedEvent), who + "own shard landed");

    // 3. caller: the rounds, landing to landing.
    for (const EpAgRound& round : rounds) {
      const int d = round.index;
      const int target = mod(n - round.distance, m);
      if (!injected(Fault::kEpAgNoLandingFree)) {
        wait(n, caller, free_of(d), 1,
             who + "round " + std::to_string(d) + ": r" + std::to_string(target) +
                 "'s landing free");
      }
      for (const EpAgRound& earlier : rounds) {
        if (injected(Fault::kEpAgForwardBeforeArrival)) break;
        if (earlier.index < d && earlier.distance < round.count) {
          wait(n, caller, data(earlier.index), 1,
               who + "round " + std::to_string(d) + " forwards round " +
                   std::to_string(earlier.index) + "'s rows");
        }
      }
      auto& put = add<RailPutOp>(
          n, caller, who + "round " + std::to_string(d) + " -> r" + std::to_string(target));
      put.copies = rows(n, target, n, round.count);
      put.counter = Counter{target, data(d)};
      put.value = 1;
    }
    record_event(n, caller, ev(kRoundsDoneEvent), who + "rounds sent");

    // 4. completion.
    wait_event(n, completion, ev(kOwnLandedEvent), who + "own shard in place");
    for (const EpAgRound& round : rounds) {
      if (injected(Fault::kEpAgNoArrivalFence)) break;
      wait(n, completion, data(round.index), 1,
           who + "round " + std::to_string(round.index) + " arrived");
    }
    record_event(n, completion, ev(kReadyEvent), who + "parameters ready");

    // 5. The layer reads its parameters.
    if (options.consumer) {
      wait_event(n, compute, ev(kReadyEvent), who + "compute waits for parameters");
      auto& use = add<CopyOp>(n, compute, who + "layer reads its parameters");
      use.copies = {CopyDescriptor{landing, output}};
      record_event(n, compute, ev(kUsedEvent), who + "layer done with them");
    }
  }

  // Step 2: rank n's own rows of the landing, from the resident shard (one copy), or from the
  // call's tensors: copied (staged shards) or cast from fp32 masters (one op per parameter).
  void own_shard(int n, const std::string& who) {
    const AgOptions& source = options.shards;
    auto* own = source.mixed_precision_cast ? nullptr
                                            : &add<CopyOp>(n, caller, who + "own shard -> landing");
    for (int p = 0; p < layout.param_count(); ++p) {
      const ParamLayout& pl = layout.param(p);
      if (pl.shard_bytes == 0) continue;
      if (source.mixed_precision_cast) {
        auto& cast = add<CastOp>(n, caller, who + "cast p" + std::to_string(p) + " -> landing");
        cast.src = Region{Buffer{n, Space::kTensor, at.tensor_base + p}, 0, pl.shard_elems() * 4,
                          pl.shard_elems() * 4, 1};
        cast.dst = landing_rows(n, p, n, 1);
        cast.ctas = kDefaultCastCtas;
        continue;
      }
      const Region src = source.staged_shards
                             ? Region{Buffer{n, Space::kTensor, at.tensor_base + p}, 0,
                                      pl.shard_bytes, pl.shard_bytes, 1}
                             : Region{Buffer{n, Space::kArena, 0}, arena.resident + pl.offset,
                                      pl.shard_bytes, pl.shard_bytes, 1};
      own->copies.push_back(CopyDescriptor{src, landing_rows(n, p, n, 1)});
    }
  }
};

// The lane's all-gather program of call `call` at `at` (every rank's ops, its counters and
// events), with its arena `areas`; buffer sizes are left to the caller.
Program build_ep_ag_call(const GroupLayout& layout, const EpAgProgramOptions& options,
                         const CallPlacement& at, int call, const EpAgArenaLayout& areas) {
  if (const std::string why = ep_lane_inapplicable(layout); !why.empty()) throw Unsupported(why);
  require_fault_shows_on_lane(options.fault, ep_ag_fault_inapplicable(options.fault, layout));
  Builder b{{}, layout, options, areas, at, call, {}};
  b.m = layout.topology().nodes();
  b.rounds = ep_ag_rounds(b.m);
  Program& p = b.program;
  p.ranks = b.m;
  b.readiness = p.stream("readiness");
  b.caller = p.stream("caller");
  b.completion = p.stream("completion");
  if (options.consumer) b.compute = p.stream("compute");
  emit_lane_ranks(b, at.event_base + kEvents, BufferSizes{});
  return std::move(b.program);
}

}  // namespace

std::string ep_lane_inapplicable(const GroupLayout& layout) {
  const Topology& t = layout.topology();
  if (t.gpus_per_node() != 1) {
    return "an expert-parallel lane has one rank per node (L = 1; got L = " +
           std::to_string(t.gpus_per_node()) + ")";
  }
  if (t.nodes() < 2) return "an expert-parallel lane needs two nodes or more (got M = 1)";
  return "";
}

std::vector<EpAgRound> ep_ag_rounds(int nodes) {
  std::vector<EpAgRound> rounds;
  for (int d = 0, distance = 1; distance < nodes; ++d, distance *= 2)
    rounds.push_back(EpAgRound{d, distance, std::min(distance, nodes - distance)});
  return rounds;
}

EpAgArenaLayout ep_ag_arena_layout(const GroupLayout& layout) {
  constexpr std::int64_t kAlign = 256;
  EpAgArenaLayout a;
  a.resident = 0;
  a.landing = (layout.shard_bytes() + kAlign - 1) / kAlign * kAlign;
  a.arena_bytes = a.landing + layout.unsharded_bytes();
  return a;
}

Program build_ep_ag_program(const GroupLayout& layout, const EpAgProgramOptions& options,
                            EpAgProgramIds* ids) {
  const EpAgArenaLayout areas = ep_ag_arena_layout(layout);
  Program p = build_ep_ag_call(layout, options, CallPlacement{}, 0, areas);
  BufferSizes sizes;
  sizes.arena_bytes = areas.arena_bytes;
  sizes.tensor_bytes = shard_input_bytes(layout, options.shards);
  if (options.consumer) sizes.output_bytes = {layout.unsharded_bytes()};
  p.buffers.assign(static_cast<std::size_t>(p.ranks), sizes);
  if (ids) {
    ids->ready_event = kReadyEvent;
    ids->used_event = kUsedEvent;
  }
  return p;
}

CallSequence ep_ag_call_sequence(const AgPlan& plan, const EpAgArenaLayout& areas,
                                 const SequenceOptions& options) {
  const GroupLayout& layout = plan.layout();
  EpAgProgramOptions o;
  o.consumer = false;  // the caller's stream orders the landing's users (runtime)
  o.shards = plan.options();
  CallBuilder build = [&layout, o, areas](int call, const CallPlacement& at) {
    return build_ep_ag_call(layout, o, at, call, areas);
  };
  BufferSizes sizes;
  sizes.arena_bytes = areas.arena_bytes;
  sizes.tensor_bytes = ag_input_bytes(plan);
  return make_call_sequence(build, 0, sizes, options);
}

std::string ep_ag_fault_inapplicable(Fault fault, const GroupLayout& layout) {
  if (std::string why = fault_collective_mismatch(fault, "ep-all-gather"); !why.empty()) {
    return why;
  }
  const int m = layout.topology().nodes();
  switch (fault) {
    case Fault::kEpAgForwardBeforeArrival:
      // Round 1 forwards node n + 1's rows (received in round 0) once c_1 = min(2, M - 2) = 2.
      return m >= 4 ? "" : "no round forwards received rows below 4 nodes (use --nodes 4 or more)";
    default:
      return "";
  }
}

}  // namespace tide::program
