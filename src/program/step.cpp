// Builds a training step's program from per-call builders (see step.hpp for the order and
// the cross-call synchronisation it adds).
#include "tide/program/step.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "tide/core/error.hpp"

namespace tide::program {
namespace {

// Appends `call`'s ops to `step`, mapping its stream indices by name with `prefix` (each
// collective has its own streams, as FSDP2's all-gather and reduce-scatter streams are
// distinct; the compute stream is shared). Counter, event and buffer ids are already the
// step's.
void append(Program& step, Program&& call, const std::string& prefix) {
  std::vector<int> streams;
  for (const std::string& name : call.stream_names)
    streams.push_back(step.stream(name == "compute" ? name : prefix + name));
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

StepArenaLayout step_arena(const std::vector<StepGroup>& groups, int ag_stages,
                           LandingStyle rs_landing) {
  StepArenaLayout a;
  std::int64_t at = 0;
  std::int64_t stage = 0, landing = 0;
  std::vector<const RsPlan*> rs_plans;
  // Every area starts on a 256-byte boundary: a bf16 shard of odd length must not leave the
  // fp32 areas after it misaligned (kernels want 16-byte vectors where they can).
  constexpr std::int64_t kAlign = 256;
  auto aligned = [](std::int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; };
  for (const StepGroup& g : groups) {
    const AgPlan& plan = *g.all_gather;
    a.resident.push_back(at);
    if (!plan.options().shard_in_stage()) at = aligned(at + plan.layout().shard_bytes());
    stage = std::max(stage, aligned(plan.stage_bytes()));
    landing = std::max(landing, aligned(plan.layout().unsharded_bytes()));
    rs_plans.push_back(g.reduce_scatter);
  }
  a.stage[0] = at;
  a.stage[1] = ag_stages == 2 ? a.stage[0] + stage : a.stage[0];
  a.landing[0] = a.stage[1] + stage;
  a.landing[1] = a.landing[0] + landing;
  a.reduce_scatter = a.landing[1] + landing;
  a.rs = rs_arena_layout(rs_plans, rs_landing);
  for (std::int64_t* offset : {&a.rs.staging, &a.rs.outbox, &a.rs.spares, &a.rs.inbox})
    *offset += a.reduce_scatter;
  if (a.rs.gradients >= 0) a.rs.gradients += a.reduce_scatter;  // NOTE [one-node TIDE-RS]
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
  // One AgShared per receive-stage area: call a uses area a mod 2 (with one area, both
  // entries are the same object), with its own stage-credit counters.
  std::vector<AgShared> ag_areas(2);
  const int ag_area_count = arena.stage[0] == arena.stage[1] ? 1 : 2;
  ag_areas[0].stage_credit = 0;
  ag_areas[1].stage_credit = rounds;
  std::vector<const RsPlan*> rs_plans;
  for (const StepGroup& g : groups)
    rs_plans.push_back(g.reduce_scatter);
  RsShared rs = rs_shared_state(rs_plans, 2 * rounds, options.reduce_scatter.landing);
  rs.areas = arena.rs;
  int next_counter = rs.landings_done + 1;
  int next_event = 0;
  std::vector<int> used_events;  // per all-gather call: its layer finished with the landing
  std::vector<int> backward_used(groups.size(), -1);
  const Fault call_fault = options.fault;
  const std::string_view collective =
      call_fault == Fault::kNone ? std::string_view() : fault_info(call_fault).collective;
  std::vector<CallIdentity> identities;
  for (std::size_t position = 0; position < calls.size(); ++position) {
    StepCall& call = calls[position];
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
      AgShared& ag = ag_areas[static_cast<std::size_t>(a % ag_area_count)];
      areas.stage = arena.stage[a % ag_area_count];
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
    for (Op& op : program.ops)  // NOTE [call identities]
      op.call = static_cast<int>(position);
    identities.push_back(CallIdentity{
        call.group, call.kind == StepCallKind::kAllGather ? "all-gather" : "reduce-scatter",
        group.name});
    append(step, std::move(program),
           call.kind == StepCallKind::kAllGather ? "all_gather." : "reduce_scatter.");
  }
  step.calls.assign(static_cast<std::size_t>(step.ranks), identities);
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
  if (options.ag_stages != 1 && options.ag_stages != 2) {
    throw InvalidArgument("the all-gather receive stage count must be 1 or 2 (got " +
                          std::to_string(options.ag_stages) + ")");
  }
  out.arena = step_arena(groups, options.ag_stages, options.reduce_scatter.landing);
  out.calls = issue_order(static_cast<int>(groups.size()));

  // Buffers: per group, the fp32 master shards (with a cast) and the gradients; one output
  // per call.
  BufferSizes sizes;
  sizes.arena_bytes = out.arena.arena_bytes;
  std::vector<int> ag_tensors, rs_tensors;
  for (const StepGroup& g : groups) {
    ag_tensors.push_back(static_cast<int>(sizes.tensor_bytes.size()));
    for (std::int64_t bytes : ag_input_bytes(*g.all_gather))
      sizes.tensor_bytes.push_back(bytes);
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
    std::swap(first.output, second.output);  // each call writes its own group's output
    const Program other = build_calls(swapped, groups, built, out.arena);
    const int faulty = topo.world() - 1;
    std::erase_if(out.program.ops, [&](const Op& op) { return op.rank == faulty; });
    for (const Op& op : other.ops) {
      if (op.rank == faulty) out.program.ops.push_back(op);
    }
    out.program.calls[static_cast<std::size_t>(faulty)] =
        other.calls[static_cast<std::size_t>(faulty)];
    out.program.counters = std::max(out.program.counters, other.counters);
    out.program.events = std::max(out.program.events, other.events);
  }
  out.program.buffers.assign(static_cast<std::size_t>(out.program.ranks), sizes);
  out.held_bytes = tide_step_held_bytes(groups, out.arena.arena_bytes);
  return out;
}

namespace {

// Moves every id of a lone call's program into the step's: counters and events by a base,
// tensors by `tensor_base`, output 0 to `output`, arena bytes by `arena_base`; stream names
// through `rename` (from -> to).
struct LonePlacement {
  int counter_base = 0, event_base = 0, tensor_base = 0, output = 0;
  std::int64_t arena_base = 0;
  std::string prefix;  // of every stream name but the compute stream's
};

void place_region(Region& r, const LonePlacement& at) {
  switch (r.buffer.space) {
    case Space::kArena:
      r.offset += at.arena_base;
      break;
    case Space::kTensor:
      r.buffer.index += at.tensor_base;
      break;
    case Space::kOutput:
      r.buffer.index = at.output;
      break;
  }
}

void append_lone(Program& step, Program&& call, const LonePlacement& at) {
  for (Op& op : call.ops) {
    for_each_region(op, [&](Region& r) { place_region(r, at); });
    if (auto* sum = op.get_if<SumOp>()) {
      for (SumSegment& seg : sum->segments)
        if (seg.space == Space::kTensor) seg.param += at.tensor_base;
    }
    if (Counter* counter = counter_of(op)) counter->id += at.counter_base;
    if (int* event = event_of(op)) *event += at.event_base;
  }
  call.counters += at.counter_base;
  call.events += at.event_base;
  append(step, std::move(call), at.prefix);
}

}  // namespace

StepProgram build_fsdp2_step_program(const std::vector<StepGroup>& groups,
                                     const StepOptions& options) {
  if (groups.empty()) throw InvalidArgument("a step needs at least one parameter group");
  StepProgram out;
  out.calls = issue_order(static_cast<int>(groups.size()));
  Program& step = out.program;
  step.ranks = groups.front().all_gather->layout().topology().world();
  BufferSizes sizes;
  std::vector<int> ag_tensors, rs_tensors;
  for (const StepGroup& g : groups) {
    const GroupLayout& layout = g.all_gather->layout();
    ag_tensors.push_back(static_cast<int>(sizes.tensor_bytes.size()));
    for (const ParamLayout& pl : layout.params())
      sizes.tensor_bytes.push_back(pl.shard_bytes);
    rs_tensors.push_back(static_cast<int>(sizes.tensor_bytes.size()));
    for (const ParamLayout& pl : layout.params())
      sizes.tensor_bytes.push_back(pl.rows * pl.cols * item_bytes(layout.grad_dtype()));
  }
  Fsdp2Options stock;
  stock.alpha = options.reduce_scatter.alpha;
  stock.accumulate = options.reduce_scatter.accumulate;
  std::vector<int> layer_done(groups.size(), -1);  // backward layer of each group, an event
  std::int64_t arena = 0;
  for (std::size_t i = 0; i < out.calls.size(); ++i) {
    StepCall& call = out.calls[i];
    const StepGroup& g = groups[static_cast<std::size_t>(call.group)];
    const GroupLayout& layout = g.all_gather->layout();
    call.output = static_cast<int>(i);
    LonePlacement at;
    at.counter_base = step.counters;
    at.event_base = step.events;
    at.output = call.output;
    at.arena_base = arena;
    Fsdp2Ids ids;
    if (call.kind == StepCallKind::kAllGather) {
      call.tensor_base = at.tensor_base = ag_tensors[static_cast<std::size_t>(call.group)];
      at.prefix = "all_gather.";
      Program program = build_fsdp2_all_gather(layout, stock, &ids);
      arena += program.buffers.front().arena_bytes;
      sizes.output_bytes.push_back(layout.unsharded_bytes());
      append_lone(step, std::move(program), at);
      call.done_event = ids.done_event + at.event_base;
      // The layer reads its parameters (as in TIDE's step) into scratch after the copy-out.
      const int compute = step.stream("compute");
      const int layer = step.events++;
      for (int r = 0; r < step.ranks; ++r) {
        const std::int64_t n = layout.unsharded_bytes();
        step.ops.push_back(make_op(
            r, compute, "FSDP2 r" + std::to_string(r) + " layer reads its parameters",
            CopyOp{{CopyDescriptor{Region{Buffer{r, Space::kOutput, call.output}, 0, n, n, 1},
                                   Region{Buffer{r, Space::kArena, 0}, arena, n, n, 1}}}}));
        step.ops.push_back(make_op(r, compute, "FSDP2 r" + std::to_string(r) + " layer done",
                                   EventRecordOp{layer}));
      }
      arena += layout.unsharded_bytes();
      if (!call.forward) layer_done[static_cast<std::size_t>(call.group)] = layer;
    } else {
      call.tensor_base = at.tensor_base = rs_tensors[static_cast<std::size_t>(call.group)];
      // FSDP2 packs and reduces on its reduce-scatter stream, not the compute stream.
      Program program = build_fsdp2_reduce_scatter(layout, stock, &ids);
      for (std::string& name : program.stream_names) {
        if (name == "compute") name = "stream";
      }
      at.prefix = "reduce_scatter.";
      const int stream = step.stream("reduce_scatter.stream");
      for (int r = 0; r < step.ranks; ++r) {  // after the layer's backward
        step.ops.push_back(make_op(r, stream,
                                   "FSDP2 r" + std::to_string(r) + " reduce-scatter after backward",
                                   EventWaitOp{layer_done[static_cast<std::size_t>(call.group)]}));
      }
      arena += program.buffers.front().arena_bytes;
      sizes.output_bytes.push_back(program.buffers.front().output_bytes.front());
      append_lone(step, std::move(program), at);
      call.done_event = ids.done_event + at.event_base;
    }
  }
  sizes.arena_bytes = arena;  // every call's own region: addresses, not memory held
  out.held_bytes = fsdp2_step_held_bytes(groups);
  out.arena.arena_bytes = out.held_bytes;
  step.buffers.assign(static_cast<std::size_t>(step.ranks), sizes);
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
      if (topo.nodes() == 1) return "a single node has no receive stage (use --nodes 2 or more)";
      return 2 * static_cast<int>(count) > options.ag_stages
                 ? ""
                 : "no receive stage is reused (use more groups or --ag-stages 1)";
    case Fault::kRsBankReuse:
      if (groups.front().reduce_scatter->one_node() &&
          options.reduce_scatter.landing == LandingStyle::kPull) {
        return "the one-node layout has no banks (NOTE [one-node TIDE-RS]; use --nodes 2 or "
               "more, or --multi-node-layout)";
      }
      return count >= 3 ? ""
                        : "bank e mod 2 is reused from the third reduce-scatter on (use "
                          "--layers 3 or more)";
    case Fault::kStepCallOrder:
      // The swapped calls show as a call-order mismatch whatever their shapes (NOTE [call
      // identities]).
      return count >= 2 && topo.world() >= 2
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
