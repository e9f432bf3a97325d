// The calibration file: this machine's rates for the sizing solver (App. G, Sec. 6.3) and the
// reference executor's cost model (NOTE [cost model]), as written by `tide calibrate`.
// Its format, version 1, is NOTE [calibration file] in docs/cli.md: one JSON object whose
// "values" hold every numeric cost-model parameter exactly once (rates, _gbps, > 0; times,
// _us, >= 0), each "measured" on this machine or "given" by a flag or default.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tide/core/sizing_solver.hpp"
#include "tide/exec/cost_model.hpp"

namespace tide::calibrate {

inline constexpr const char* kFormatKey = "tide_calibration";
inline constexpr int kFormatVersion = 1;

enum class Source { kMeasured, kGiven };

const char* source_name(Source source);  // "measured" / "given"

struct Value {
  double value = 0;
  Source source = Source::kGiven;
  std::string method;  // how it was measured, or which flag / default gave it
};

struct Calibration {
  nlohmann::json device = nlohmann::json::object();
  std::map<std::string, Value> values;  // by cost-model parameter name
  nlohmann::json details = nlohmann::json::object();
};

// The numeric cost-model parameters, in the cost model's order, and the unit of each.
const std::vector<std::string>& parameter_names();
std::string unit_of(const std::string& name);  // "GB/s" or "us"

// Parses and validates a calibration file's text. `origin` (a path) prefixes every error.
// Throws InvalidArgument naming the field: malformed JSON, a missing "tide_calibration": 1,
// a missing, unknown or mistyped value, a non-positive rate or a negative time.
Calibration parse_calibration(const std::string& text, const std::string& origin);
Calibration load_calibration(const std::string& path);
// True when `text` is a JSON object with the "tide_calibration" key.
bool looks_like_calibration(const std::string& text);

// The file's text (validated first: throws InternalError if a value is missing or bad).
std::string calibration_json(const Calibration& calibration);

// The cost model with every value of the calibration.
exec::CostModel to_cost_model(const Calibration& calibration);
// Reads a `--cost-model` file: a calibration file or a plain override object
// (exec::load_cost_model). Throws InvalidArgument as those do.
exec::CostModel load_cost_model_file(const std::string& path);

// The solver's rates from the calibration (BW_NIC, BW_sum, BW_land, BW_cap, t_rnd).
struct SolverRates {
  double bw_nic_gbps = 0, bw_sum_gbps = 0, bw_land_gbps = 0, bw_cap_gbps = 0, t_round_ms = 0;
};
SolverRates solver_rates(const Calibration& calibration);

}  // namespace tide::calibrate
