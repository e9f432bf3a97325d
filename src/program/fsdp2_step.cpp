// Stock FSDP2's training step (training_step.hpp): its calls in FSDP2's issue order, each a
// lone call of fsdp2_baseline.hpp placed in the step's ids and buffers.
#include <algorithm>
#include <string>
#include <utility>

#include "tide/core/error.hpp"
#include "tide/program/fsdp2_baseline.hpp"
#include "tide/program/training_step.hpp"

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
  out.calls = fsdp2_issue_order(static_cast<int>(groups.size()));
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

}  // namespace tide::program
