// Runnable collectives with data (tide/testing/cases.hpp).
#include "tide/testing/cases.hpp"

#include <cstring>

#include "tide/core/ag_plan.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/ag_builder.hpp"
#include "tide/program/rs_builder.hpp"
#include "tide/program/training_step.hpp"

namespace tide::testing {

using program::Buffer;
using program::Space;

namespace {

std::string topology_name(int m, int l) {
  return "M=" + std::to_string(m) + " L=" + std::to_string(l);
}

}  // namespace

CollectiveCase ag_case(int m, int l, std::uint64_t seed, const AgCaseOptions& o) {
  std::mt19937_64 rng(seed);
  std::vector<ParamShape> shapes = o.shapes;
  if (shapes.empty()) shapes = random_shapes(rng, 1 + static_cast<int>(rng() % 5));
  const GroupLayout layout(Topology(m, l), shapes, o.dtype, DType::kBf16);
  AgOptions options;
  options.mixed_precision_cast = o.cast;
  options.staged_shards = o.staged;
  options.head_bytes = o.head_bytes;
  const AgPlan plan(layout, options);
  CollectiveCase c;
  c.name = "AG " + topology_name(m, l) + " " + std::string(dtype_name(o.dtype)) +
           (o.cast ? " cast" : "") + (o.staged && !o.cast ? " staged" : "") + o.what;
  c.program = program::build_ag_program(plan);
  const program::AgArenaLayout arena = program::ag_arena_layout(plan);
  for (int r = 0; r < layout.topology().world(); ++r) {
    if (o.cast) {
      for (int p = 0; p < layout.param_count(); ++p) {
        const auto master = random_values(rng, layout.param(p).shard_elems(), DType::kFp32);
        c.inputs.push_back({Buffer{r, Space::kTensor, p}, 0, bytes_of(master, DType::kFp32)});
      }
    } else if (o.staged) {
      for (int p = 0; p < layout.param_count(); ++p) {
        const std::int64_t elems = layout.param(p).shard_bytes / item_bytes(o.dtype);
        const auto shard = random_values(rng, elems, o.dtype);
        c.inputs.push_back({Buffer{r, Space::kTensor, p}, 0, bytes_of(shard, o.dtype)});
      }
    } else {
      const auto shard = random_values(rng, layout.shard_bytes() / item_bytes(o.dtype), o.dtype);
      c.inputs.push_back({Buffer{r, Space::kArena, 0}, arena.resident, bytes_of(shard, o.dtype)});
    }
    c.checks.push_back({Buffer{r, Space::kArena, 0}, arena.landing, layout.unsharded_bytes()});
  }
  return c;
}

CollectiveCase rs_case(int m, int l, std::uint64_t seed, const RsCaseOptions& o) {
  std::mt19937_64 rng(seed);
  std::vector<ParamShape> shapes = o.shapes;
  if (shapes.empty()) shapes = random_shapes(rng, 1 + static_cast<int>(rng() % 4));
  const GroupLayout layout(Topology(m, l), shapes, DType::kBf16, o.grad);
  // Drawn in a fixed order whether given or not, so a seed always yields the same data.
  const int round_width = 1 + static_cast<int>(rng() % 4);
  const int sum_ctas = 1 + static_cast<int>(rng() % 16);
  const int landing_ctas = 1 + static_cast<int>(rng() % 4);
  RsOptions options;
  options.mode = o.mode;
  options.round_width = o.round_width > 0 ? o.round_width : round_width;
  options.rounds_in_flight = o.rounds_in_flight;
  options.one_node = o.one_node;
  options.one_node_pull = o.one_node_pull;
  const RsPlan plan(layout, options);
  program::RsProgramOptions po;
  po.alpha = o.alpha != 0.0f ? o.alpha : 1.0f / static_cast<float>(layout.topology().world());
  po.accumulate = o.accumulate;
  po.sum_ctas = o.sum_ctas > 0 ? o.sum_ctas : sum_ctas;
  po.landing_ctas = o.landing_ctas > 0 ? o.landing_ctas : landing_ctas;
  CollectiveCase c;
  c.name = "RS " + topology_name(m, l) + " " + std::string(mode_name(o.mode)) + " " +
           std::string(dtype_name(o.grad)) + (o.accumulate ? " accumulate" : "") +
           (o.one_node && m == 1 ? " one-node" : "") +
           (o.one_node && m == 1 && o.mode == RsMode::kSlotReuse
                ? (o.one_node_pull ? " pull" : " push-from-slot")
                : "") +
           o.what;
  c.program = program::build_rs_program(plan, po);
  const auto grads = random_grads(rng, layout);
  for (int r = 0; r < layout.topology().world(); ++r) {
    for (int p = 0; p < layout.param_count(); ++p) {
      c.inputs.push_back(
          {Buffer{r, Space::kTensor, p}, 0,
           bytes_of(grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)], o.grad)});
    }
    if (o.accumulate) {
      const auto initial = random_values(rng, layout.shard_elems(), DType::kFp32);
      c.inputs.push_back({Buffer{r, Space::kOutput, 0}, 0, bytes_of(initial, DType::kFp32)});
    }
    c.checks.push_back({Buffer{r, Space::kOutput, 0}, 0, -1});
  }
  return c;
}

CollectiveCase step_case(int m, int l, std::uint64_t seed, const StepCaseOptions& o) {
  std::mt19937_64 rng(seed);
  const Topology topo(m, l);
  std::vector<GroupLayout> layouts;
  // Even column counts: a bf16 shard of an odd byte count would misalign TIDE-RS's fp32
  // areas placed after it, which the executor refuses. Rows stay random and odd-sized.
  for (int g = 0; g < 3; ++g) {
    std::vector<ParamShape> shapes = random_shapes(rng, 2 + g * 3);
    for (ParamShape& s : shapes)
      s.cols = 2 * s.cols;
    layouts.emplace_back(topo, shapes, DType::kBf16, o.grad);
  }
  std::vector<AgPlan> ag;
  std::vector<RsPlan> rs;
  for (const GroupLayout& layout : layouts) {
    AgOptions ao;
    ao.head_bytes = 64;  // the head/tail split on tiny shards
    ag.emplace_back(layout, ao);
    RsOptions ro;
    ro.mode = o.mode;
    ro.round_width = 2;
    rs.emplace_back(layout, ro);
  }
  std::vector<program::StepGroup> groups;
  for (std::size_t g = 0; g < layouts.size(); ++g)
    groups.push_back({"group " + std::to_string(g), &ag[g], &rs[g]});
  program::StepOptions options;
  options.reduce_scatter.alpha = 1.0f / static_cast<float>(topo.world());
  options.reduce_scatter.accumulate = o.accumulate;
  options.reduce_scatter.sum_ctas = 3;
  program::StepProgram step = program::build_step_program(groups, options);
  CollectiveCase c;
  c.name = "step " + topology_name(m, l) + " " + std::string(mode_name(o.mode)) + " " +
           std::string(dtype_name(o.grad)) + (o.accumulate ? " accumulate" : "");
  for (std::size_t g = 0; g < layouts.size(); ++g) {
    for (int r = 0; r < topo.world(); ++r) {
      const auto shard = random_values(rng, layouts[g].shard_bytes() / 2, DType::kBf16);
      c.inputs.push_back({Buffer{r, Space::kArena, 0}, step.arena.all_gather[g].resident,
                          bytes_of(shard, DType::kBf16)});
    }
  }
  for (const program::StepCall& call : step.calls) {
    const GroupLayout& layout = layouts[static_cast<std::size_t>(call.group)];
    if (call.kind == program::StepCallKind::kReduceScatter) {
      const auto grads = random_grads(rng, layout);
      for (int r = 0; r < topo.world(); ++r) {
        for (int p = 0; p < layout.param_count(); ++p) {
          c.inputs.push_back(
              {Buffer{r, Space::kTensor, call.tensor_base + p}, 0,
               bytes_of(grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)], o.grad)});
        }
        if (o.accumulate) {
          const auto initial = random_values(rng, layout.shard_elems(), DType::kFp32);
          c.inputs.push_back(
              {Buffer{r, Space::kOutput, call.output}, 0, bytes_of(initial, DType::kFp32)});
        }
      }
    }
    for (int r = 0; r < topo.world(); ++r)
      c.checks.push_back({Buffer{r, Space::kOutput, call.output}, 0, -1});
  }
  c.program = std::move(step.program);
  return c;
}

std::vector<std::vector<std::byte>> reference_outputs(const CollectiveCase& c) {
  exec::ReferenceExecutor ex(c.program);
  for (const CaseInput& in : c.inputs) {
    auto span = ex.input(in.buffer, in.offset, static_cast<std::int64_t>(in.bytes.size()));
    std::memcpy(span.data(), in.bytes.data(), in.bytes.size());
  }
  exec::RunOptions run;
  run.seed = 3;
  const exec::RunResult r = ex.run(run);
  if (!r.clean()) {
    std::string text = c.name + ": the reference run is not clean:";
    for (std::size_t i = 0; i < r.errors.size() && i < 5; ++i)
      text += "\n  " + r.errors[i].message;
    throw InternalError(text);
  }
  std::vector<std::vector<std::byte>> out;
  for (const CaseCheck& k : c.checks) {
    auto mem = ex.memory(k.buffer);
    const auto n =
        static_cast<std::size_t>(k.bytes < 0 ? static_cast<std::int64_t>(mem.size()) : k.bytes);
    const auto* p = mem.data() + k.offset;
    out.emplace_back(p, p + n);
  }
  return out;
}

}  // namespace tide::testing
