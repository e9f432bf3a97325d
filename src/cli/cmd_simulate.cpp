// `tide simulate`: runs a TIDE-AG or TIDE-RS program on the CPU reference executor, with
// real data (checked against the definition) or timing only, optionally with a fault.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <utility>

#include "commands.hpp"
#include "digest.hpp"
#include "npy.hpp"
#include "resources.hpp"
#include "rs_args.hpp"
#include "shapes.hpp"
#include "simulate.hpp"
#include "table.hpp"
#include "tide/calibrate/calibration.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/fault_detection.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/ag_builder.hpp"
#include "tide/program/ep_lane.hpp"
#include "tide/program/fsdp2_baseline.hpp"
#include "tide/program/rs_builder.hpp"
#include "tide/testing/checks.hpp"

namespace tide::cli {

double event_time(const program::Program& prog, const exec::RunResult& run, int event) {
  double latest = 0;
  for (std::size_t i = 0; i < prog.ops.size(); ++i) {
    const program::Op& op = prog.ops[i];
    const auto* record = op.get_if<program::EventRecordOp>();
    if (record != nullptr && record->event == event && i < run.op_times.size()) {
      latest = std::max(latest, run.op_times[i].end_us);
    }
  }
  return latest;
}

void write_traces(const SimulateArgs& a, const program::Program& prog, const exec::RunResult& run) {
  if (!a.trace.empty()) exec::write_chrome_trace_file(a.trace, prog, run);
  if (!a.timeline.empty()) exec::write_timeline_svg_file(a.timeline, prog, run);
}

// The machine the times are for: "virtual-fabric" (a machine file, NOTE [virtual-fabric
// machine]: every rank on one GPU) with its GPU, or "per-gpu" (one GPU per rank, NOTE [cost
// model]).
std::pair<std::string, std::string> simulated_machine(const SimulateArgs& a) {
  if (a.cost_model.empty()) return {"per-gpu", ""};
  const exec::CostModel cost = calibrate::load_cost_model_file(a.cost_model);
  if (cost.virtual_fabric == nullptr) return {"per-gpu", ""};
  return {"virtual-fabric", cost.virtual_fabric->gpu};
}

exec::RunOptions run_options(const SimulateArgs& a) {
  exec::RunOptions options;
  options.seed = a.schedule_seed;
  options.jitter = a.jitter;
  if (!a.cost_model.empty()) options.cost = calibrate::load_cost_model_file(a.cost_model);
  // Long runs say how far they are on stderr, at most every 5 seconds.
  const auto start = std::chrono::steady_clock::now();
  auto last = std::make_shared<std::chrono::steady_clock::time_point>(start);
  options.progress = [start, last](std::int64_t done, std::int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (now - *last < std::chrono::seconds(5)) return;
    *last = now;
    std::cerr << fmt::format("tide: simulated {:.1f} M of {:.1f} M ops ({:.0f}%) in {:.0f} s\n",
                             static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6,
                             100.0 * static_cast<double>(done) / static_cast<double>(total),
                             std::chrono::duration<double>(now - start).count());
  };
  return options;
}

program::RsProgramOptions rs_program_options(const SimulateArgs& a, int world) {
  if (!std::isfinite(a.alpha)) {
    throw InvalidArgument("--alpha must be a finite fp32 value, |alpha| < 3.4e38 (it reads as " +
                          fmt::format("{}", a.alpha) + ")");
  }
  program::RsProgramOptions options;
  options.alpha = a.alpha != 0 ? a.alpha : 1.0f / static_cast<float>(world);
  options.accumulate = a.accumulate;
  options.sum_ctas = a.sum_ctas;
  options.landing_ctas = a.landing_ctas;
  if (a.landing == "switch-reduce") {
    options.landing = program::LandingStyle::kSwitchReduce;
  } else if (a.landing != "pull") {
    throw InvalidArgument("--landing '" + a.landing + "' must be pull or switch-reduce");
  }
  return options;
}

FaultOutcome fault_outcome(const SimulateArgs& a, program::Fault fault, const exec::RunResult& run,
                           bool data, bool passed) {
  FaultOutcome o;
  o.fault = fault;
  o.detected = exec::classify_run(run, data, passed);
  o.expected = fault == program::Fault::kNone ? program::Detection::kNone
                                              : program::fault_info(fault).expected;
  if (!a.expect_detection.empty()) o.expected = program::parse_detection(a.expect_detection);
  o.evidence = exec::detection_evidence(run, o.detected);
  return o;
}

void add_fault_fields(nlohmann::json& out, const FaultOutcome& o) {
  const program::FaultInfo& info = program::fault_info(o.fault);
  out["fault"] = info.name;
  out["fault_detected"] = o.detected != program::Detection::kNone;
  out["detected_by"] = program::detection_name(o.detected);
  out["expected_detection"] = program::detection_name(o.expected);
  out["detected_as_expected"] = o.as_expected();
  out["mechanism"] = info.mechanism;
  out["evidence"] = o.evidence;
}

std::string fault_summary(const FaultOutcome& o) {
  const std::string expected(program::detection_name(o.expected));
  if (o.detected == program::Detection::kNone) return "NOT DETECTED (expected " + expected + ")";
  const std::string detected(program::detection_name(o.detected));
  return "detected: " + detected +
         (o.as_expected() ? " (as expected)" : " (EXPECTED " + expected + ")");
}

DType simulated_ag_dtype(const SimulateArgs& a) {
  const DType ag = parse_dtype(a.ag_dtype, "--ag-dtype");
  if (a.cast && ag != DType::kBf16) {
    throw InvalidArgument(
        "--cast all-gathers fp32 masters as bf16: give --ag-dtype bf16 (or drop "
        "--cast)");
  }
  return ag;
}

void require_expected_detection(const FaultOutcome& o) {
  if (o.as_expected()) return;
  const std::string name(program::fault_info(o.fault).name);
  const std::string expected(program::detection_name(o.expected));
  if (o.detected == program::Detection::kNone) {
    throw CheckFailed("the injected fault " + name + " went undetected (expected " + expected +
                      ")");
  }
  throw CheckFailed("the injected fault " + name + " showed as " +
                    std::string(program::detection_name(o.detected)) + ", expected " + expected);
}

namespace {

using nlohmann::json;
using program::Buffer;
using program::Space;
using testing::AgShard;
using testing::check_landing;
using testing::check_reduce_scatter;
using testing::CheckResult;
using testing::random_shards;

// What every simulation reports.
struct Outcome {
  exec::RunResult run;
  double predicted_us = 0;  // when the collective's final event completed, over ranks
  bool data = false;
  double max_abs_error = 0, tolerance = 0;
  bool bitwise = true;  // equal to TIDE's arithmetic order (or to Eq. 2 placement)
  bool passed = false;
  std::optional<std::string> sha256;
};

void write_manifest(const SimulateArgs& a, const GroupLayout& layout, json files,
                    json extra = json::object()) {
  json params = json::array();
  for (const ParamLayout& p : layout.params()) {
    params.push_back(
        {{"name", p.name}, {"rows", p.rows}, {"cols", p.cols}, {"rows_per_rank", p.rows_per_rank}});
  }
  const json manifest = {{"collective", a.collective},
                         {"nodes", layout.topology().nodes()},
                         {"gpus_per_node", layout.topology().gpus_per_node()},
                         {"world", layout.topology().world()},
                         {"params", params},
                         {"ag_dtype", dtype_name(layout.ag_dtype())},
                         {"grad_dtype", dtype_name(layout.grad_dtype())},
                         {"bf16_storage",
                          "bf16 values are stored as uint16 words ('<u2'): "
                          "float32 bits = word << 16"},
                         {"one_byte_storage",
                          "fp8 and u8 items are stored as uint8 codes ('|u1'), random bytes "
                          "that the all-gather moves unchanged"},
                         {"files", files}};
  json merged = manifest;
  merged.update(extra);
  std::ofstream out(a.dump + "/manifest.json");
  out << merged.dump(2) << '\n';
  if (!out) throw InvalidArgument("--dump " + a.dump + ": cannot write manifest.json");
}

// Refuses a call that would not fit, before its program is built.
void require_call_fits(const SimulateArgs& a, const ResourceEstimate& estimate) {
  const std::string what = fmt::format("tide simulate {}{} on M = {} x L = {}{}", a.collective,
                                       a.baseline ? " --baseline" : "", a.nodes, a.gpus_per_node,
                                       a.timing_only ? " (timing only)" : " with data");
  require_fits(estimate, what,
               a.timing_only ? "use fewer nodes or smaller shapes"
                             : "use --timing-only, fewer nodes or smaller shapes");
  announce_long_run(estimate, what);
}

// Creates the --dump directory and proves it writable before anything runs.
void prepare_dump_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw InvalidArgument("--dump " + dir + ": cannot create the directory (" + ec.message() + ")");
  const std::string probe = dir + "/manifest.json";
  if (!std::ofstream(probe)) throw InvalidArgument("--dump " + dir + ": cannot write " + probe);
}

// Refuses --inject where its fault cannot show: `why` says why (empty where it can).
void require_fault_can_show(const SimulateArgs& a, const std::string& why) {
  if (!why.empty()) throw InvalidArgument("--inject " + a.inject + " cannot show here: " + why);
}

// The landing's previous contents on `rank` (the layer that used it before): random bf16 words,
// or with 1-byte items random byte codes (NOTE [1-byte all-gather items]).
void write_previous_landing(exec::ReferenceExecutor& ex, std::mt19937_64& rng,
                            const GroupLayout& layout, int rank, std::int64_t landing) {
  auto previous = ex.input(Buffer{rank, Space::kArena, 0}, landing, layout.unsharded_bytes());
  if (item_bytes(layout.ag_dtype()) == 1) {
    for (std::byte& b : previous)
      b = static_cast<std::byte>(static_cast<std::uint8_t>(random_value(rng, layout.ag_dtype())));
    return;
  }
  for (std::size_t i = 0; i + 1 < previous.size(); i += 2) {
    const std::uint16_t w = arith::float_to_bf16(random_value(rng, DType::kFp32));
    std::memcpy(previous.data() + i, &w, 2);
  }
}

// The .npy type of `item`-byte items: uint8 codes, bf16 words or fp32.
std::string npy_type(std::int64_t item) {
  return item == 1 ? "|u1" : item == 2 ? "<u2" : "<f4";
}

// `rank`'s packed all-gather shard, resident in its arena at `resident`.
void write_resident_shard(exec::ReferenceExecutor& ex, const GroupLayout& layout, int rank,
                          std::int64_t resident, const AgShard& shard) {
  auto bytes = ex.input(Buffer{rank, Space::kArena, 0}, resident, layout.shard_bytes());
  std::memcpy(bytes.data(), shard.packed.data(), bytes.size());
}

// A reduce-scatter's inputs: every rank's gradients, and its fp32 output before the call
// (random with --accumulate, zeros otherwise).
struct RsInputs {
  std::vector<RankGrads> grads;
  std::vector<std::vector<float>> initial;
};

// Draws random inputs from --data-seed and writes them into `ex`; timing-only runs have none
// (`initial` then holds an empty row per rank).
RsInputs write_random_rs_inputs(const SimulateArgs& a, const GroupLayout& layout,
                                exec::ReferenceExecutor& ex) {
  const Topology& t = layout.topology();
  RsInputs in;
  in.initial.resize(static_cast<std::size_t>(t.world()));
  if (a.timing_only) return in;
  std::mt19937_64 rng(a.data_seed);
  in.grads = random_grads(rng, layout);
  for (int r = 0; r < t.world(); ++r) {
    for (int p = 0; p < layout.param_count(); ++p) {
      const auto& values = in.grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
      store_values(values, layout.grad_dtype(), ex.input(Buffer{r, Space::kTensor, p}));
    }
    auto& init = in.initial[static_cast<std::size_t>(r)];
    init.resize(static_cast<std::size_t>(layout.shard_elems()));
    if (a.accumulate) {
      for (float& v : init)
        v = random_value(rng, DType::kFp32);
      auto bytes = ex.input(Buffer{r, Space::kOutput, 0});
      std::memcpy(bytes.data(), init.data(), bytes.size());
    }
  }
  return in;
}

// Runs the call's program; its predicted latency is when `final_event` completed over ranks.
// Writes --trace and --timeline.
Outcome run_call(const SimulateArgs& a, const program::Program& prog, exec::ReferenceExecutor& ex,
                 int final_event) {
  Outcome o;
  o.run = ex.run(run_options(a));
  o.predicted_us = event_time(prog, o.run, final_event);
  write_traces(a, prog, o.run);
  return o;
}

// A check of the checks.hpp form: reads rank r's output as `out(r)`, hands each output it
// reads to `record`, and fills `result`.
using OutputCheck = std::function<void(const std::function<std::span<const std::byte>(int)>& out,
                                       const testing::OutputSink& record, CheckResult& result)>;

// Runs `check` on every rank's output 0, fingerprinting what it reads (output_sha256), and
// keeps its verdict in `o`; o.passed is the caller's to decide.
void check_outputs(Outcome& o, exec::ReferenceExecutor& ex, const OutputCheck& check) {
  o.data = true;
  Sha256 digest;
  CheckResult result;
  check(
      [&](int r) {
        return ex.memory(Buffer{r, Space::kOutput, 0});
      },
      [&](std::span<const std::byte> bytes) { digest.update(bytes); }, result);
  o.bitwise = result.bitwise;
  o.max_abs_error = result.max_abs_error;
  o.tolerance = result.tolerance;
  o.sha256 = digest.hex();
}

// Eq. 2: rank u's shard of parameter p sits at Landing(p, u) on every rank, bit for bit, as
// the rank's compute stream saw it (its output buffer).
void check_gathered_landing(Outcome& o, exec::ReferenceExecutor& ex, const GroupLayout& layout,
                            const std::vector<AgShard>& shards) {
  check_outputs(o, ex, [&](const auto& seen, const auto& record, CheckResult& result) {
    check_landing(layout, shards, seen, record, result);
  });
  o.passed = o.bitwise && o.run.clean();
}

Outcome simulate_all_gather(const SimulateArgs& a, const GroupLayout& layout,
                            program::Fault fault) {
  AgOptions plan_options;
  plan_options.mixed_precision_cast = a.cast;
  plan_options.staged_shards = a.staged && !a.cast;
  const AgPlan plan(layout, plan_options);
  require_fault_can_show(a, program::ag_fault_inapplicable(fault, plan));
  require_call_fits(a, estimate_all_gather(plan, !a.timing_only, a.baseline));
  program::AgProgramOptions options;
  options.consumer = !a.timing_only;  // the compute stream's reads matter for checks only
  options.fault = fault;
  program::AgProgramIds ids;
  program::Fsdp2Ids stock_ids;
  const program::Program prog = a.baseline ? program::build_fsdp2_all_gather(layout, {}, &stock_ids)
                                           : program::build_ag_program(plan, options, &ids);
  const int final_event = a.baseline ? stock_ids.done_event : ids.ready_event;
  const program::AgArenaLayout arena = program::ag_arena_layout(plan);
  exec::ReferenceExecutor ex(prog, exec::ExecutorOptions{a.timing_only});
  const Topology& t = layout.topology();
  const std::int64_t item = item_bytes(layout.ag_dtype());
  std::mt19937_64 rng(a.data_seed);
  std::vector<AgShard> shards;
  if (!a.timing_only) {
    shards = random_shards(rng, layout, a.cast);
    for (int r = 0; r < t.world(); ++r) {
      if (!a.baseline) write_previous_landing(ex, rng, layout, r, arena.landing);
      const AgShard& shard = shards[static_cast<std::size_t>(r)];
      for (int p = 0; p < layout.param_count(); ++p) {
        const ParamLayout& pl = layout.param(p);
        if (a.baseline || plan_options.staged_shards) {  // each sharded parameter is read
          auto bytes = ex.input(Buffer{r, Space::kTensor, p});
          std::memcpy(bytes.data(), shard.packed.data() + pl.offset, bytes.size());
        } else if (a.cast) {
          auto bytes = ex.input(Buffer{r, Space::kTensor, p});
          std::memcpy(bytes.data(), shard.master[static_cast<std::size_t>(p)].data(), bytes.size());
        }
      }
      if (!a.cast && !a.baseline && !plan_options.staged_shards) {
        write_resident_shard(ex, layout, r, arena.resident, shard);
      }
    }
  }
  Outcome o = run_call(a, prog, ex, final_event);
  if (a.timing_only) return o;
  check_gathered_landing(o, ex, layout, shards);
  if (!a.dump.empty()) {
    json files = json::object();
    const std::string type = npy_type(item);
    for (int r = 0; r < t.world(); ++r) {
      const std::string shard = fmt::format("shard_r{}.npy", r);
      write_npy(a.dump + "/" + shard, type, {layout.shard_bytes() / item},
                shards[static_cast<std::size_t>(r)].packed);
      files[shard] =
          fmt::format("rank {}'s packed input shard (P shards, padded rows included)", r);
      const auto seen = ex.memory(Buffer{r, Space::kOutput, 0});
      for (int p = 0; p < layout.param_count(); ++p) {
        const ParamLayout& pl = layout.param(p);
        const std::string name = fmt::format("landing_r{}_p{}.npy", r, p);
        write_npy(a.dump + "/" + name, type, {pl.rows, pl.cols},
                  seen.subspan(static_cast<std::size_t>(layout.landing_offset(p, 0)),
                               static_cast<std::size_t>(pl.rows * pl.cols * item)));
        files[name] =
            fmt::format("parameter {} (D_p, K_p) as rank {} sees it after the call", p, r);
      }
    }
    write_manifest(a, layout, files);
  }
  return o;
}

Outcome simulate_reduce_scatter(const SimulateArgs& a, const GroupLayout& layout,
                                program::Fault fault) {
  const RsPlan plan(layout, a.rs.options(layout));
  const Topology& t = layout.topology();
  program::RsProgramOptions options = rs_program_options(a, t.world());
  options.fault = fault;
  require_fault_can_show(a, program::rs_fault_inapplicable(fault, plan, options));
  require_call_fits(a, estimate_reduce_scatter(plan, !a.timing_only, a.baseline));
  program::RsProgramIds ids;
  program::Fsdp2Ids stock_ids;
  program::Fsdp2Options stock;
  stock.alpha = options.alpha;
  stock.accumulate = options.accumulate;
  const program::Program prog = a.baseline
                                    ? program::build_fsdp2_reduce_scatter(layout, stock, &stock_ids)
                                    : program::build_rs_program(plan, options, &ids);
  const int final_event = a.baseline ? stock_ids.done_event : ids.done_event;
  exec::ReferenceExecutor ex(prog, exec::ExecutorOptions{a.timing_only});
  const RsInputs in = write_random_rs_inputs(a, layout, ex);
  const std::int64_t item = item_bytes(layout.grad_dtype());
  Outcome o = run_call(a, prog, ex, final_event);
  if (a.timing_only) return o;
  check_outputs(o, ex, [&](const auto& out, const auto& record, CheckResult& result) {
    check_reduce_scatter(plan, in.grads, options.alpha, a.accumulate, in.initial, out, record,
                         result);
  });
  const bool exact_required = options.landing == program::LandingStyle::kPull && !a.baseline;
  o.passed = o.run.clean() && o.max_abs_error <= o.tolerance && (o.bitwise || !exact_required);
  if (!a.dump.empty()) {
    json files = json::object();
    for (int r = 0; r < t.world(); ++r) {
      for (int p = 0; p < layout.param_count(); ++p) {
        const ParamLayout& pl = layout.param(p);
        const auto& values = in.grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
        std::vector<std::byte> raw(values.size() * static_cast<std::size_t>(item));
        store_values(values, layout.grad_dtype(), raw);
        const std::string name = fmt::format("grad_r{}_p{}.npy", r, p);
        write_npy(a.dump + "/" + name, npy_type(item), {pl.rows, pl.cols}, raw);
        files[name] = fmt::format("rank {}'s gradient of parameter {} (D_p, K_p)", r, p);
      }
      if (a.accumulate) {
        const auto& init = in.initial[static_cast<std::size_t>(r)];
        const std::string name = fmt::format("out_init_r{}.npy", r);
        write_npy(a.dump + "/" + name, "<f4", {layout.shard_elems()},
                  std::as_bytes(std::span<const float>(init)));
        files[name] = fmt::format("rank {}'s fp32 output before the call (accumulate)", r);
      }
      const std::string name = fmt::format("out_r{}.npy", r);
      write_npy(a.dump + "/" + name, "<f4", {layout.shard_elems()},
                ex.memory(Buffer{r, Space::kOutput, 0}));
      files[name] = fmt::format(
          "rank {}'s packed fp32 shard: parameters in order, R_p K_p elements each (Eq. 5)", r);
    }
    write_manifest(a, layout, files, {{"alpha", options.alpha}, {"accumulate", a.accumulate}});
  }
  return o;
}

// --lane ep: the expert-parallel lane's all-gather (App. F), checked as TIDE-AG is (Eq. 2 bit
// for bit in what each rank's layer read).
Outcome simulate_ep_all_gather(const SimulateArgs& a, const GroupLayout& layout,
                               program::Fault fault) {
  require_fault_can_show(a, program::ep_ag_fault_inapplicable(fault, layout));
  // TIDE-AG's M x 1 plan holds a receive stage the lane has not: its estimate bounds the lane's.
  require_call_fits(a, estimate_all_gather(AgPlan(layout, AgOptions{}), !a.timing_only, false));
  program::EpAgProgramOptions options;
  options.consumer = !a.timing_only;
  options.fault = fault;
  program::EpAgProgramIds ids;
  const program::Program prog = program::build_ep_ag_program(layout, options, &ids);
  const program::EpAgArenaLayout arena = program::ep_ag_arena_layout(layout);
  exec::ReferenceExecutor ex(prog, exec::ExecutorOptions{a.timing_only});
  std::mt19937_64 rng(a.data_seed);
  std::vector<AgShard> shards;
  if (!a.timing_only) {
    shards = random_shards(rng, layout, false);
    for (int r = 0; r < layout.topology().world(); ++r) {
      write_previous_landing(ex, rng, layout, r, arena.landing);
      write_resident_shard(ex, layout, r, arena.resident, shards[static_cast<std::size_t>(r)]);
    }
  }
  Outcome o = run_call(a, prog, ex, ids.ready_event);
  if (a.timing_only) return o;
  check_gathered_landing(o, ex, layout, shards);
  return o;
}

// --lane ep: the expert-parallel lane's reduce-scatter (App. F), bit for bit in the lane's
// arithmetic order (ep_rs_expected) and within the float64 tolerance.
Outcome simulate_ep_reduce_scatter(const SimulateArgs& a, const GroupLayout& layout,
                                   program::Fault fault) {
  if (const std::string why = program::ep_rs_inapplicable(layout); !why.empty()) {
    throw InvalidArgument("--lane ep: " + why);
  }
  const Topology& t = layout.topology();
  const program::RsProgramOptions rs = rs_program_options(a, t.world());
  program::EpRsProgramOptions options;
  options.alpha = rs.alpha;
  options.accumulate = rs.accumulate;
  options.sum_ctas = rs.sum_ctas;
  options.landing_ctas = rs.landing_ctas;
  options.parts = a.rail_parts;
  options.fault = fault;
  if (a.rail_parts < 1) throw InvalidArgument("--rail-parts must be at least 1");
  require_fault_can_show(a, program::ep_rs_fault_inapplicable(fault, layout, options));
  require_call_fits(a, estimate_reduce_scatter(RsPlan(layout, RsOptions{}), !a.timing_only, false));
  program::EpRsProgramIds ids;
  const program::Program prog = program::build_ep_rs_program(layout, options, &ids);
  exec::ReferenceExecutor ex(prog, exec::ExecutorOptions{a.timing_only});
  const RsInputs in = write_random_rs_inputs(a, layout, ex);
  Outcome o = run_call(a, prog, ex, ids.done_event);
  if (a.timing_only) return o;
  check_outputs(o, ex, [&](const auto& out, const auto& record, CheckResult& result) {
    check_reduce_scatter(layout,
                         ep_rs_expected(layout, in.grads, options.alpha, a.accumulate, in.initial),
                         in.grads, options.alpha, a.accumulate, in.initial, out, record, result);
  });
  o.passed = o.run.clean() && o.max_abs_error <= o.tolerance && o.bitwise;
  return o;
}

// What --lane ep takes: the one-call collectives of a lane group (L = 1), TIDE's programs only.
void require_ep_lane_arguments(const SimulateArgs& a) {
  if (a.lane.empty()) {
    if (a.rail_parts_given) throw InvalidArgument("--rail-parts is for --lane ep");
    return;
  }
  if (a.lane != "ep") throw InvalidArgument("--lane '" + a.lane + "' must be ep");
  if (a.collective == "step") {
    throw InvalidArgument("--lane ep runs one all-gather or reduce-scatter, not a step");
  }
  if (a.baseline) throw InvalidArgument("--lane ep runs TIDE's lane; drop --baseline");
  if (a.cast) throw InvalidArgument("--lane ep gathers resident bf16 shards; drop --cast");
  if (a.landing != "pull")
    throw InvalidArgument("--lane ep has no Level 2 landing; drop --landing");
  if (!a.dump.empty()) throw InvalidArgument("--dump is not written for --lane ep");
}

void run_simulate(const SimulateArgs& a) {
  if (a.list_faults) {
    Table table({"fault", "collective", "breaks", "detected as", "what it does"});
    json out = json::array();
    for (const program::FaultInfo& f : program::fault_catalog()) {
      table.row({std::string(f.name), std::string(f.collective), std::string(f.rule),
                 std::string(program::detection_name(f.expected)), std::string(f.description)});
      out.push_back({{"name", f.name},
                     {"collective", f.collective},
                     {"rule", f.rule},
                     {"description", f.description},
                     {"expected_detection", program::detection_name(f.expected)},
                     {"mechanism", f.mechanism}});
    }
    if (a.json) {
      std::cout << json{{"faults", out}}.dump(2) << '\n';
    } else {
      table.print(std::cout);
    }
    return;
  }
  if (!a.expect_detection.empty()) {
    if (a.inject.empty()) throw InvalidArgument("--expect-detection needs --inject");
    program::parse_detection(a.expect_detection);  // names the classes when unknown
  }
  require_ep_lane_arguments(a);
  if (a.collective == "step") return simulate_step(a);
  if (a.collective != "all-gather" && a.collective != "reduce-scatter") {
    throw InvalidArgument("tide simulate needs all-gather, reduce-scatter or step (got '" +
                          a.collective + "')");
  }
  if (!a.groups.empty()) throw InvalidArgument("--groups is for tide simulate step");
  if (a.step_options_given) {
    throw InvalidArgument("--layers and --ag-stages are for tide simulate step, not " +
                          a.collective);
  }
  const program::Fault fault =
      a.inject.empty() ? program::Fault::kNone : program::parse_fault(a.inject);
  const std::string fault_owner = a.lane.empty() ? a.collective : "ep-" + a.collective;
  require_fault_can_show(a, program::fault_collective_mismatch(fault, fault_owner));
  if (fault != program::Fault::kNone && a.baseline) {
    throw InvalidArgument("--inject applies to TIDE's programs, not to --baseline");
  }
  if (fault != program::Fault::kNone && a.timing_only) {
    throw InvalidArgument("--inject needs data and race tracking; drop --timing-only");
  }
  if (!a.dump.empty() && a.timing_only) {
    throw InvalidArgument("--dump needs data; drop --timing-only");
  }
  if (!a.dump.empty()) prepare_dump_directory(a.dump);
  NamedGroup group = resolve_group(a.shapes, a.model);
  const DType ag = simulated_ag_dtype(a);
  const GroupLayout layout(Topology(a.nodes, a.gpus_per_node), std::move(group.params), ag,
                           parse_dtype(a.grad_dtype, "--grad-dtype"));
  if (!a.lane.empty()) {
    if (const std::string why = program::ep_lane_inapplicable(layout); !why.empty()) {
      throw InvalidArgument("--lane ep: " + why + " (use -L 1)");
    }
  }
  const bool all_gather = a.collective == "all-gather";
  const Outcome o = a.lane.empty() ? (all_gather ? simulate_all_gather(a, layout, fault)
                                                 : simulate_reduce_scatter(a, layout, fault))
                                   : (all_gather ? simulate_ep_all_gather(a, layout, fault)
                                                 : simulate_ep_reduce_scatter(a, layout, fault));
  const FaultOutcome how = fault_outcome(a, fault, o.run, o.data, o.passed);
  json out = {{"collective", a.collective},
              {"system", a.baseline ? "fsdp2" : "tide"},
              {"lane", a.lane.empty() ? "tide" : a.lane},
              {"group", group.name},
              {"nodes", a.nodes},
              {"gpus_per_node", a.gpus_per_node},
              {"timing_only", a.timing_only},
              {"schedule_seed", a.schedule_seed},
              {"data_seed", a.data_seed},
              {"ag_dtype", dtype_name(layout.ag_dtype())},
              {"grad_dtype", dtype_name(layout.grad_dtype())},
              {"completed", o.run.completed},
              {"deadlock", o.run.deadlock},
              {"error_count", o.run.error_count},
              {"ops", o.run.ops_run},
              {"predicted_ms", o.predicted_us / 1000.0},
              {"makespan_ms", o.run.makespan_us / 1000.0},
              {"sm_ms", o.run.sm_time_us / 1000.0},
              {"sm_ms_per_gpu", o.run.sm_time_us / 1000.0 / (a.nodes * a.gpus_per_node)},
              {"peak_buffer_bytes", o.run.peak_buffer_bytes}};
  const auto [machine, machine_gpu] = simulated_machine(a);
  out["machine"] = machine;
  if (!machine_gpu.empty()) out["machine_gpu"] = machine_gpu;
  json errors = json::array();
  for (const exec::ExecError& e : o.run.errors)
    errors.push_back(e.message);
  out["errors"] = errors;
  if (o.data) {
    out["max_abs_error"] = o.max_abs_error;
    out["tolerance"] = o.tolerance;
    out["bitwise_equal_to_reference_order"] = o.bitwise;
    out["passed"] = o.passed;
    out["output_sha256"] = o.sha256 ? json(*o.sha256) : json(nullptr);
  }
  if (fault != program::Fault::kNone) add_fault_fields(out, how);
  if (a.json) {
    std::cout << out.dump(2) << '\n';
  } else {
    std::cout << fmt::format("tide simulate {} {} of {} on M={} x L={} ({}, schedule seed {})\n",
                             a.baseline       ? "stock FSDP2"
                             : a.lane.empty() ? "TIDE"
                                              : "TIDE expert-parallel lane",
                             a.collective, group.name, a.nodes, a.gpus_per_node,
                             a.timing_only ? "timing only" : "data", a.schedule_seed);
    Table table({"result", "value"});
    table.left_aligned();
    table.row({"predicted latency", fixed(o.predicted_us / 1000.0, 3) + " ms"});
    table.row({"machine", machine_gpu.empty() ? machine : machine + " (" + machine_gpu + ")"});
    if (o.data) table.row({"data seed", std::to_string(a.data_seed)});
    table.row({"dtypes", fmt::format("all-gather {}, gradients {}", dtype_name(layout.ag_dtype()),
                                     dtype_name(layout.grad_dtype()))});
    table.row({"SM time (CTA x time) per GPU",
               fixed(o.run.sm_time_us / 1000.0 / (a.nodes * a.gpus_per_node), 3) + " CTA-ms"});
    table.row({"peak buffer bytes per GPU", bytes(o.run.peak_buffer_bytes)});
    table.row({"ops run", num(o.run.ops_run)});
    table.row({"races / protocol errors", num(o.run.error_count)});
    table.row({"deadlock", o.run.deadlock ? "yes" : "no"});
    if (o.data) {
      table.row({"max |out - float64 ref|",
                 fmt::format("{:.3g} (tolerance {:.3g})", o.max_abs_error, o.tolerance)});
      table.row({"bitwise = reference order", o.bitwise ? "yes" : "no"});
      table.row({"passed", o.passed ? "yes" : "NO"});
      if (o.sha256) table.row({"output sha256", *o.sha256});
    }
    if (fault != program::Fault::kNone) {
      table.row({"fault " + a.inject, fault_summary(how)});
    }
    table.print(std::cout);
    for (std::size_t i = 0; i < o.run.errors.size() && i < 3; ++i) {
      std::cout << "  error: " << o.run.errors[i].message << '\n';
    }
  }
  if (fault != program::Fault::kNone) return require_expected_detection(how);
  if (!o.run.clean() || (o.data && !o.passed)) {
    throw CheckFailed("the simulation failed its checks (see above)");
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "Run TIDE-AG or TIDE-RS on the CPU reference executor (data or timing)");
  cmd->add_option("collective", a->collective,
                  "all-gather, reduce-scatter, or step (a training step's calls in FSDP2 order)");
  cmd->add_option("--nodes,-M", a->nodes, "Nodes M")->capture_default_str();
  cmd->add_option("--gpus-per-node,-L", a->gpus_per_node, "GPUs per node L")->capture_default_str();
  auto* shapes = cmd->add_option("--shapes", a->shapes, "Parameter shapes D0xK0,...");
  auto* model = cmd->add_option("--model", a->model, "Model preset NAME[:GROUP]");
  shapes->excludes(model);
  cmd->add_option("--ag-dtype", a->ag_dtype,
                  "All-gather dtype: bf16, fp32, or fp8 / u8 (1-byte items, random bytes checked "
                  "byte for byte)")
      ->capture_default_str();
  cmd->add_option("--grad-dtype", a->grad_dtype, "Gradient dtype: bf16 or fp32")
      ->capture_default_str();
  cmd->add_flag("--cast", a->cast, "Mixed-precision all-gather from fp32 master shards");
  cmd->add_flag("--staged", a->staged,
                "All-gather: shards given per call and copied in, as tide.fsdp registers its "
                "groups (default: a resident shard in the arena)");
  a->rs.add_to(*cmd);
  cmd->add_option("--sum-ctas", a->sum_ctas, "Level 1 CTA budget")->capture_default_str();
  cmd->add_option("--landing-ctas", a->landing_ctas, "Landing CTA budget")->capture_default_str();
  cmd->add_option("--landing", a->landing, "pull or switch-reduce")->capture_default_str();
  cmd->add_flag("--accumulate", a->accumulate, "Accumulate into the output (Eq. 5)");
  cmd->add_option("--alpha", a->alpha, "Scale (default 1/N)");
  cmd->add_option("--schedule-seed", a->schedule_seed, "Picks among ready ops")
      ->capture_default_str();
  cmd->add_option("--data-seed", a->data_seed, "Picks the random inputs")->capture_default_str();
  cmd->add_option("--jitter", a->jitter, "Duration jitter in [0, 1)")->capture_default_str();
  cmd->add_option("--inject", a->inject, "A fault to inject (see --list-faults)");
  cmd->add_option("--expect-detection", a->expect_detection,
                  "With --inject: the detection to require instead of the fault's own (race, "
                  "deadlock, corruption, malformed, uninitialised-read, call-order-mismatch)");
  cmd->add_flag("--baseline", a->baseline, "Run stock FSDP2's program instead of TIDE's");
  cmd->add_flag("--list-faults", a->list_faults, "List the injectable faults");
  cmd->add_flag("--timing-only", a->timing_only, "No data: schedule and times only");
  cmd->add_option("--trace", a->trace, "Write a Chrome trace (Perfetto) to this file");
  cmd->add_option("--timeline", a->timeline, "Write an SVG timeline of the first 8 ranks");
  cmd->add_option(
      "--cost-model", a->cost_model,
      "JSON file overriding cost-model parameters, a tide calibrate file, or a machine file "
      "(\"machine\": \"virtual-fabric\": every rank on one GPU)");
  cmd->add_option("--dump", a->dump, "Write inputs and outputs as .npy plus manifest.json");
  cmd->add_option("--layers", a->layers, "step: how many times the layer group repeats")
      ->capture_default_str();
  cmd->add_option("--ag-stages", a->ag_stages,
                  "step: all-gather receive stages (the runtime keeps 1)")
      ->capture_default_str();
  cmd->add_option("--groups", a->groups, "step: distinct groups' shapes, 'D0xK0,...;D0xK0,...'");
  cmd->add_option("--lane", a->lane,
                  "ep: the expert-parallel lane (App. F) of a group with one rank per node (-L 1)");
  cmd->add_option("--rail-parts", a->rail_parts, "--lane ep reduce-scatter: rail parts per shard")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a, cmd] {
    a->step_options_given = cmd->count("--layers") > 0 || cmd->count("--ag-stages") > 0;
    a->rail_parts_given = cmd->count("--rail-parts") > 0;
    // Stock FSDP2 is judged against the multi-node layout's reference: its padding is out + 0
    // (NOTE [arithmetic order]), and only its tolerance counts.
    if (a->baseline) a->rs.multi_node_layout = true;
    run_simulate(*a);
  });
}

}  // namespace tide::cli
