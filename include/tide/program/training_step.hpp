// A training step as FSDP2 issues its collectives (Sec. 5.1-5.3, App. F), from the runtime's
// own programs, so `tide simulate step` predicts what it runs: (1) the communicator arena,
// group g in slot g mod 2; (2) each group's sequences placed as the runtime places them;
// (3) the calls in FSDP2's order (forward all-gathers, then per group in reverse its backward
// all-gather and reduce-scatter) through the lanes, each layer reading its parameters on the
// compute stream. Every cross-call edge is the runtime's; every rank issues the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/communicator_arena.hpp"
#include "tide/program/faults.hpp"
#include "tide/program/program.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide::program {

// One parameter group of the step: its all-gather and reduce-scatter plans (one topology).
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
  int landing_slot = 0;  // AG: its group's landing slot id
};

// The calls in FSDP2's issue order (buffers and events not set).
std::vector<StepCall> fsdp2_issue_order(int groups);

struct StepOptions {
  RsProgramOptions reduce_scatter;  // the reduce-scatter calls' options (the runtime's defaults)
  // A fault on every rank: a collective's fault on every such call, a communicator fault on the
  // lanes; kStepCallOrder swaps the first two reduce-scatters on the last rank.
  Fault fault = Fault::kNone;
};

// Per GPU at the step's peak, leaving out what both hold alike (the running layer's gradients,
// the sharded gradients, optimizer state, activations). TIDE: its arena plus, In-Place, one
// more group's bf16 gradients. Stock FSDP2: the sharded parameters plus the peak over the step
// of its collective buffers, max over g of U_g + U_{g+1} (forward) and U_g + U_{g-1} + P_{g+1}
// (backward), U_g = N S_g, P_g = N S_fp32. Why: NOTE [step memory] in docs/program.md.
std::int64_t tide_step_held_bytes(const std::vector<StepGroup>& groups, std::int64_t arena_bytes);
std::int64_t fsdp2_step_held_bytes(const std::vector<StepGroup>& groups);

struct StepProgram {
  Program program;
  std::vector<StepCall> calls;
  // TIDE: the communicator's arena; stock FSDP2: only arena_bytes, its held bytes.
  CommunicatorArena arena;
  std::int64_t held_bytes = 0;  // NOTE [step memory]
};

// TIDE's step (steps 1-3 above). Throws InvalidArgument for no groups, a missing plan, plans
// of different topologies, or a fault that cannot show (step_fault_inapplicable).
StepProgram build_step_program(const std::vector<StepGroup>& groups, const StepOptions& options);

// Stock FSDP2's calls in the same order (fsdp2_baseline.hpp; each its own arena region, held
// bytes as NOTE [step memory]); the reduce-scatter on its own stream after the layer's backward.
// Of `options` only `reduce_scatter.alpha` and `accumulate` apply.
StepProgram build_fsdp2_step_program(const std::vector<StepGroup>& groups,
                                     const StepOptions& options);

// Why `fault` cannot show in a step of `groups` (empty when it can).
std::string step_fault_inapplicable(Fault fault, const std::vector<StepGroup>& groups,
                                    const StepOptions& options);

}  // namespace tide::program
