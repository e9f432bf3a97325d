// Stock FSDP2's layout work, as TIDE-nccl's stand-in and cross-check (not PyTorch's kernels;
// bench/nccl/fsdp2_nccl_baseline.py measures those): FSDP2 feeds NCCL flat rank-major
// buffers, so it packs per-parameter gradients into fp32 chunks before the reduce-scatter
// (torch._chunk_cat) and copies all-gathered shards out per parameter after the all-gather
// (split_with_sizes_copy).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tide/core/dtype.hpp"

namespace tide::nccl_cli {

// _chunk_cat of one parameter: rank u's chunk of a (rows x cols) gradient, rows [u R, u R + R)
// (rows past `rows` are zero padding), converted to fp32 at dst + u * dst_stride + offset.
struct PackParam {
  const void* grad = nullptr;      // rows x cols elements of `dtype`
  std::int64_t rows = 0;           // D_p
  std::int64_t cols = 0;           // K_p
  std::int64_t rows_per_rank = 0;  // R_p
  std::int64_t offset = 0;         // e_p: elements into each rank's chunk
};
void launch_pack_fp32(const PackParam& p, DType dtype, int world, float* dst,
                      std::int64_t dst_stride, cudaStream_t stream);

// dst[i] *= alpha for i < n.
void launch_scale(float* dst, std::int64_t n, float alpha, cudaStream_t stream);

}  // namespace tide::nccl_cli
