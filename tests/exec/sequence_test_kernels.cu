// The caller's compute kernel of the sequence runner tests: a byte copy on the caller stream,
// standing in for the training step's kernels that write gradients and read outputs.
#include "sequence_test_kernels.hpp"
#include "tide/cuda/check.hpp"

namespace tide::exec::testing {
namespace {

__global__ void copy_bytes_kernel(unsigned char* dst, const unsigned char* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

}  // namespace

void launch_compute_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  copy_bytes_kernel<<<8, 256, 0, stream>>>(static_cast<unsigned char*>(dst),
                                           static_cast<const unsigned char*>(src), bytes);
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::exec::testing
