// Stock FSDP2's layout work (baseline.hpp): one grid-stride kernel per parameter.
#include "baseline.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

namespace tide::nccl_cli {
namespace {

__device__ float load_as_fp32(const void* p, std::int64_t i, bool bf16) {
  if (bf16) {
    const unsigned bits = static_cast<const unsigned short*>(p)[i];
    return __uint_as_float(bits << 16);
  }
  return static_cast<const float*>(p)[i];
}

__global__ void pack_fp32(PackParam p, bool bf16, int world, float* dst, std::int64_t stride) {
  const std::int64_t chunk = p.rows_per_rank * p.cols;
  const std::int64_t valid = p.rows * p.cols;
  const std::int64_t total = chunk * world;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t u = i / chunk;
    const std::int64_t j = i - u * chunk;
    const std::int64_t src = u * chunk + j;
    dst[u * stride + p.offset + j] = src < valid ? load_as_fp32(p.grad, src, bf16) : 0.0f;
  }
}

__global__ void scale(float* dst, std::int64_t n, float alpha) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dst[i] *= alpha;
}

int blocks_for(std::int64_t n) {
  return static_cast<int>(std::min<std::int64_t>((n + 255) / 256, 132 * 8));
}

}  // namespace

void launch_pack_fp32(const PackParam& p, DType dtype, int world, float* dst,
                      std::int64_t dst_stride, cudaStream_t stream) {
  const std::int64_t n = p.rows_per_rank * p.cols * world;
  if (n == 0) return;
  if (!is_reduction_dtype(dtype)) {  // NOTE [1-byte all-gather items]
    throw InvalidArgument("_chunk_cat packs bf16 or fp32 gradients, not " +
                          std::string(dtype_name(dtype)));
  }
  pack_fp32<<<blocks_for(n), 256, 0, stream>>>(p, dtype == DType::kBf16, world, dst, dst_stride);
  TIDE_CUDA_CHECK_LAUNCH();
}

void launch_scale(float* dst, std::int64_t n, float alpha, cudaStream_t stream) {
  if (n == 0) return;
  scale<<<blocks_for(n), 256, 0, stream>>>(dst, n, alpha);
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::nccl_cli
