// The calibration file: this machine's rates for the sizing solver (App. G, Sec. 6.3) and the
// reference executor's cost model (NOTE [cost model]), as written by `tide calibrate`.
//
// NOTE [calibration file]
// One JSON object, format version 1 (docs/cli.md, "Calibration file"):
//   {
//     "tide_calibration": 1,
//     "device":  { free-form: name, SMs, clocks, CUDA versions, ... },
//     "values":  { NAME: {"value": NUMBER, "unit": "GB/s" | "us",
//                         "source": "measured" | "given", "method": TEXT}, ... },
//     "details": { free-form: the sweeps behind the values (per-CTA tables, batched and
//                  peer copies, round trips); read by people, not by TIDE }
//   }
// NAME runs over every numeric cost-model parameter (the names of include/tide/exec/
// cost_model.hpp: ce_copy_gbps, ..., host_enqueue_us); each must be present exactly once.
// "measured" values were timed on this machine; "given" ones (the rail NIC, the per-round
// wait, NVLink on a single GPU, ...) came from a flag or a default and say which in "method".
// Rates (names ending _gbps) are 1e9 bytes/s and must be > 0; times (_us) must be >= 0.
//
// Readers: `tide solve --calibration FILE` takes BW_NIC = nic_gbps, BW_sum = sum_cta_gbps,
// BW_land = land_cta_gbps, BW_cap = land_cap_gbps and t_rnd = round_wait_us (flags override);
// `tide simulate --cost-model FILE` takes every value (a plain cost-model override file keeps
// working there too).
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
