// The caller's compute kernel of the sequence runner tests: a byte copy on the caller stream,
// standing in for the training step's kernels that write gradients and read outputs; and a
// kernel that holds a stream until a gate word opens (other work running on the device).
#include "sequence_test_kernels.hpp"
#include "tide/cuda/check.hpp"

namespace tide::exec::testing {
namespace {

__global__ void copy_bytes_kernel(unsigned char* dst, const unsigned char* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// Spins until *word != 0 or `ns` nanoseconds have passed (a bound: a test that never opens
// its gate must not hang the device).
__device__ unsigned long long global_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_kernel(const volatile unsigned long long* word, unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (*word == 0 && global_ns() - start < ns)
    __nanosleep(1000);
}

}  // namespace

void launch_hold(const void* word, double seconds, cudaStream_t stream) {
  hold_kernel<<<1, 1, 0, stream>>>(static_cast<const volatile unsigned long long*>(word),
                                   static_cast<unsigned long long>(seconds * 1e9));
  TIDE_CUDA_CHECK_LAUNCH();
}

void launch_compute_copy(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  copy_bytes_kernel<<<8, 256, 0, stream>>>(static_cast<unsigned char*>(dst),
                                           static_cast<const unsigned char*>(src), bytes);
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::exec::testing
