// Mixed-precision all-gather cast (paper Sec. 3.1 "In-place shard adoption vs.
// mixed-precision cast"): fp32 master shard -> bf16 receive-stage slot.
//
// Steps:
//   1. Where source and destination are congruent (the same element offset modulo 4), a
//      grid-stride loop converts four elements per 16-byte load and 8-byte store, two vectors
//      per thread in flight; heads and tails, and incongruent buffers, go element by element.
//   2. Each element: bf16 = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16, NaN -> 0x7FFF, the
//      integer form of round-to-nearest-even in tide::arith::float_to_bf16 (bitwise equal by
//      construction; no reliance on the hardware conversion's NaN payload).
// Synchronisation contract: the caller orders the kernel after the master shard's last
// update and after the previous call released the receive-stage slot (Sec. 3.1); the kernel
// reads src, writes dst, and completes in stream order. No device-side waits.
#include <algorithm>
#include <cstdint>
#include <string>

#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/cast.hpp"

namespace tide::kernels {
namespace {

constexpr int kCastThreads = 512;

__device__ __forceinline__ std::uint32_t to_bf16(float f) {
  const std::uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;
  return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

__global__ void __launch_bounds__(kCastThreads)
    cast_kernel(std::uint16_t* dst, const float* src, std::int64_t n, std::int64_t head,
                std::int64_t nvec) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t nthreads = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = tid; i < head; i += nthreads)
    dst[i] = static_cast<std::uint16_t>(to_bf16(src[i]));
  for (std::int64_t i = head + 4 * nvec + tid; i < n; i += nthreads) {
    dst[i] = static_cast<std::uint16_t>(to_bf16(src[i]));
  }
  const auto* s4 = reinterpret_cast<const float4*>(src + head);
  auto* d2 = reinterpret_cast<uint2*>(dst + head);
  for (std::int64_t v = tid; v < nvec; v += 2 * nthreads) {
    const std::int64_t v2 = v + nthreads;
    const float4 a = __ldcs(s4 + v);
    float4 b = make_float4(0.f, 0.f, 0.f, 0.f);
    if (v2 < nvec) b = __ldcs(s4 + v2);
    d2[v] = make_uint2(to_bf16(a.x) | (to_bf16(a.y) << 16), to_bf16(a.z) | (to_bf16(a.w) << 16));
    if (v2 < nvec) {
      d2[v2] = make_uint2(to_bf16(b.x) | (to_bf16(b.y) << 16), to_bf16(b.z) | (to_bf16(b.w) << 16));
    }
  }
}

}  // namespace

void prepare_cast() {
  cudaFuncAttributes attributes{};  // needs the loaded function: loads it
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, cast_kernel));
}

void launch_cast_fp32_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n,
                              cudaStream_t stream, int ctas) {
  const std::string who = "launch_cast_fp32_to_bf16: ";
  if (n < 0) throw InvalidArgument(who + "n = " + std::to_string(n) + " is negative");
  if (ctas < 0 || ctas > kMaxCastCtas) {
    throw InvalidArgument(who + "ctas = " + std::to_string(ctas) + " is outside [0, 65535]");
  }
  if (n == 0) return;
  if (dst == nullptr || src == nullptr) throw InvalidArgument(who + "null pointer");
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  if (s % 4 != 0) throw InvalidArgument(who + "src is not 4-byte aligned");
  if (d % 2 != 0) throw InvalidArgument(who + "dst is not 2-byte aligned");
  std::int64_t head = n;
  std::int64_t nvec = 0;
  if ((s / 4) % 4 == (d / 2) % 4) {
    head = std::min<std::int64_t>(static_cast<std::int64_t>((4 - (s / 4) % 4) % 4), n);
    nvec = (n - head) / 4;
  }
  if (ctas == 0) {
    int device = 0;
    int sms = 0;
    TIDE_CUDA_CHECK(cudaGetDevice(&device));
    TIDE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    ctas = 4 * sms;
  }
  cast_kernel<<<ctas, kCastThreads, 0, stream>>>(dst, src, n, head, nvec);
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::kernels
