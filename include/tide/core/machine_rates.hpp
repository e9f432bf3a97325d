// The rates of one GPU of the paper's evaluation platform (H200, a 400 Gb/s rail per GPU):
// App. G's calibration, in one place. The sizing solver's defaults (core/rs_defaults.hpp), the
// cost model's defaults (exec/cost_model.hpp) and `tide calibrate`'s given values
// (calibrate/measure.hpp) take theirs from here; a calibration file replaces them.
#pragma once

namespace tide {

struct MachineRates {
  double bw_nic_gbps = 0;   // BW_NIC: sustained per-rail throughput, GB/s
  double bw_sum_gbps = 0;   // BW_sum: Level 1 sum rate per CTA, logical GB/s
  double bw_land_gbps = 0;  // BW_land: landing rate per CTA, GB/s in situ
  double bw_cap_gbps = 0;   // BW_cap: landing fabric ceiling, GB/s
  double t_round_ms = 0;    // t_rnd: per-round wait overhead, ms
};
inline constexpr MachineRates kDefaultMachineRates{47.5, 99.0, 21.0, 90.0, 1.3};

}  // namespace tide
