// The values of a calibration that one host cannot measure (NOTE [calibration file]): they
// come from `tide calibrate`'s flags or defaults and are marked "given".
#include "tide/calibrate/measure.hpp"

namespace tide::calibrate {

void add_given_values(const MeasureOptions& o, Calibration& c) {
  auto give = [&](const char* name, double value, const std::string& method) {
    if (c.values.count(name) == 0) c.values[name] = {value, Source::kGiven, method};
  };
  give("nic_gbps", o.nic_gbps, "--nic-gbps; " + o.nic_source);
  give("round_wait_us", o.t_round_ms * 1000.0, "--t-round (ms); " + o.t_round_source);
  give("rail_latency_us", o.rail_latency_us, "--rail-latency-us; " + o.rail_latency_source);
  give("nvlink_gbps", o.nvlink_gbps,
       "--nvlink-gbps (fewer than 2 peer-capable GPUs visible); " + o.nvlink_source);
  // Anything a backend did not measure falls back to the cost model's documented default.
  const nlohmann::json defaults = nlohmann::json::parse(exec::cost_model_json(exec::CostModel{}));
  for (const std::string& name : parameter_names()) {
    give(name.c_str(), defaults[name].get<double>(),
         "cost-model default (include/tide/exec/cost_model.hpp); not measured");
  }
}

}  // namespace tide::calibrate
