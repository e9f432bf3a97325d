// Fresh random inputs made on the GPU (tests, benchmarks, calibration): no host upload, never
// zeros, never NaN or inf.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tide::kernels {

// n values in [-2, 2) with random low bits, from a counter-based hash of (i, seed): bf16 (the
// high half of the fp32 value) when item_bytes == 2, fp32 when 4; when 1, byte codes 1..255
// (fp8 or u8 items, NOTE [1-byte all-gather items]). Enqueued on `stream`.
void launch_fill_random(void* p, std::int64_t n, int item_bytes, std::uint64_t seed,
                        cudaStream_t stream);

}  // namespace tide::kernels
