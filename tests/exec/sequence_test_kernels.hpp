// The caller's compute kernel of the sequence runner tests (sequence_test_kernels.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace tide::exec::testing {

// dst[i] = src[i] for i < bytes, by a kernel on `stream`.
void launch_compute_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

// Holds `stream` with a 1-thread kernel until the 8-byte word at `word` (mapped host memory
// the host writes, e.g. a sequence_testing::Gate's) is nonzero, or about `seconds` passed.
void launch_hold(const void* word, double seconds, cudaStream_t stream);

}  // namespace tide::exec::testing
