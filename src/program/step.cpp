// Builds a training step's program from per-call builders (see step.hpp for the order and
// the cross-call synchronisation it adds).
#include "tide/program/step.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "tide/core/error.hpp"

namespace tide::program {
namespace {

// Appends `call`'s ops to `step`, mapping its stream indices by name. Counter, event and
// buffer ids are already the step's (the builders were given their placement).
void append(Program& step, Program&& call) {
  std::vector<int> streams;
  for (const std::string& name : call.stream_names)
    streams.push_back(step.stream(name));
  for (Op& op : call.ops) {
    op.stream = streams[static_cast<std::size_t>(op.stream)];
    step.ops.push_back(std::move(op));
  }
  step.counters = std::max(step.counters, call.counters);
  step.events = std::max(step.events, call.events);
}

// The calls in FSDP2's issue order: forward all-gathers, then per group in reverse order its
// backward all-gather and its reduce-scatter (post_backward enqueues the reduce-scatter
// before the next pre_backward's all-gather; Sec. 5.1).
std::vector<StepCall> issue_order(int groups) {
  std::vector<StepCall> calls;
  for (int g = 0; g < groups; ++g)
    calls.push_back(StepCall{StepCallKind::kAllGather, g, true});
  for (int g = groups - 1; g >= 0; --g) {
    calls.push_back(StepCall{StepCallKind::kAllGather, g, false});
    calls.push_back(StepCall{StepCallKind::kReduceScatter, g, false});
  }
  return calls;
}

StepArenaLayout step_arena(const std::vector<StepGroup>& groups) {
  StepArenaLayout a;
  std::int64_t at = 0;
  std::int64_t stage = 0, landing = 0;
  std::vector<const RsPlan*> rs_plans;
  for (const StepGroup& g : groups) {
    const AgPlan& plan = *g.all_gather;
    a.resident.push_back(at);
    if (!plan.options().mixed_precision_cast) at += plan.layout().shard_bytes();
    stage = std::max(stage, plan.stage_bytes());
    landing = std::max(landing, plan.layout().unsharded_bytes());
    rs_plans.push_back(g.reduce_scatter);
  }
  a.stage = at;
  a.landing[0] = a.stage + stage;
  a.landing[1] = a.landing[0] + landing;
  a.reduce_scatter = a.landing[1] + landing;
  a.rs = rs_arena_layout(rs_plans);
  for (std::int64_t* offset : {&a.rs.staging, &a.rs.outbox, &a.rs.spares, &a.rs.inbox})
    *offset += a.reduce_scatter;
  a.arena_bytes = a.reduce_scatter + a.rs.arena_bytes;
  a.rs.arena_bytes = a.arena_bytes;
  return a;
}

// Builds every call in `calls` order (their `group` fields may have been permuted for a
// call-order fault) into one program.
Program build_calls(std::vector<StepCall>& calls, const std::vector<StepGroup>& groups,
                    const StepOptions& options, const StepArenaLayout& arena) {
  const Topology& topo = groups.front().all_gather->layout().topology();
  Program step;
  step.ranks = topo.world();
  const int rounds = static_cast<int>(groups.front().all_gather->rounds().size());
  AgShared ag;
  ag.stage_credit = 0;
  std::vector<const RsPlan*> rs_plans;
  for (const StepGroup& g : groups)
    rs_plans.push_back(g.reduce_scatter);
  RsShared rs = rs_shared_state(rs_plans, rounds);
  rs.areas = arena.rs;
  int next_counter = rs.landings_done + 1;
  int next_event = 0;
  std::vector<int> used_events;  // per all-gather call: its layer finished with the landing
  std::vector<int> backward_used(groups.size(), -1);
  const Fault call_fault = options.fault;
  const std::string_view collective =
      call_fault == Fault::kNone ? std::string_view() : fault_info(call_fault).collective;
  for (StepCall& call : calls) {
    const StepGroup& group = groups[static_cast<std::size_t>(call.group)];
    CallPlacement at;
    at.counter_base = next_counter;
    at.event_base = next_event;
    at.tensor_base = call.tensor_base;
    at.output = call.output;
    Program program;
    if (call.kind == StepCallKind::kAllGather) {
      const int a = static_cast<int>(used_events.size());
      call.landing_slot = a % 2;
      AgArenaLayout areas;
      areas.resident = arena.resident[static_cast<std::size_t>(call.group)];
      areas.stage = arena.stage;
      areas.landing = arena.landing[call.landing_slot];
      areas.arena_bytes = arena.arena_bytes;
      at.entry_event = a >= 2 ? used_events[static_cast<std::size_t>(a - 2)] : -1;
      AgProgramOptions o;
      o.consumer = true;
      o.previous_user = false;
      o.fault = collective == "all-gather" || call_fault == Fault::kAgNoStageCredit ? call_fault
                                                                                    : Fault::kNone;
      AgProgramIds ids;
      program = build_ag_call(*group.all_gather, o, at, areas, ag, &ids);
      used_events.push_back(ids.used_event);
      if (!call.forward) backward_used[static_cast<std::size_t>(call.group)] = ids.used_event;
      call.done_event = ids.ready_event;
    } else {
      at.entry_event = backward_used[static_cast<std::size_t>(call.group)];
      RsProgramOptions o = options.reduce_scatter;
      o.fault = collective == "reduce-scatter" || call_fault == Fault::kRsBankReuse ? call_fault
                                                                                    : Fault::kNone;
      RsProgramIds ids;
      program = build_rs_call(*group.reduce_scatter, o, at, rs, &ids);
      call.done_event = ids.done_event;
    }
    next_counter = std::max(next_counter, program.counters);
    next_event = std::max(next_event, program.events);
    append(step, std::move(program));
  }
  return step;
}

}  // namespace

StepProgram build_step_program(const std::vector<StepGroup>& groups, const StepOptions& options) {
  if (groups.empty()) throw InvalidArgument("a step needs at least one parameter group");
  const Topology& topo = groups.front().all_gather->layout().topology();
  for (const StepGroup& g : groups) {
    if (!g.all_gather || !g.reduce_scatter) {
      throw InvalidArgument("step group '" + g.name +
                            "' lacks an all-gather or reduce-scatter plan");
    }
    const Topology& t = g.all_gather->layout().topology();
    const Topology& u = g.reduce_scatter->layout().topology();
    if (t.nodes() != topo.nodes() || t.gpus_per_node() != topo.gpus_per_node() ||
        u.nodes() != topo.nodes() || u.gpus_per_node() != topo.gpus_per_node()) {
      throw InvalidArgument("every group of a step must use the same M x L topology");
    }
  }
  if (const std::string why = step_fault_inapplicable(options.fault, groups, options);
      !why.empty()) {
    throw InvalidArgument("fault " + std::string(fault_info(options.fault).name) +
                          " cannot show in this step: " + why);
  }

  StepProgram out;
  out.arena = step_arena(groups);
  out.calls = issue_order(static_cast<int>(groups.size()));

  // Buffers: per group, the fp32 master shards (with a cast) and the gradients; one output
  // per call.
  BufferSizes sizes;
  sizes.arena_bytes = out.arena.arena_bytes;
  std::vector<int> ag_tensors, rs_tensors;
  for (const StepGroup& g : groups) {
    const GroupLayout& ag = g.all_gather->layout();
    ag_tensors.push_back(static_cast<int>(sizes.tensor_bytes.size()));
    if (g.all_gather->options().mixed_precision_cast) {
      for (const ParamLayout& pl : ag.params())
        sizes.tensor_bytes.push_back(pl.shard_elems() * 4);
    }
    const GroupLayout& rs = g.reduce_scatter->layout();
    rs_tensors.push_back(static_cast<int>(sizes.tensor_bytes.size()));
    for (const ParamLayout& pl : rs.params())
      sizes.tensor_bytes.push_back(pl.rows * pl.cols * item_bytes(rs.grad_dtype()));
  }
  for (std::size_t i = 0; i < out.calls.size(); ++i) {
    StepCall& call = out.calls[i];
    const StepGroup& g = groups[static_cast<std::size_t>(call.group)];
    call.output = static_cast<int>(i);
    if (call.kind == StepCallKind::kAllGather) {
      call.tensor_base = ag_tensors[static_cast<std::size_t>(call.group)];
      sizes.output_bytes.push_back(g.all_gather->layout().unsharded_bytes());
    } else {
      call.tensor_base = rs_tensors[static_cast<std::size_t>(call.group)];
      sizes.output_bytes.push_back(g.reduce_scatter->layout().fp32_shard_bytes());
    }
  }

  StepOptions built = options;
  if (options.fault == Fault::kStepCallOrder) built.fault = Fault::kNone;
  out.program = build_calls(out.calls, groups, built, out.arena);
  if (options.fault == Fault::kStepCallOrder) {
    // The last rank runs the first two reduce-scatters in the other order: its program is
    // that of a step whose first two reduce-scatter positions hold each other's groups.
    std::vector<StepCall> swapped = out.calls;
    std::vector<std::size_t> rs_positions;
    for (std::size_t i = 0; i < swapped.size(); ++i) {
      if (swapped[i].kind == StepCallKind::kReduceScatter) rs_positions.push_back(i);
    }
    StepCall& first = swapped[rs_positions[0]];
    StepCall& second = swapped[rs_positions[1]];
    std::swap(first.group, second.group);
    std::swap(first.tensor_base, second.tensor_base);
    const Program other = build_calls(swapped, groups, built, out.arena);
    const int faulty = topo.world() - 1;
    std::erase_if(out.program.ops, [&](const Op& op) { return op.rank == faulty; });
    for (const Op& op : other.ops) {
      if (op.rank == faulty) out.program.ops.push_back(op);
    }
    out.program.counters = std::max(out.program.counters, other.counters);
    out.program.events = std::max(out.program.events, other.events);
  }
  out.program.buffers.assign(static_cast<std::size_t>(out.program.ranks), sizes);
  return out;
}

std::string step_fault_inapplicable(Fault fault, const std::vector<StepGroup>& groups,
                                    const StepOptions& options) {
  const std::size_t count = groups.size();
  const Topology& topo = groups.front().all_gather->layout().topology();
  switch (fault) {
    case Fault::kNone:
      return "";
    case Fault::kAgNoStageCredit:
      return topo.nodes() > 1 ? "" : "a single node has no receive stage (use --nodes 2 or more)";
    case Fault::kRsBankReuse:
      return count >= 3 ? ""
                        : "bank e mod 2 is reused from the third reduce-scatter on (use "
                          "--layers 3 or more)";
    case Fault::kStepCallOrder:
      return count >= 2 && topo.world() > 1
                 ? ""
                 : "needs two reduce-scatters and two ranks (use --layers 2 or more)";
    default:
      break;
  }
  const FaultInfo& info = fault_info(fault);
  if (info.collective == "all-gather") {
    return ag_fault_inapplicable(fault, *groups.front().all_gather);
  }
  return rs_fault_inapplicable(fault, *groups.front().reduce_scatter, options.reduce_scatter);
}

}  // namespace tide::program
