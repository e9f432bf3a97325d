// TIDE's training step from the runtime's own multi-call programs (training_step.hpp).
#include "tide/program/training_step.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "tide/core/error.hpp"
#include "tide/program/lanes.hpp"

namespace tide::program {
namespace {

// Group g's sequences. The runtime's SequenceOptions build warmup + 3 max_period = 32 calls
// of every rank to find a period; a warm-up of 2 and periods of at most 2 calls (8 calls)
// find the same templates for a step's groups (call_sequence_test.cpp compares them). A
// longer period falls back to the runtime's options.
GroupSequences quick_sequences(const std::vector<ArenaGroup>& list, const CommunicatorArena& arena,
                               std::size_t g, const StepOptions& options) {
  SequenceOptions quick;
  quick.max_period = 2;
  quick.warmup = 2;
  try {
    return group_sequences(list, arena, g, options.reduce_scatter, options.fault, quick);
  } catch (const Unsupported&) {
    return group_sequences(list, arena, g, options.reduce_scatter, options.fault);
  }
}

// The groups' sequences as the runtime places them (steps 1-2).
struct Placed {
  CommunicatorArena arena;
  std::vector<GroupSequences> sequences;
  std::vector<LaneGroup> lanes;
};

void place(const std::vector<StepGroup>& groups, const StepOptions& options, Placed& out) {
  std::vector<ArenaGroup> list;
  for (std::size_t g = 0; g < groups.size(); ++g)
    list.push_back({groups[g].all_gather, groups[g].reduce_scatter, static_cast<int>(g % 2)});
  out.arena = communicator_arena(list);
  out.sequences.reserve(groups.size());
  int counter = kHandoffWords;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out.sequences.push_back(quick_sequences(list, out.arena, g, options));
    const GroupSequences& s = out.sequences.back();
    LaneGroup lane;
    lane.all_gather = &s.all_gather;
    lane.reduce_scatter = &s.reduce_scatter;
    lane.all_gather_first_counter = counter;
    counter += s.all_gather.counters;
    lane.reduce_scatter_first_counter = counter;
    counter += s.reduce_scatter.counters;
    lane.landing_slot = out.arena.slot_of[g];
    lane.landing_offset = out.arena.all_gather[g].landing;
    lane.landing_bytes = groups[g].all_gather->layout().unsharded_bytes();
    lane.name = groups[g].name;
    out.lanes.push_back(std::move(lane));
  }
}

std::vector<LaneCall> lane_calls(const std::vector<StepCall>& calls) {
  std::vector<LaneCall> out;
  for (const StepCall& c : calls)
    out.push_back({c.group, c.kind == StepCallKind::kReduceScatter});
  return out;
}

// kStepCallOrder: the last rank's ops become those of `swapped` (the first two
// reduce-scatters in the other order), with each call's buffers and streams mapped to where
// `normal` has that call, so every rank keeps one set of buffers.
void splice_faulty_rank(Program& normal, const std::vector<LaneCallBuffers>& normal_calls,
                        const LaneProgram& swapped, const std::vector<int>& position_in_normal) {
  const int faulty = normal.ranks - 1;
  const int tensors = static_cast<int>(swapped.program.buffers.front().tensor_bytes.size());
  std::map<int, int> tensor_of, output_of;
  for (std::size_t k = 0; k < swapped.calls.size(); ++k) {
    const LaneCallBuffers& from = swapped.calls[k];
    const LaneCallBuffers& to = normal_calls[static_cast<std::size_t>(position_in_normal[k])];
    const int end = k + 1 < swapped.calls.size() ? swapped.calls[k + 1].first_tensor : tensors;
    for (int t = from.first_tensor; t < end; ++t)
      tensor_of[t] = to.first_tensor + (t - from.first_tensor);
    if (from.output >= 0) output_of[from.output] = to.output;
  }
  std::erase_if(normal.ops, [&](const Op& op) { return op.rank == faulty; });
  for (Op op : swapped.program.ops) {
    if (op.rank != faulty) continue;
    op.stream = normal.stream(swapped.program.stream_names[static_cast<std::size_t>(op.stream)]);
    for_each_region(op, [&](Region& r) {
      if (r.buffer.space == Space::kTensor) r.buffer.index = tensor_of.at(r.buffer.index);
      if (r.buffer.space == Space::kOutput) r.buffer.index = output_of.at(r.buffer.index);
    });
    if (auto* sum = op.get_if<SumOp>()) {
      for (SumSegment& seg : sum->segments)
        if (seg.space == Space::kTensor) seg.param = tensor_of.at(seg.param);
    }
    normal.ops.push_back(std::move(op));
  }
  normal.calls[static_cast<std::size_t>(faulty)] =
      swapped.program.calls[static_cast<std::size_t>(faulty)];
  normal.counters = std::max(normal.counters, swapped.program.counters);
  normal.events = std::max(normal.events, swapped.program.events);
}

}  // namespace

std::vector<StepCall> fsdp2_issue_order(int groups) {
  // post_backward enqueues the reduce-scatter before the next pre_backward's all-gather
  // (Sec. 5.1).
  std::vector<StepCall> calls;
  for (int g = 0; g < groups; ++g)
    calls.push_back(StepCall{StepCallKind::kAllGather, g, true});
  for (int g = groups - 1; g >= 0; --g) {
    calls.push_back(StepCall{StepCallKind::kAllGather, g, false});
    calls.push_back(StepCall{StepCallKind::kReduceScatter, g, false});
  }
  return calls;
}

StepProgram build_step_program(const std::vector<StepGroup>& groups, const StepOptions& options) {
  if (groups.empty()) throw InvalidArgument("a step needs at least one parameter group");
  for (const StepGroup& g : groups) {
    if (!g.all_gather || !g.reduce_scatter) {
      throw InvalidArgument("step group '" + g.name +
                            "' lacks an all-gather or reduce-scatter plan");
    }
    if (!(g.reduce_scatter->layout().topology() == g.all_gather->layout().topology()) ||
        !(g.all_gather->layout().topology() == groups.front().all_gather->layout().topology())) {
      throw InvalidArgument("every group of a step must use the same M x L topology");
    }
  }
  if (const std::string why = step_fault_inapplicable(options.fault, groups, options);
      !why.empty()) {
    throw InvalidArgument("fault " + std::string(fault_info(options.fault).name) +
                          " cannot show in this step: " + why);
  }
  // 1-2.
  Placed placed;
  place(groups, options, placed);
  // 3.
  StepProgram out;
  out.calls = fsdp2_issue_order(static_cast<int>(groups.size()));
  LaneProgramOptions lane_options;
  lane_options.fault = options.fault;
  LaneProgram lp = lane_program(placed.lanes, lane_calls(out.calls), lane_options);
  const CommunicatorArena& arena = placed.arena;
  for (std::size_t k = 0; k < out.calls.size(); ++k) {
    StepCall& call = out.calls[k];
    call.output = lp.calls[k].output;
    call.tensor_base = lp.calls[k].first_tensor;
    call.done_event = lp.calls[k].done_event;
    const int slot = arena.slot_of[static_cast<std::size_t>(call.group)];
    call.landing_slot = arena.slots[static_cast<std::size_t>(slot)].id;
  }
  if (options.fault == Fault::kStepCallOrder) {
    // The last rank issues the first two reduce-scatters in the other order.
    std::vector<StepCall> swapped = out.calls;
    std::vector<int> position(out.calls.size());
    for (std::size_t k = 0; k < position.size(); ++k)
      position[k] = static_cast<int>(k);
    std::vector<std::size_t> rs;
    for (std::size_t k = 0; k < swapped.size(); ++k)
      if (swapped[k].kind == StepCallKind::kReduceScatter) rs.push_back(k);
    std::swap(swapped[rs[0]], swapped[rs[1]]);
    std::swap(position[rs[0]], position[rs[1]]);
    const LaneProgram other = lane_program(placed.lanes, lane_calls(swapped), lane_options);
    splice_faulty_rank(lp.program, lp.calls, other, position);
  }
  out.program = std::move(lp.program);
  out.arena = placed.arena;
  out.held_bytes = tide_step_held_bytes(groups, out.arena.arena_bytes);
  return out;
}

std::string step_fault_inapplicable(Fault fault, const std::vector<StepGroup>& groups,
                                    const StepOptions& options) {
  const std::size_t count = groups.size();
  const Topology& topo = groups.front().all_gather->layout().topology();
  switch (fault) {
    case Fault::kNone:
      return "";
    case Fault::kStepCallOrder:
      // The swapped calls show as a call-order mismatch whatever their shapes (NOTE [call
      // identities]).
      return count >= 2 && topo.world() >= 2
                 ? ""
                 : "needs two reduce-scatters and two ranks (use --layers 2 or more)";
    case Fault::kAgNoLandingReadiness:
      return "every rank signals the lane handoff after its slot's release, so the handoff "
             "orders the scatters after the landings' previous users (NOTE [lane handoff]); it "
             "shows on one call (tide simulate all-gather)";
    case Fault::kLaneNoHandoff:
      return topo.nodes() == 1 ? "on one node a call's own completion orders what the handoff "
                                 "would (NOTE [lane handoff]; use --nodes 2 or more)"
                               : "";
    case Fault::kAgNoSlotRelease:
      return "";
    case Fault::kAgNoCompletionFence:
      if (topo.gpus_per_node() == 1) {
        return "with one GPU per node the lane joins the call's own scatter before its layer "
               "reads (NOTE [lane handoff]; use --gpus-per-node 2 or more)";
      }
      break;
    default:
      break;
  }
  const FaultInfo& info = fault_info(fault);
  if (info.collective == "all-gather") {
    return ag_fault_inapplicable(fault, *groups.front().all_gather);
  }
  if (info.collective != "reduce-scatter") return fault_collective_mismatch(fault, "step");
  return rs_fault_inapplicable(fault, *groups.front().reduce_scatter, options.reduce_scatter);
}

}  // namespace tide::program
