// Level 2 of TIDE-RS: the pull landing kernel (paper Sec. 4.2 "Bounded waves and safe
// reuse", Sec. 2.4 "Architectural synthesis", Sec. 4.3, App. G BW_land). The multimem
// variant, never executed on the lent machines, is level2_multimem.cu.
//
// Pull landing, steps:
//   1. Each thread of a grid-stride loop takes U 16-byte vectors of the output at a time
//      (U = 4 for W <= 2, else 2; the body, where the output and all W partials are 16-byte
//      congruent) and loads the W partials of all U, and the output when it is read, before
//      any arithmetic: up to U * (W + 1) independent 16-byte loads in flight per thread
//      (loads are streaming, evict-first: each partial is read once).
//   2. wave = canonical(p[0]) + p[1] + ... + p[W-1] (__fadd_rn, contributor order), then
//      out = read_out ? out + wave : wave, where read_out = wave_index > 0 || accumulate
//      (NOTE [arithmetic order]: wave_sum, land); NaN is canonicalised.
//   3. Heads and tails (and everything, when the pointers are not congruent) go element by
//      element.
// Synchronisation contract: the caller orders the kernel after the wave's partials arrived
// (the rail signal / stream wait of Sec. 5.2) and after any earlier landing of the same
// output; the kernel reads the W partials and the output, writes only the output, and
// completes in stream order (the inbox generation may be reused after it). No device-side
// waits, no polling.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ptx.cuh"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/landing.hpp"

namespace tide::kernels {
namespace {

using detail::LandingParams;

constexpr int kLandingThreads = 512;

template <int W, bool kReadOut>
__device__ __forceinline__ float fold(const float (&x)[W], float o) {
  float wave = ptx::canonical(x[0]);
#pragma unroll
  for (int k = 1; k < W; ++k)
    wave = __fadd_rn(wave, x[k]);
  return kReadOut ? ptx::canonical(__fadd_rn(o, wave)) : ptx::canonical(wave);
}

template <int W, bool kReadOut>
__device__ __forceinline__ void land_scalar(const LandingParams& p, std::int64_t i) {
  float x[W];
#pragma unroll
  for (int k = 0; k < W; ++k)
    x[k] = __ldcs(p.in[k] + i);
  const float o = kReadOut ? p.out[i] : 0.0f;
  p.out[i] = fold<W, kReadOut>(x, o);
}

template <int W, bool kReadOut>
__global__ void __launch_bounds__(kLandingThreads)
    landing_kernel(const __grid_constant__ LandingParams p) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t nthreads = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t body_end = p.head + 4 * p.nvec;
  for (std::int64_t i = tid; i < p.head; i += nthreads)
    land_scalar<W, kReadOut>(p, i);
  for (std::int64_t i = body_end + tid; i < p.n; i += nthreads)
    land_scalar<W, kReadOut>(p, i);

  // U vectors per thread and trip: 2 * (W + 1) loads in flight for W >= 3, 4 * 3 for W <= 2.
  constexpr int U = W <= 2 ? 4 : 2;
  auto* out4 = reinterpret_cast<float4*>(p.out + p.head);
  for (std::int64_t v0 = tid; v0 < p.nvec; v0 += U * nthreads) {
    float4 x[U][W];
    float4 o[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t v = v0 + u * nthreads;
      o[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (v < p.nvec) {
#pragma unroll
        for (int k = 0; k < W; ++k)
          x[u][k] = __ldcs(reinterpret_cast<const float4*>(p.in[k] + p.head) + v);
        if (kReadOut) o[u] = out4[v];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::int64_t v = v0 + u * nthreads;
      if (v >= p.nvec) break;
      float a[W], b[W], c[W], d[W];
#pragma unroll
      for (int k = 0; k < W; ++k) {
        a[k] = x[u][k].x;
        b[k] = x[u][k].y;
        c[k] = x[u][k].z;
        d[k] = x[u][k].w;
      }
      out4[v] = make_float4(fold<W, kReadOut>(a, o[u].x), fold<W, kReadOut>(b, o[u].y),
                            fold<W, kReadOut>(c, o[u].z), fold<W, kReadOut>(d, o[u].w));
    }
  }
}

[[noreturn]] void invalid(const std::string& what) {
  throw InvalidArgument("launch_landing: " + what);
}

template <int W>
const void* kernel_for(bool read_out) {
  return read_out ? reinterpret_cast<const void*>(&landing_kernel<W, true>)
                  : reinterpret_cast<const void*>(&landing_kernel<W, false>);
}

}  // namespace

LandingLaunch landing_launch(const LandingArgs& a) {
  if (a.out == nullptr) invalid("out is null");
  if (a.n < 0) invalid("n = " + std::to_string(a.n) + " is negative");
  if (a.num_partials < 1 || a.num_partials > kMaxWave) {
    invalid("num_partials = " + std::to_string(a.num_partials) + " is outside [1, 8]");
  }
  if (a.wave_index < 0) invalid("wave_index = " + std::to_string(a.wave_index) + " is negative");
  if (a.ctas < 1 || a.ctas > kMaxLandingCtas) {
    invalid("ctas = " + std::to_string(a.ctas) + " is outside [1, 1024]");
  }
  const auto out_addr = reinterpret_cast<std::uintptr_t>(a.out);
  if (out_addr % 4 != 0) invalid("out is not 4-byte aligned");
  LandingLaunch launch;
  LandingParams& p = launch.params;
  std::memset(&p, 0, sizeof(p));
  p.out = a.out;
  p.n = a.n;
  bool congruent = true;
  for (int k = 0; k < a.num_partials; ++k) {
    if (a.partials[k] == nullptr) invalid("partial " + std::to_string(k) + " is null");
    const auto addr = reinterpret_cast<std::uintptr_t>(a.partials[k]);
    if (addr % 4 != 0) invalid("partial " + std::to_string(k) + " is not 4-byte aligned");
    congruent = congruent && (addr % 16 == out_addr % 16);
    p.in[k] = a.partials[k];
  }
  if (a.n == 0) return launch;
  if (congruent) {
    p.head =
        std::min<std::int64_t>(static_cast<std::int64_t>(((16 - out_addr % 16) % 16) / 4), a.n);
    p.nvec = (a.n - p.head) / 4;
  } else {
    p.head = a.n;
    p.nvec = 0;
  }
  const bool read_out = a.wave_index > 0 || a.accumulate;
  using Select = const void* (*)(bool);
  static constexpr Select kernels[kMaxWave] = {kernel_for<1>, kernel_for<2>, kernel_for<3>,
                                               kernel_for<4>, kernel_for<5>, kernel_for<6>,
                                               kernel_for<7>, kernel_for<8>};
  launch.kernel = kernels[a.num_partials - 1](read_out);
  launch.grid = a.ctas;
  launch.block = kLandingThreads;
  launch.empty = false;
  return launch;
}

void prepare_landing() {
  using Select = const void* (*)(bool);
  static constexpr Select kernels[kMaxWave] = {kernel_for<1>, kernel_for<2>, kernel_for<3>,
                                               kernel_for<4>, kernel_for<5>, kernel_for<6>,
                                               kernel_for<7>, kernel_for<8>};
  for (const Select select : kernels) {
    for (const bool read_out : {false, true}) {
      cudaFuncAttributes attributes{};  // needs the loaded function: loads it
      TIDE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, select(read_out)));
    }
  }
}

void launch_landing(const LandingArgs& a, cudaStream_t stream) {
  LandingLaunch launch = landing_launch(a);
  if (launch.empty) return;
  void* args[] = {&launch.params};
  TIDE_CUDA_CHECK(cudaLaunchKernel(launch.kernel, dim3(static_cast<unsigned>(launch.grid)),
                                   dim3(static_cast<unsigned>(launch.block)), args, 0, stream));
}

}  // namespace tide::kernels
