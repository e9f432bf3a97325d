// `tide simulate step`: a training step's sequence of TIDE-AG and TIDE-RS calls (FSDP2
// order, built from the runtime's own multi-call programs: program/training_step.hpp) on the
// CPU reference executor, with every call's output checked
// (all-gathers bit for bit against Eq. 2, reduce-scatters against TIDE's arithmetic order and
// float64), or timing only; optionally with a fault.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "commands.hpp"
#include "digest.hpp"
#include "resources.hpp"
#include "shapes.hpp"
#include "simulate.hpp"
#include "table.hpp"
#include "tide/core/error.hpp"
#include "tide/core/models.hpp"
#include "tide/program/training_step.hpp"
#include "tide/testing/checks.hpp"

namespace tide::cli {
namespace {

using nlohmann::json;
using program::Buffer;
using program::Space;
using testing::AgShard;
using testing::check_landing;
using testing::check_reduce_scatter;
using testing::CheckResult;
using testing::random_shards;

constexpr int kMaxLayers = 100000;

// The step's groups: `--groups A;B;...` (shape sets), or `--shapes`/`--model NAME:GROUP`
// repeated `--layers` times, or `--model NAME`: its embedding group (when it has one), its
// layer group `--layers` times, then its other groups, in forward order.
std::vector<NamedGroup> step_groups(const SimulateArgs& a) {
  if (a.layers < 1) throw InvalidArgument("--layers must be at least 1");
  if (a.layers > kMaxLayers) {
    throw InvalidArgument("--layers " + std::to_string(a.layers) + " is more than " +
                          std::to_string(kMaxLayers) +
                          " (steps that long do not fit the simulator)");
  }
  std::vector<NamedGroup> groups;
  if (!a.groups.empty()) {
    if (!a.shapes.empty() || !a.model.empty()) {
      throw InvalidArgument("give --groups or one of --shapes/--model, not both");
    }
    return parse_group_list(a.groups, "group ");
  }
  if (!a.model.empty() && a.model.find(':') == std::string::npos) {
    const ModelPreset* preset = nullptr;
    for (const ModelPreset& m : model_presets()) {
      if (m.name == a.model) preset = &m;
    }
    if (preset == nullptr) find_model_group(a.model);  // throws, listing the known names
    for (const ModelGroup& g : preset->groups) {
      if (g.name == "embedding") groups.push_back({a.model + ":" + g.name, g.params});
    }
    for (int i = 0; i < a.layers; ++i) {
      const ModelGroup& layer = preset->groups.front();
      groups.push_back({a.model + ":" + layer.name + " " + std::to_string(i), layer.params});
    }
    for (std::size_t i = 1; i < preset->groups.size(); ++i) {
      const ModelGroup& g = preset->groups[i];
      if (g.name != "embedding") groups.push_back({a.model + ":" + g.name, g.params});
    }
    return groups;
  }
  const NamedGroup one = resolve_group(a.shapes, a.model);
  for (int i = 0; i < a.layers; ++i)
    groups.push_back({one.name + " " + std::to_string(i), one.params});
  return groups;
}

// Refuses a step that would not fit before building anything per group: the estimate of
// each distinct group (a model's layers repeat) times its count.
void require_step_fits(const SimulateArgs& a, const Topology& topo,
                       const std::vector<NamedGroup>& named, DType ag_dtype, DType grad_dtype) {
  std::map<std::string, std::pair<ResourceEstimate, int>> distinct;
  double building = 0;  // the largest sequence's build
  for (const NamedGroup& g : named) {
    std::string key;
    for (const ParamShape& p : g.params)
      key += std::to_string(p.rows) + "x" + std::to_string(p.cols) + ",";
    auto [it, fresh] = distinct.try_emplace(key);
    ++it->second.second;
    if (!fresh) continue;
    const GroupLayout layout(topo, g.params, ag_dtype, grad_dtype);
    AgOptions ag_options;
    ag_options.mixed_precision_cast = a.cast;
    const ResourceEstimate all_gather =
        estimate_all_gather(AgPlan(layout, ag_options), !a.timing_only, false);
    const ResourceEstimate reduce_scatter =
        estimate_reduce_scatter(RsPlan(layout, a.rs.options(layout)), !a.timing_only, false);
    ResourceEstimate& per_group = it->second.first;
    per_group += all_gather;
    per_group += all_gather;  // forward and backward
    per_group += reduce_scatter;
    // Finding a sequence's templates holds 8 calls of every rank and their normalised copies
    // (training_step.cpp): programs without the executor's state, about half its bytes per op.
    building = std::max(building, 8 * std::max(all_gather.op_bytes, reduce_scatter.op_bytes));
  }
  ResourceEstimate total;
  for (const auto& [key, entry] : distinct) {
    for (int i = 0; i < entry.second; ++i)
      total += entry.first;
  }
  total.op_bytes += building;
  const std::string what =
      fmt::format("tide simulate step of {} groups on M = {} x L = {}{}", named.size(), a.nodes,
                  a.gpus_per_node, a.timing_only ? " (timing only)" : " with data");
  require_fits(total, what,
               a.timing_only ? "use fewer --layers or nodes"
                             : "use fewer --layers or nodes, or --timing-only");
  announce_long_run(total, what);
}

std::string call_name(const program::StepCall& call) {
  if (call.kind == program::StepCallKind::kReduceScatter) return "reduce-scatter";
  return call.forward ? "all-gather (forward)" : "all-gather (backward)";
}

}  // namespace

void simulate_step(const SimulateArgs& a) {
  const program::Fault fault =
      a.inject.empty() ? program::Fault::kNone : program::parse_fault(a.inject);
  if (fault != program::Fault::kNone && a.timing_only) {
    throw InvalidArgument("--inject needs data and race tracking; drop --timing-only");
  }
  if (fault != program::Fault::kNone && a.baseline) {
    throw InvalidArgument("--inject applies to TIDE's programs, not to --baseline");
  }
  if (!a.dump.empty()) throw InvalidArgument("--dump is for single calls; drop it for a step");
  if (a.baseline && a.cast) {
    throw InvalidArgument("--baseline models FSDP2's bf16 all-gather; drop --cast");
  }
  if (a.ag_stages != 1) {
    throw InvalidArgument(
        "--ag-stages " + std::to_string(a.ag_stages) +
        ": the runtime keeps one all-gather receive stage per communicator, ordered by the lane "
        "handoff (NOTE [communicator arena]); only 1");
  }

  const Topology topo(a.nodes, a.gpus_per_node);
  const DType ag_dtype = simulated_ag_dtype(a);
  const DType grad_dtype = parse_dtype(a.grad_dtype, "--grad-dtype");
  const std::vector<NamedGroup> named = step_groups(a);
  // A stock FSDP2 step has its own limit (its ring ops), below.
  if (!a.baseline) require_step_fits(a, topo, named, ag_dtype, grad_dtype);
  std::vector<GroupLayout> layouts;
  layouts.reserve(named.size());
  for (const NamedGroup& g : named)
    layouts.emplace_back(topo, g.params, ag_dtype, grad_dtype);
  AgOptions ag_options;
  ag_options.mixed_precision_cast = a.cast;
  std::vector<AgPlan> ag_plans;
  std::vector<RsPlan> rs_plans;
  ag_plans.reserve(layouts.size());
  rs_plans.reserve(layouts.size());
  for (const GroupLayout& layout : layouts) {
    ag_plans.emplace_back(layout, ag_options);
    rs_plans.emplace_back(layout, a.rs.options(layout));
  }
  std::vector<program::StepGroup> groups;
  for (std::size_t i = 0; i < layouts.size(); ++i)
    groups.push_back({named[i].name, &ag_plans[i], &rs_plans[i]});

  if (a.baseline) {
    // Stock FSDP2's rings take N - 1 steps per rank and channel: about 4 N^2 L ops per call.
    const double ops = 3.0 * static_cast<double>(named.size()) * 4.0 * topo.world() * topo.world() *
                       topo.gpus_per_node();
    if (ops > 3e7) {
      throw Unsupported(fmt::format(
          "a stock FSDP2 step at N = {} with {} groups is about {:.0f} M ring ops, more than "
          "this simulator holds in memory; use fewer --layers or nodes, or compare single "
          "calls with tide simulate all-gather|reduce-scatter --baseline",
          topo.world(), named.size(), ops / 1e6));
    }
  }
  program::StepOptions options;
  options.reduce_scatter = rs_program_options(a, topo.world());
  const program::RsProgramOptions& rs = options.reduce_scatter;
  options.fault = fault;
  const program::StepProgram step = a.baseline ? program::build_fsdp2_step_program(groups, options)
                                               : program::build_step_program(groups, options);
  exec::ReferenceExecutor ex(step.program, exec::ExecutorOptions{a.timing_only});

  // Inputs: every group's shards (resident in the arena, or fp32 masters with a cast) and
  // gradients, and with --accumulate every reduce-scatter's output before the step.
  std::mt19937_64 rng(a.data_seed);
  std::vector<std::vector<AgShard>> shards(groups.size());
  std::vector<std::vector<RankGrads>> grads(groups.size());
  std::vector<std::vector<std::vector<float>>> initial(step.calls.size());
  if (!a.timing_only) {
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const GroupLayout& layout = layouts[g];
      shards[g] = random_shards(rng, layout, a.cast);
      grads[g] = random_grads(rng, layout);
      for (int r = 0; r < topo.world(); ++r) {
        if (a.cast || a.baseline) continue;  // the all-gather calls' tensors (below)
        const AgShard& shard = shards[g][static_cast<std::size_t>(r)];
        auto bytes = ex.input(Buffer{r, Space::kArena, 0}, step.arena.all_gather[g].resident,
                              layout.shard_bytes());
        std::memcpy(bytes.data(), shard.packed.data(), bytes.size());
      }
    }
    for (std::size_t i = 0; i < step.calls.size(); ++i) {
      const program::StepCall& call = step.calls[i];
      const std::size_t g = static_cast<std::size_t>(call.group);
      for (int r = 0; r < topo.world(); ++r) {
        if (call.kind == program::StepCallKind::kAllGather) {
          if (a.baseline) {  // stock FSDP2 reads each sharded parameter
            const AgShard& shard = shards[g][static_cast<std::size_t>(r)];
            for (int p = 0; p < layouts[g].param_count(); ++p) {
              auto bytes = ex.input(Buffer{r, Space::kTensor, call.tensor_base + p});
              std::memcpy(bytes.data(), shard.packed.data() + layouts[g].param(p).offset,
                          bytes.size());
            }
          } else if (a.cast) {
            const AgShard& shard = shards[g][static_cast<std::size_t>(r)];
            for (std::size_t p = 0; p < shard.master.size(); ++p) {
              store_values(
                  shard.master[p], DType::kFp32,
                  ex.input(Buffer{r, Space::kTensor, call.tensor_base + static_cast<int>(p)}));
            }
          }
          continue;
        }
        const auto& rank_grads = grads[g][static_cast<std::size_t>(r)];
        for (std::size_t p = 0; p < rank_grads.size(); ++p) {
          store_values(rank_grads[p], grad_dtype,
                       ex.input(Buffer{r, Space::kTensor, call.tensor_base + static_cast<int>(p)}));
        }
        auto& init = initial[i];
        init.resize(static_cast<std::size_t>(topo.world()));
        auto& mine = init[static_cast<std::size_t>(r)];
        mine.resize(static_cast<std::size_t>(layouts[g].shard_elems()));
        if (a.accumulate) {
          for (float& v : mine)
            v = random_value(rng, DType::kFp32);
          store_values(mine, DType::kFp32, ex.input(Buffer{r, Space::kOutput, call.output}));
        }
      }
    }
  }

  const exec::RunResult run = ex.run(run_options(a));
  write_traces(a, step.program, run);

  // Checks: every call's output.
  bool bitwise = true, passed = run.clean();
  double max_abs_error = 0, tolerance = 0;
  std::optional<std::string> sha256;
  if (!a.timing_only) {
    Sha256 digest;
    for (std::size_t i = 0; i < step.calls.size(); ++i) {
      const program::StepCall& call = step.calls[i];
      const std::size_t g = static_cast<std::size_t>(call.group);
      auto output = [&](int r) { return ex.memory(Buffer{r, Space::kOutput, call.output}); };
      const auto record = [&](std::span<const std::byte> bytes) { digest.update(bytes); };
      CheckResult check;
      if (call.kind == program::StepCallKind::kAllGather) {
        check_landing(layouts[g], shards[g], output, record, check);
      } else {
        check_reduce_scatter(rs_plans[g], grads[g], rs.alpha, a.accumulate, initial[i], output,
                             record, check);
        if (check.max_abs_error > check.tolerance) passed = false;
        if (!check.bitwise && rs.landing == program::LandingStyle::kPull && !a.baseline) {
          passed = false;
        }
      }
      if (call.kind == program::StepCallKind::kAllGather && !check.bitwise) passed = false;
      bitwise = bitwise && check.bitwise;
      max_abs_error = std::max(max_abs_error, check.max_abs_error);
      tolerance = std::max(tolerance, check.tolerance);
    }
    sha256 = digest.hex();
  }
  const FaultOutcome how = fault_outcome(a, fault, run, !a.timing_only, passed);

  json calls = json::array();
  Table table({"#", "call", "group", "done at (ms)"});
  for (std::size_t i = 0; i < step.calls.size(); ++i) {
    const program::StepCall& call = step.calls[i];
    const double done_ms = event_time(step.program, run, call.done_event) / 1000.0;
    calls.push_back(
        {{"index", i},
         {"kind", call.kind == program::StepCallKind::kAllGather ? "all-gather" : "reduce-scatter"},
         {"forward", call.forward},
         {"group", named[static_cast<std::size_t>(call.group)].name},
         {"landing_slot", call.landing_slot},
         {"done_ms", done_ms}});
    table.row({std::to_string(i), call_name(call), named[static_cast<std::size_t>(call.group)].name,
               fixed(done_ms, 3)});
  }
  const int world = topo.world();
  json out = {{"collective", "step"},
              {"system", a.baseline ? "fsdp2" : "tide"},
              {"nodes", a.nodes},
              {"gpus_per_node", a.gpus_per_node},
              {"groups", groups.size()},
              {"ag_stages", a.baseline ? 0 : a.ag_stages},
              {"timing_only", a.timing_only},
              {"schedule_seed", a.schedule_seed},
              {"data_seed", a.data_seed},
              {"completed", run.completed},
              {"deadlock", run.deadlock},
              {"error_count", run.error_count},
              {"ops", run.ops_run},
              {"step_ms", run.makespan_us / 1000.0},
              {"sm_ms", run.sm_time_us / 1000.0},
              {"sm_ms_per_gpu", run.sm_time_us / 1000.0 / world},
              {"arena_bytes", step.arena.arena_bytes},
              {"held_bytes", step.held_bytes},
              // Not a peak: every call has its own output (and, stock, its own arena region)
              // in a step program, so the executor's buffer peak adds up every call's
              // buffers. held_bytes is the peak (NOTE [step memory]).
              {"summed_call_buffer_bytes", run.peak_buffer_bytes},
              {"calls", calls}};
  json errors = json::array();
  for (const exec::ExecError& e : run.errors)
    errors.push_back(e.message);
  out["errors"] = errors;
  if (!a.timing_only) {
    out["max_abs_error"] = max_abs_error;
    out["tolerance"] = tolerance;
    out["bitwise_equal_to_reference_order"] = bitwise;
    out["passed"] = passed;
    out["output_sha256"] = sha256 ? json(*sha256) : json(nullptr);
  }
  if (fault != program::Fault::kNone) add_fault_fields(out, how);
  if (a.json) {
    std::cout << out.dump(2) << '\n';
  } else {
    std::cout << fmt::format(
        "tide simulate step ({}): {} calls over {} groups on M={} x L={} ({}, schedule seed {})\n",
        a.baseline ? "stock FSDP2" : "TIDE", step.calls.size(), groups.size(), a.nodes,
        a.gpus_per_node, a.timing_only ? "timing only" : "data", a.schedule_seed);
    table.print(std::cout);
    Table summary({"result", "value"});
    summary.left_aligned();
    summary.row({"step (all calls done)", fixed(run.makespan_us / 1000.0, 3) + " ms"});
    summary.row(
        {"SM time (CTA x time) per GPU", fixed(run.sm_time_us / 1000.0 / world, 3) + " CTA-ms"});
    summary.row({"arena bytes per GPU", bytes(step.arena.arena_bytes)});
    summary.row({"held at peak per GPU (NOTE [step memory])", bytes(step.held_bytes)});
    summary.row({"races / protocol errors", num(run.error_count)});
    summary.row({"deadlock", run.deadlock ? "yes" : "no"});
    if (!a.timing_only) {
      summary.row({"max |out - float64 ref|",
                   fmt::format("{:.3g} (tolerance {:.3g})", max_abs_error, tolerance)});
      summary.row({"bitwise = reference order", bitwise ? "yes" : "no"});
      summary.row({"passed", passed ? "yes" : "NO"});
      if (sha256) summary.row({"outputs sha256", *sha256});
    }
    if (fault != program::Fault::kNone) {
      summary.row({"fault " + a.inject, fault_summary(how)});
    }
    summary.print(std::cout);
    for (std::size_t i = 0; i < run.errors.size() && i < 3; ++i) {
      std::cout << "  error: " << run.errors[i].message << '\n';
    }
  }
  if (fault != program::Fault::kNone) return require_expected_detection(how);
  if (!passed) throw CheckFailed("the step failed its checks (see above)");
}

}  // namespace tide::cli
