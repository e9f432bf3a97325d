// `tide calibrate`'s measurements on one GPU (paper Sec. 6.3, App. G): the rates and fixed
// costs of NOTE [calibration file], timed with CUDA events (medians over repeats, buffers
// rotated over more than the L2). Two backends behind this one interface: measure_cuda.cu
// (built where nvcc is found) and measure_none.cpp (builds without CUDA, always refuses).
#pragma once

#include <iosfwd>
#include <string>

#include "tide/calibrate/calibration.hpp"
#include "tide/core/cta_budgets.hpp"
#include "tide/core/machine_rates.hpp"

namespace tide::calibrate {

// Rates one host cannot measure, recorded with source "given", and the measurement knobs.
struct MeasureOptions {
  int device = 0;
  bool quick = false;                      // fewer repeats and smaller buffers (a smoke run, ~5 s)
  int sum_ctas = kDefaultSumCtas;          // BW_sum is the per-CTA rate at this Level 1 budget
  int landing_ctas = kDefaultLandingCtas;  // BW_land is the per-CTA rate at this landing budget
  double nic_gbps =
      kDefaultMachineRates.bw_nic_gbps;  // rail NIC per GPU (App. G BW_NIC); never measurable here
  double t_round_ms =
      kDefaultMachineRates.t_round_ms;  // per-round wait (App. G t_rnd); needs a rail peer
  double rail_latency_us = 5.0;         // RDMA put + signal latency (cost-model default)
  double nvlink_gbps = 450.0;  // peer rate per GPU, used when fewer than 2 GPUs are visible
  std::string nic_source = "default: App. G calibration BW_NIC = 47.5 GB/s";
  std::string t_round_source = "default: App. G calibration t_rnd = 1.3 ms";
  std::string rail_latency_source = "default: cost-model assumption";
  std::string nvlink_source = "default: H200 NVLink 4, 450 GB/s per direction";
};

// True when this build has the CUDA backend.
bool have_cuda_backend();

// Measures every rate it can on `options.device`, the rest from `options`; progress to `log`.
// tide::Unsupported (one line) without a usable device or CUDA build; tide::CudaError.
Calibration measure(const MeasureOptions& options, std::ostream* log = nullptr);

// The values `measure` cannot take on this machine, from the options (source "given").
void add_given_values(const MeasureOptions& options, Calibration& calibration);

}  // namespace tide::calibrate
