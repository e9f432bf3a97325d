// Level 2 landing of TIDE-RS (Sec. 4.2, App. G BW_land): folds one wave of W fp32 partials
// into the fp32 output shard, wave = part[0] + ... + part[W-1] (contributor order), out =
// (wave_index == 0 && !accumulate) ? wave : out + wave (NOTE [arithmetic order]: wave_sum,
// land). The pull landing reads LSA (peer) or local pointers, passed as kernel parameters; the
// multimem variant is opt-in and never run here (docs/kernels.md). Host-compilable.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tide/core/cta_budgets.hpp"

namespace tide::kernels {

inline constexpr int kMaxWave = 8;
inline constexpr int kMaxLandingCtas = 1024;

struct LandingArgs {
  float* out = nullptr;  // n fp32 elements (any 4-byte alignment)
  std::int64_t n = 0;
  const float* partials[kMaxWave] = {};  // W pointers, contributor order
  int num_partials = 0;                  // W in [1, 8]
  int wave_index = 0;                    // 0 for the first wave of a call
  bool accumulate = false;               // fold into the existing output
  int ctas = kDefaultLandingCtas;        // landing CTA budget (App. G, Eq. 14)
};

// Validates (throws InvalidArgument) and enqueues the pull landing on `stream`.
void launch_landing(const LandingArgs& args, cudaStream_t stream);

// Loads every pull-landing kernel on the current device (NOTE [preloaded kernels]).
void prepare_landing();

// ---- Multimem (switch-reduction) landing: written, never executed here. ----
// Runs only with TIDE_ENABLE_MULTIMEM=1 AND `opt_in`, on a device with multicast support.
struct MultimemLandingArgs {
  float* out = nullptr;
  std::int64_t n = 0;                // a multiple of 4, 16-byte-aligned pointers
  const float* multicast = nullptr;  // the wave's blocks through the multicast mapping
  int wave_index = 0;
  bool accumulate = false;
  int ctas = kDefaultLandingCtas;
};

// True when the device reports NVSwitch multicast and reduction support.
bool multimem_supported(int device);
// True when TIDE_ENABLE_MULTIMEM=1 is set in the environment.
bool multimem_enabled_by_environment();
// Throws tide::Unsupported unless opt_in, the environment knob and the capability all hold.
void launch_landing_multimem(const MultimemLandingArgs& args, cudaStream_t stream, bool opt_in);

namespace detail {
struct LandingParams {
  float* out;
  const float* in[kMaxWave];
  std::int64_t n;
  std::int64_t head;  // scalar elements before the 16-byte-aligned vector body
  std::int64_t nvec;  // float4s in the body (0: everything is scalar)
};
}  // namespace detail

// What launch_landing would enqueue for `args` (validated alike; `empty` when n = 0), for a
// graph's landing node to take when its bindings change (cudaGraphExecKernelNodeSetParams).
struct LandingLaunch {
  const void* kernel = nullptr;
  int grid = 0;
  int block = 0;
  detail::LandingParams params{};
  bool empty = true;
};
LandingLaunch landing_launch(const LandingArgs& args);

}  // namespace tide::kernels
