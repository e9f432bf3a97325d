// NOTE [one-node TIDE-RS]
// TIDE-RS on one node (M = 1, any L; RsPlan::one_node()). With no network phase there is no
// Level 2 (Sec. 4.2): rank r owns its own rows (sub-slice r of the per-rank geometry, Eq. 7
// with c = M: s = j), and Level 1 (Sec. 4.1) sums the L contributions to them straight into
// out_r, in NOTE [arithmetic order] (the L - 1 staged ones in local-rank order, then the own
// one, times alpha; accumulating, out_r + part). No spare, no landing pass, no outbox, no
// inbox: the areas of TIDE-RS are one staging ring of n_stg slots of (L - 1) chunks
// (RsPlan::memory(); its chunk from default_staging_chunk_elems, at most kOneNodeStagingNs of
// an unsharded layer). Rank r's rows are cut into the same fills (pass part q, chunk c) for
// every owner; fill x of an owner's ring uses slot x mod n_stg.
//
// Steps, for rank r of L, call e (counters cumulative over the calls sharing the ring):
//   caller 1. Wait for the gradients (the step's entry event); record ENTRY.
//             Slot-Reuse (Sec. 5.3): copy the gradients into the call's gradient area (the
//             group's vacated landing slot, in the window), record ENTRY after the copies,
//             and +1 GRADS_READY on every peer: its gradients are readable where they lie.
//   push   2. In-Place: fill by fill, for the owners k != r in the order r+1, r+2, ... (mod
//             L: the L - 1 pushes of a fill go to different owners), wait FREE[k][z] >= x /
//             n_stg (k's sum freed slot z's previous fill), copy r's pieces of k's rows into
//             position (r < k ? r : r - 1) of slot z on k by copy engine, +1 STAGED[z] on k.
//             Slot-Reuse: r pulls instead. After GRADS_READY >= L - 1, fill by fill: wait its
//             own FREE[r][z], copy each peer k's pieces of r's rows from k's gradient area into
//             position (k < r ? k : k - 1) of its slot z, +1 STAGED[z] per peer. After the last
//             fill, +1 PEER_READS on every peer: r read all it needs of their gradients.
//   sum    3. Fill by fill: wait STAGED[z] >= (L - 1) (x / n_stg + 1); sum the staged chunk and
//             r's own contribution (read in place: the gradient, or Slot-Reuse its gradient
//             area) into out_r's columns of the fill, with alpha and accumulate; +1 FREE[r][z]
//             on every rank (the pushers', and r's own for a pull). Record SUM_DONE.
//   host   4. Wait for the push and sum streams (r's own reads), and in Slot-Reuse for
//             PEER_READS >= L - 1 (the peers' reads of r's gradient area: the slot's next
//             all-gather waits for them, Sec. 5.3); record READ_DONE; release the gradients.
//             In Slot-Reuse the release follows ENTRY alone (the copies read them).
//   sum    5. Record DONE (and the multi-node builder's NET_DONE / LAND_DONE / OWN_DONE, so
//             a step's later calls see the same events): out_r is final.
// Synchronisation contract (App. E): a staging slot is refilled only after its owner's sum read
// the previous fill (FREE; I3); the owner sums a fill only after all L - 1 contributions are in
// (STAGED; I4); a gradient (area) is released only after every read of it (I2: the pushes and
// the own sum; Slot-Reuse: the peers' pulls, PEER_READS); a peer reads a gradient area only
// after its owner filled it (GRADS_READY; I4). Faults rs-staging-reuse, rs-release-before-read,
// rs-pull-before-ready and rs-release-before-peer-reads remove these edges.
#include "tide/program/rs_one_node.hpp"

#include <algorithm>
#include <string>

#include "tide/core/error.hpp"
#include "tide/program/emitter.hpp"
#include "tide/program/memory_mode.hpp"

namespace tide::program {
namespace {

struct Fill {
  int pass = 0;
  int chunk = 0;  // chunk index within the pass part
};

struct OneNodeBuilder : Emitter {
  const RsPlan& plan;
  const RsProgramOptions& options;
  const GroupLayout& layout;
  const CallPlacement& at;
  RsShared& shared;
  const RsArenaLayout& areas;
  int l = 0, n_stg = 0;
  bool pull = false;  // Slot-Reuse: owners pull from the peers' gradient areas
  std::int64_t b_grad = 0, chunk = 0, gradients = 0;
  std::vector<Fill> fills{};      // this call's fills, the same for every owner
  std::vector<int> base_fills{};  // per rank: fills of its ring before this call
  int caller = 0, push = 0, sum = 0, host = 0;

  bool injected(Fault fault) const { return options.fault == fault; }

  int staged(int z) const { return shared.staged + z; }
  int freed(int owner, int z) const { return shared.freed + owner * n_stg + z; }
  int grads_ready() const { return at.counter_base; }     // private: the multi-node SUMMED slot
  int peer_reads() const { return at.counter_base + 1; }  // private: the SENT slot
  static constexpr int kEntry = 0, kPushDone = 1, kSumDone = 2, kReadDone = 3, kLandDone = 4,
                       kDone = 5, kNetDone = 6;
  int ev(int id) const { return at.event_base + id; }
  int own_done(int pass) const { return at.event_base + 7 + pass; }

  Region arena(int rank, std::int64_t offset, std::int64_t bytes) const {
    return Region{Buffer{rank, Space::kArena, 0}, offset, bytes, bytes, 1};
  }
  std::int64_t slot(int z) const { return areas.staging + z * areas.staging_slot_bytes; }
  // Where parameter p's gradient lies in the gradient area: where the all-gather lands the
  // parameter (Eq. 2, GroupLayout::landing_offset(p, 0)), counted in gradient items.
  std::int64_t gradient_item(int p) const {
    return layout.param(p).out_offset * layout.topology().world();
  }
  // `elems` gradient items of parameter p on `rank` from item `first`.
  Region gradient(int rank, int p, std::int64_t first, std::int64_t elems) const {
    if (pull) return arena(rank, gradients + (gradient_item(p) + first) * b_grad, elems * b_grad);
    return Region{Buffer{rank, Space::kTensor, at.tensor_base + p}, first * b_grad, elems * b_grad,
                  elems * b_grad, 1};
  }

  std::int64_t fill_begin(const Fill& f) const {
    return plan.sub_slice_begin(f.pass, 0) + f.chunk * chunk;
  }
  std::int64_t fill_columns(const Fill& f) const {
    const std::int64_t live = plan.sub_slice_end(f.pass, 0) - plan.sub_slice_begin(f.pass, 0);
    return std::clamp<std::int64_t>(live - f.chunk * chunk, 0, chunk);
  }
  // The pieces of owner `owner`'s rows in fill f (sub-slice `owner`, per-rank geometry).
  std::vector<RsPiece> fill_pieces(int owner, const Fill& f) const {
    const std::int64_t begin = fill_begin(f);
    return plan.pieces(f.pass, owner, begin, begin + fill_columns(f));
  }

  // Copies of `sender`'s contribution to `owner`'s rows in fill f into position `position` of
  // the owner's slot z: one 1-D descriptor per piece, its real prefix (rows past D_p are
  // padding, never read).
  void stage(CopyOp& op, int sender, int owner, const Fill& f, int z) const {
    const int position = sender < owner ? sender : sender - 1;
    const std::int64_t base = slot(z) + position * chunk * b_grad;
    for (const RsPiece& piece : fill_pieces(owner, f)) {
      const std::int64_t valid = plan.valid_length(piece, owner);
      if (valid == 0) continue;
      const ParamLayout& pl = layout.param(piece.param);
      op.copies.push_back(CopyDescriptor{
          gradient(sender, piece.param, owner * pl.shard_elems() + piece.param_offset, valid),
          arena(owner, base + (piece.span_begin - fill_begin(f)) * b_grad, valid * b_grad)});
    }
  }

  void sum_fill(int rank, const Fill& f, int z) {
    const std::int64_t cols = fill_columns(f);
    auto& op = add<SumOp>(rank, sum,
                          "RS r" + std::to_string(rank) + " sum pass " + std::to_string(f.pass) +
                              " chunk " + std::to_string(f.chunk) + " into out");
    op.dst =
        Region{Buffer{rank, Space::kOutput, at.output}, fill_begin(f) * 4, cols * 4, cols * 4, 1};
    op.in_dtype = layout.grad_dtype();
    op.alpha = options.alpha;
    op.accumulate = options.accumulate;
    op.ctas = options.sum_ctas;
    for (int k = 0; k < l - 1; ++k)
      op.staged.push_back(arena(rank, slot(z) + k * chunk * b_grad, cols * b_grad));
    for (const RsPiece& piece : fill_pieces(rank, f)) {
      const std::int64_t valid = plan.valid_length(piece, rank);
      if (valid == 0) continue;
      const std::int64_t first =
          rank * layout.param(piece.param).shard_elems() + piece.param_offset;
      SumSegment seg{0, piece.span_begin - fill_begin(f), at.tensor_base + piece.param, first,
                     valid};
      if (pull) {  // the own contribution in this rank's gradient area
        seg.space = Space::kArena;
        seg.param = 0;
        seg.src_elem = gradients / b_grad + gradient_item(piece.param) + first;
      }
      op.segments.push_back(seg);
    }
  }

  void build_rank(int rank) {
    const std::string who = "RS r" + std::to_string(rank) + " ";
    // 1. caller
    if (at.entry_event >= 0)
      wait_event(rank, caller, at.entry_event, who + "wait for the gradients");
    if (pull && shared.calls > 0) {  // the previous call's gradient area was read everywhere
      wait_event(rank, caller, shared.read_done_events.back(),
                 who + "gradient area read by the previous call");
    }
    if (pull) {
      for (int p = 0; p < layout.param_count(); ++p) {
        const ParamLayout& pl = layout.param(p);
        auto& copy = add<CopyOp>(rank, caller, who + "G" + std::to_string(p) + " -> gradient area");
        copy.copies = {
            CopyDescriptor{Region{Buffer{rank, Space::kTensor, at.tensor_base + p}, 0,
                                  pl.rows * pl.cols * b_grad, pl.rows * pl.cols * b_grad, 1},
                           gradient(rank, p, 0, pl.rows * pl.cols)}};
      }
    }
    record_event(rank, caller, ev(kEntry), who + "gradients ready");
    if (pull) {
      for (int k = 0; k < l; ++k) {
        if (k != rank) signal(rank, caller, k, grads_ready(), who + "gradients readable");
      }
    }

    // 2. push (In-Place) or pull (Slot-Reuse)
    wait_event(rank, push, ev(kEntry), who + "push after entry");
    wait_event(rank, sum, ev(kEntry), who + "sum after entry");
    if (pull && !injected(Fault::kRsPullBeforeReady)) {
      wait(rank, push, grads_ready(), l - 1, who + "peers' gradients readable");
    }
    for (std::size_t i = 0; i < fills.size(); ++i) {
      const Fill& f = fills[i];
      if (pull) {
        const int x = base_fills[static_cast<std::size_t>(rank)] + static_cast<int>(i);
        const int z = x % n_stg;
        if (l > 1 && !injected(Fault::kRsStagingReuse)) {
          wait(rank, push, freed(rank, z), x / n_stg,
               who + "own staging slot " + std::to_string(z) + " free");
        }
        for (int d = 1; d < l; ++d) {
          const int k = (rank + d) % l;
          auto& op = add<CopyOp>(rank, push,
                                 who + "pull pass " + std::to_string(f.pass) + " chunk " +
                                     std::to_string(f.chunk) + " <- r" + std::to_string(k));
          stage(op, k, rank, f, z);
          signal(rank, push, rank, staged(z), who + "staged from r" + std::to_string(k));
        }
        continue;
      }
      for (int d = 1; d < l; ++d) {
        const int k = (rank + d) % l;
        const int x = base_fills[static_cast<std::size_t>(k)] + static_cast<int>(i);
        const int z = x % n_stg;
        if (!injected(Fault::kRsStagingReuse)) {
          wait(
              rank, push, freed(k, z), x / n_stg,
              who + "staging slot " + std::to_string(z) + " on GPU " + std::to_string(k) + " free");
        }
        auto& op = add<CopyOp>(rank, push,
                               who + "push pass " + std::to_string(f.pass) + " chunk " +
                                   std::to_string(f.chunk) + " -> r" + std::to_string(k));
        stage(op, rank, k, f, z);
        signal(rank, push, k, staged(z), who + "staged pass " + std::to_string(f.pass));
      }
    }
    if (pull) {
      for (int k = 0; k < l; ++k) {
        if (k != rank) signal(rank, push, k, peer_reads(), who + "read r" + std::to_string(k));
      }
    }
    record_event(rank, push, ev(kPushDone), who + "pushes done");

    // 3. sum into out_r
    for (std::size_t i = 0; i < fills.size(); ++i) {
      const int x = base_fills[static_cast<std::size_t>(rank)] + static_cast<int>(i);
      const int z = x % n_stg;
      wait(rank, sum, staged(z), std::int64_t{l - 1} * (x / n_stg + 1),
           who + "staging slot " + std::to_string(z) + " filled");
      sum_fill(rank, fills[i], z);
      for (int k = 0; k < l; ++k) {
        if (l > 1)
          signal(rank, sum, k, freed(rank, z), who + "free staging slot -> r" + std::to_string(k));
      }
      if (i + 1 == fills.size() || fills[i + 1].pass != fills[i].pass) {
        record_event(rank, sum, own_done(fills[i].pass), who + "pass summed");
      }
    }
    record_event(rank, sum, ev(kSumDone), who + "sums done");

    // 4. host: read completion and release
    if (!injected(Fault::kRsReleaseBeforeRead)) {
      if (pull) {
        wait_event(rank, host, ev(kEntry), who + "gradients copied");
      } else {
        wait_event(rank, host, ev(kPushDone), who + "pushes finished");
        wait_event(rank, host, ev(kSumDone), who + "sums finished");
      }
    }
    for (int p = 0; p < layout.param_count(); ++p) {
      const ParamLayout& pl = layout.param(p);
      auto& release = add<ReleaseOp>(rank, host, who + "release G" + std::to_string(p));
      release.dst = Region{Buffer{rank, Space::kTensor, at.tensor_base + p}, 0,
                           pl.rows * pl.cols * b_grad, pl.rows * pl.cols * b_grad, 1};
    }
    if (pull) {
      if (!injected(Fault::kRsReleaseBeforeRead)) {
        wait_event(rank, host, ev(kPushDone), who + "pulls finished");
        wait_event(rank, host, ev(kSumDone), who + "sums finished");
      }
      if (!injected(Fault::kRsReleaseBeforePeerReads)) {
        wait(rank, host, peer_reads(), l - 1, who + "peers read the gradient area");
      }
    }
    if (pull) {  // the gradient area is free for the slot's next all-gather
      auto& release = add<ReleaseOp>(rank, host, who + "release the gradient area");
      release.dst =
          arena(rank, gradients, layout.shard_elems() * layout.topology().world() * b_grad);
    }
    record_event(rank, host, ev(kReadDone), who + "read completion");

    // 5. completion
    record_event(rank, sum, ev(kNetDone), who + "nothing to send");
    record_event(rank, sum, ev(kLandDone), who + "nothing to land");
    for (int k = 0; k < l; ++k)
      signal(rank, sum, k, shared.landings_done, who + "call done -> GPU " + std::to_string(k));
    record_event(rank, sum, ev(kDone), who + "reduce-scatter done");
  }
};

}  // namespace

bool rs_one_node_pull(const RsPlan& plan) {
  return plan.one_node() && memory_mode(plan).gradients_in_vacated_slot &&
         plan.options().one_node_pull;
}

std::int64_t rs_gradient_area_bytes(const RsPlan& plan) {
  if (!rs_one_node_pull(plan)) return 0;
  const GroupLayout& layout = plan.layout();
  return layout.shard_elems() * layout.topology().world() * item_bytes(layout.grad_dtype());
}

Program build_one_node_rs_call(const RsPlan& plan, const RsProgramOptions& options,
                               const CallPlacement& placement, RsShared& shared,
                               RsProgramIds* ids) {
  const GroupLayout& layout = plan.layout();
  if (!plan.one_node() || options.landing != LandingStyle::kPull) {
    throw InternalError("build_one_node_rs_call: not a one-node plan with the pull landing");
  }
  OneNodeBuilder b{{}, plan, options, layout, placement, shared, shared.areas};
  b.l = layout.topology().gpus_per_node();
  b.n_stg = plan.options().staging_slots;
  b.pull = rs_one_node_pull(plan);
  b.b_grad = item_bytes(layout.grad_dtype());
  b.chunk = plan.chunk_elems();
  b.gradients = options.gradient_area >= 0 ? options.gradient_area : shared.areas.gradients;
  if (b.pull && (b.gradients < 0 || b.gradients % b.b_grad != 0)) {
    throw InvalidArgument(
        "a one-node Slot-Reuse reduce-scatter needs an aligned gradient area "
        "(RsProgramOptions::gradient_area; NOTE [one-node TIDE-RS])");
  }
  for (int pass = 0; pass < plan.passes(); ++pass) {
    const std::int64_t live = plan.sub_slice_end(pass, 0) - plan.sub_slice_begin(pass, 0);
    const int chunks = std::max<int>(1, static_cast<int>((live + b.chunk - 1) / b.chunk));
    for (int c = 0; c < chunks; ++c)
      b.fills.push_back(Fill{pass, c});
  }
  b.base_fills = shared.fills;
  Program& p = b.program;
  p.ranks = layout.topology().world();
  // The multi-node builder's streams, in its order: a step's calls share stream names.
  b.caller = p.stream("caller");
  b.push = p.stream("push");
  b.sum = p.stream("sum");
  p.stream("net");
  p.stream("relay");
  p.stream("land");
  p.stream("credit");
  b.host = p.stream("host");
  p.counters = placement.counter_base + 2 + 3 * static_cast<int>(plan.waves().size());
  p.events = placement.event_base + rs_call_event_count(plan);
  for (int r = 0; r < p.ranks; ++r)
    b.build_rank(r);
  const int count = static_cast<int>(b.fills.size());
  for (int r = 0; r < p.ranks; ++r) {
    shared.fills[static_cast<std::size_t>(r)] += count;
    for (int k = 0; k < b.l; ++k) {
      if (k != r) shared.pushed[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)] += count;
    }
  }
  shared.net_done_events.push_back(b.ev(OneNodeBuilder::kNetDone));
  shared.read_done_events.push_back(b.ev(OneNodeBuilder::kReadDone));
  ++shared.calls;
  if (ids) {
    ids->done_event = b.ev(OneNodeBuilder::kDone);
    ids->read_done_event = b.ev(OneNodeBuilder::kReadDone);
    ids->net_done_event = b.ev(OneNodeBuilder::kNetDone);
  }
  return std::move(b.program);
}

}  // namespace tide::program
