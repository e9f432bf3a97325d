// Level 2 of TIDE-RS, multimem variant (paper Sec. 4.2, Sec. 2.4): the NVSwitch sums the
// wave, one multimem.ld_reduce.relaxed.sys.global.add.v4.f32 per 16 bytes through the
// multicast mapping, then the pull landing's rule (level2_landing.cu, step 2). Never executed
// on the lent machines: launching it needs opt_in, TIDE_ENABLE_MULTIMEM=1 and a device that
// reports multicast support; otherwise the launcher throws Unsupported (landing.hpp).
// Synchronisation contract: as the pull landing's, with the multicast mapping in place of the
// W partials.
#include <cstdint>
#include <string>

#include "ptx.cuh"
#include "tide/core/env.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/landing.hpp"

namespace tide::kernels {
namespace {

constexpr int kLandingThreads = 512;  // as the pull landing's

#if TIDE_HAS_MULTIMEM || !defined(__CUDA_ARCH__)
template <bool kReadOut>
__global__ void __launch_bounds__(kLandingThreads)
    landing_multimem_kernel(float* out, const float* mc, std::int64_t nvec) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t nthreads = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  auto* out4 = reinterpret_cast<float4*>(out);
  for (std::int64_t v = tid; v < nvec; v += nthreads) {
    float4 w;
    asm volatile("multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(w.x), "=f"(w.y), "=f"(w.z), "=f"(w.w)
                 : "l"(mc + 4 * v)
                 : "memory");
    if (kReadOut) {
      const float4 o = out4[v];
      w = make_float4(__fadd_rn(o.x, w.x), __fadd_rn(o.y, w.y), __fadd_rn(o.z, w.z),
                      __fadd_rn(o.w, w.w));
    }
    out4[v] = make_float4(ptx::canonical(w.x), ptx::canonical(w.y), ptx::canonical(w.z),
                          ptx::canonical(w.w));
  }
}
#endif

[[noreturn]] void invalid(const std::string& what) {
  throw InvalidArgument("launch_landing: " + what);
}

}  // namespace

bool multimem_supported(int device) {
  int value = 0;
  // cudaDevAttrReserved132 is CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED (cuda.h) in the runtime.
  if (cudaDeviceGetAttribute(&value, cudaDevAttrReserved132, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return value != 0;
}

// TIDE_ENABLE_MULTIMEM (NOTE [environment knobs]).
bool multimem_enabled_by_environment() {
  return env::flag("TIDE_ENABLE_MULTIMEM");
}

void launch_landing_multimem(const MultimemLandingArgs& a, cudaStream_t stream, bool opt_in) {
  if (!opt_in || !multimem_enabled_by_environment()) {
    throw Unsupported(
        "launch_landing_multimem: the multimem landing needs opt_in and TIDE_ENABLE_MULTIMEM=1; "
        "use launch_landing (pull)");
  }
  int device = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  if (!multimem_supported(device)) {
    throw Unsupported("launch_landing_multimem: device " + std::to_string(device) +
                      " reports no multicast support; use launch_landing (pull)");
  }
  if (a.out == nullptr || a.multicast == nullptr) invalid("multimem: null pointer");
  if (a.n < 0 || a.n % 4 != 0)
    invalid("multimem: n = " + std::to_string(a.n) + " is not a multiple of 4");
  if (reinterpret_cast<std::uintptr_t>(a.out) % 16 != 0 ||
      reinterpret_cast<std::uintptr_t>(a.multicast) % 16 != 0) {
    invalid("multimem: pointers must be 16-byte aligned");
  }
  if (a.ctas < 1 || a.ctas > kMaxLandingCtas) invalid("multimem: ctas outside [1, 1024]");
  if (a.n == 0) return;
  const bool read_out = a.wave_index > 0 || a.accumulate;
  if (read_out) {
    landing_multimem_kernel<true>
        <<<a.ctas, kLandingThreads, 0, stream>>>(a.out, a.multicast, a.n / 4);
  } else {
    landing_multimem_kernel<false>
        <<<a.ctas, kLandingThreads, 0, stream>>>(a.out, a.multicast, a.n / 4);
  }
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::kernels
