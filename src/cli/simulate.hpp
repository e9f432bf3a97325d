// What `tide simulate` takes, and the pieces its one-call and step forms share.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "rs_args.hpp"
#include "tide/core/cta_budgets.hpp"
#include "tide/core/dtype.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/faults.hpp"
#include "tide/program/program.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide::cli {

struct SimulateArgs {
  std::string collective;
  int nodes = 1;
  int gpus_per_node = 8;
  std::string shapes, model;
  std::string ag_dtype = "bf16", grad_dtype = "bf16";
  bool cast = false;
  bool staged = false;  // all-gather: shards given per call and copied in (as tide.fsdp does)
  RsArgs rs;
  int sum_ctas = kDefaultSumCtas, landing_ctas = kDefaultLandingCtas;
  std::string landing = "pull";
  bool accumulate = false;
  float alpha = 0;  // 0: 1 / N, FSDP2's average
  std::uint64_t schedule_seed = 0, data_seed = 1;
  double jitter = 0.25;
  std::string inject, trace, timeline, cost_model, dump;
  std::string expect_detection;  // overrides the injected fault's expected detection
  bool timing_only = false, json = false, list_faults = false, baseline = false;
  int layers = 2;                   // step: how many times the layer group repeats
  int ag_stages = 1;                // step: all-gather receive stages (the runtime keeps 1)
  std::string groups;               // step: shape sets of distinct groups, "D0xK0,...;D0xK0,..."
  bool step_options_given = false;  // --layers or --ag-stages on the command line
  std::string lane;                 // "ep": the expert-parallel lane (App. F, program/ep_lane.hpp)
  int rail_parts = 4;               // --lane ep reduce-scatter: rail parts per shard
  bool rail_parts_given = false;
};

// When the last record of `event` completed, over every rank (0 when none ran).
double event_time(const program::Program& prog, const exec::RunResult& run, int event);
// --trace and --timeline.
void write_traces(const SimulateArgs& a, const program::Program& prog, const exec::RunResult& run);
// Seed, jitter and cost model.
exec::RunOptions run_options(const SimulateArgs& a);
// alpha (default 1/N), accumulate, CTA budgets and landing style from the options.
program::RsProgramOptions rs_program_options(const SimulateArgs& a, int world);
// How an injected fault showed (NOTE [fault detection]) against how it must show.
struct FaultOutcome {
  program::Fault fault = program::Fault::kNone;
  program::Detection detected = program::Detection::kNone;
  program::Detection expected = program::Detection::kNone;
  std::string evidence;  // the first finding of the detected class
  bool as_expected() const { return detected == expected; }
};
FaultOutcome fault_outcome(const SimulateArgs& a, program::Fault fault, const exec::RunResult& run,
                           bool data, bool passed);
// fault, fault_detected, detected_by, expected_detection, detected_as_expected, mechanism,
// evidence.
void add_fault_fields(nlohmann::json& out, const FaultOutcome& outcome);
// One line for the table: "race (as expected)" or "NOT DETECTED (expected race)".
std::string fault_summary(const FaultOutcome& outcome);
// --ag-dtype, refused with --cast unless bf16 (the cast writes bf16).
DType simulated_ag_dtype(const SimulateArgs& a);
// Throws CheckFailed when the fault showed other than expected.
void require_expected_detection(const FaultOutcome& outcome);

// `tide simulate step` (cmd_simulate_step.cpp).
void simulate_step(const SimulateArgs& a);

}  // namespace tide::cli
