// A training step as FSDP2 issues its collectives (Sec. 5.1-5.3, App. F): the forward
// all-gathers of every group in order, then, for each group in reverse order, its backward
// all-gather (re-gather after reshard), the layer's backward on the compute stream and its
// reduce-scatter. Every call shares one arena per rank, the streams and the cross-call
// counters of its collective, so buffer reuse across calls is exercised:
//   - TIDE-AG: the a-th all-gather lands in ring slot a mod 2 (App. F); it waits until the
//     slot's previous user (call a - 2's layer) is done with it; it receives into stage area
//     a mod 2 (StepOptions::ag_stages), and its rounds put into a target's area only after
//     that target's per-area credit for the area's previous call (Sec. 3.1); with a cast, its
//     caller stream first waits for this rank's previous scatter from that area (Sec. 3.2).
//   - TIDE-RS: call e uses bank e mod 2 (Sec. 5.2), after call e - 2 sent that bank's outbox
//     and landed its spares; staging FREE/STAGED and inbox INBOX_FREE counters run on across
//     calls, and a wave that reuses an inbox generation used by an earlier call waits for its
//     credit (App. E, I3).
// Synchronisation with the model: each layer (the compute stream) reads its parameters after
// the all-gather's ready event (a copy of the landing into that call's output, which the
// checks read) and records when it is done; a reduce-scatter starts after its layer's
// backward (that event). All calls are issued in the same order on every rank (I4).
#pragma once

#include <string>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/ag_builder.hpp"
#include "tide/program/faults.hpp"
#include "tide/program/fsdp2_baseline.hpp"
#include "tide/program/program.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide::program {

// One parameter group of the step: its all-gather and reduce-scatter plans (same topology
// for every group; the reduce-scatter plans share their options).
struct StepGroup {
  std::string name;
  const AgPlan* all_gather = nullptr;
  const RsPlan* reduce_scatter = nullptr;
};

enum class StepCallKind { kAllGather, kReduceScatter };

// One call of the step, in issue order.
struct StepCall {
  StepCallKind kind = StepCallKind::kAllGather;
  int group = 0;
  bool forward = true;   // all-gathers: forward or backward (re-gather)
  int output = 0;        // kOutput index: the layer's view of the parameters, or the fp32 shard
  int tensor_base = 0;   // kTensor index of its first gradient (RS) or fp32 master shard (AG cast)
  int done_event = 0;    // AG: parameters ready; RS: reduce-scatter done (network order)
  int landing_slot = 0;  // AG: ring slot a mod 2
};

struct StepOptions {
  RsProgramOptions reduce_scatter;  // alpha, accumulate, CTA budgets, landing style
  // A fault on every rank (a reduce-scatter or all-gather fault applies to every such call;
  // kStepCallOrder swaps the first two reduce-scatters on the last rank).
  Fault fault = Fault::kNone;
  // All-gather receive stages: with 2, call a uses stage a mod 2, so its rounds wait for the
  // targets' credits of call a - 2 rather than a - 1 and consecutive all-gathers overlap, at
  // the cost of a second stage ((2^R - 1) S bytes); with 1, every call waits for its
  // targets to have scattered the previous call.
  int ag_stages = 2;
};

// Where the step keeps its bytes in each rank's arena.
struct StepArenaLayout {
  std::vector<std::int64_t> resident;  // per group: its resident shard (absent with a cast)
  std::int64_t stage[2] = {0, 0};      // all-gather receive stages (largest group's); equal
                                       // offsets when the step has one
  std::int64_t landing[2] = {0, 0};    // the two all-gather ring slots
  std::int64_t reduce_scatter = 0;     // TIDE-RS's areas (RsArenaLayout offsets added to it)
  RsArenaLayout rs;                    // already offset by reduce_scatter
  std::int64_t arena_bytes = 0;
};

// NOTE [step memory]
// What a step's collectives hold per GPU at their peak, as each system holds it. Both counts
// leave out what both systems hold alike: the running layer's gradients, the reduce-scatter
// outputs (the sharded gradients), optimizer state and activations.
//   TIDE: its arena (resident shards, receive stages, the two ring slots, TIDE-RS's areas;
//     StepArenaLayout) plus, In-Place, one more group's bf16 gradients: TIDE-RS reads the
//     previous group's gradients in place until its reads complete, so two gradient groups
//     are briefly live (Sec. 5.3); Slot-Reuse moves them into a vacated ring slot.
//   Stock FSDP2: the sharded parameters (what TIDE keeps as resident shards) plus the peak
//     over the step of the collective buffers its caching allocator holds (Sec. 5.4), with
//     U_g = N S_g the unsharded (padded) parameters of group g and P_g = N S_fp32 its fp32
//     reduce-scatter input:
//       forward of g:   U_g + U_{g+1}            (the all-gather prefetched at depth 1)
//       backward of g:  U_g + U_{g-1} + P_{g+1}  (the prefetched backward all-gather on its
//                       own stream, which the reduce-scatter never reuses, and the previous
//                       group's reduce-scatter input, kept until the next post_backward
//                       observes its completion)
//     With equal groups that is the paper's 4 NS during backward. The all-gather's rank-major
//     flat buffer is freed after its copy-out and counts as the U of its group.
// The stock program itself still gives every call its own arena region (fsdp2 step builder):
// those are addresses for the executor, not memory FSDP2 holds.
std::int64_t tide_step_held_bytes(const std::vector<StepGroup>& groups, std::int64_t arena_bytes);
std::int64_t fsdp2_step_held_bytes(const std::vector<StepGroup>& groups);

struct StepProgram {
  Program program;
  std::vector<StepCall> calls;
  StepArenaLayout arena;
  std::int64_t held_bytes = 0;  // NOTE [step memory]
};

StepProgram build_step_program(const std::vector<StepGroup>& groups, const StepOptions& options);

// Stock FSDP2's calls in the same order (fsdp2_baseline.hpp), for comparison: each call keeps
// its own arena region (addresses for the executor; what FSDP2 holds is `held_bytes`, also
// given as `arena.arena_bytes`: NOTE [step memory]), the all-gather's copy-out and the layer's read
// run on the compute stream, the reduce-scatter (packing and ring) on the reduce-scatter stream
// after its layer's backward. Only `reduce_scatter.alpha` and `accumulate` of `options` apply.
StepProgram build_fsdp2_step_program(const std::vector<StepGroup>& groups,
                                     const StepOptions& options);

// Why `fault` cannot show in a step of `groups` (empty when it can).
std::string step_fault_inapplicable(Fault fault, const std::vector<StepGroup>& groups,
                                    const StepOptions& options);

}  // namespace tide::program
