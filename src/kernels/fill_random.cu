// Random inputs on the GPU (include/tide/kernels/fill_random.hpp).
//
// Steps: each thread writes elements i, i + stride, ...: 24 random bits of a hash of
// (i, seed) scaled to [-2, 2), stored as bf16 (the high half of the fp32) or fp32. No
// synchronisation: every element is written by one thread.
#include "tide/cuda/check.hpp"
#include "tide/kernels/fill_random.hpp"

namespace tide::kernels {
namespace {

__device__ std::uint32_t mix32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

__global__ void fill_random_kernel(void* p, std::int64_t n, int item_bytes, std::uint64_t seed) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const std::uint32_t h = mix32(static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull + seed);
    const float f = static_cast<float>(h >> 8) * (4.0f / 16777216.0f) - 2.0f;
    if (item_bytes == 1) {
      static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(1 + h % 255);
    } else if (item_bytes == 2) {
      static_cast<std::uint16_t*>(p)[i] = static_cast<std::uint16_t>(__float_as_uint(f) >> 16);
    } else {
      static_cast<float*>(p)[i] = f;
    }
  }
}

}  // namespace

void launch_fill_random(void* p, std::int64_t n, int item_bytes, std::uint64_t seed,
                        cudaStream_t stream) {
  if (n == 0) return;
  fill_random_kernel<<<1024, 256, 0, stream>>>(p, n, item_bytes, seed);
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::kernels
