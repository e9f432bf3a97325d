// The fusion pass of the CUDA sequence runner (NOTE [CUDA call sequences] 1): over a
// template's mapped ops, in their enqueue order, consecutive waits of one stream become one
// kWait and consecutive counter additions of one stream one kSignal, so a call enqueues one
// batch of stream memory operations (one graph node, one patch) and one counter-addition
// kernel where it enqueued many.
#pragma once

#include <cstddef>
#include <vector>

#include "sequence_state.hpp"
#include "tide/kernels/signal/counter_add.hpp"

namespace tide::exec::sequence_detail {

// cuStreamBatchMemOp takes fewer than 256 operations (cuda.h; the driver reports no attribute
// for it). Graph wait kernels split a longer wait into launches of 32
// (tide/kernels/signal/generation_wait.hpp).
inline constexpr std::size_t kMaxBatchWaits = 255;

struct FusionLimits {
  std::size_t waits = kMaxBatchWaits;                    // terms of one kWait
  std::size_t adds = kernels::kMaxCounterAddsPerLaunch;  // terms of one kSignal
};

// Returns `ops` (one template's local ops in enqueue order, as map_op leaves them) with:
//   - ops that enqueue nothing (empty, kRelease) dropped;
//   - every kWait carrying `waits` and every kSignal `adds`; a kRailPut split into its
//     copies (a kCopy) and its addition (a kSignal);
//   - a run of waits of one stream, with no op of that stream between them, one kWait at the
//     place of the LAST of them: a wait moved later is still after every signal it needs,
//     and nothing of its stream ran in between. Terms on one counter keep the highest
//     threshold (same base, so it implies the others);
//   - a run of counter additions of one stream one kSignal at the place of the FIRST of them:
//     an addition moved earlier still follows every op of its stream it guarded (none lies
//     between), and every wait for it still comes after it. Additions to one word are
//     summed, in order;
//   - a run longer than the limits split into several.
// Ops of other streams between them are not reordered: the enqueue order stays a legal
// serial order (NOTE [enqueue order]).
std::vector<SeqOp> fuse_waits_and_signals(std::vector<SeqOp> ops, const FusionLimits& limits = {});

}  // namespace tide::exec::sequence_detail
