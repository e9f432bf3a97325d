// The peer abort check and abort token (see the header of the same name).
#include "tide/cuda/check.hpp"
#include "tide/kernels/signal/abort_check.hpp"

namespace tide::kernels {
namespace {

__global__ void abort_check_kernel(AbortCheck check) {
  // Steps: 1. every lane reads its share of the watched words (peers' abort words, through
  // peer mappings) after a system-scope fence, so that the reads follow every read of the
  // call's data on this stream; a word found 0 means that rank's releases (and so every copy
  // it makes on a released wait, which runs after the word is written) come after those
  // reads. 2. If any was set: spin until every own word is set, with a backoff. 3. A
  // system-scope fence before the caller's later work.
  __threadfence_system();
  bool set = false;
  for (int i = static_cast<int>(threadIdx.x); i < check.watched_count; i += 32)
    set = set || *static_cast<const volatile unsigned long long*>(
                     static_cast<const void*>(check.watched[i])) != 0;
  if (__any_sync(0xffffffffu, set) && threadIdx.x == 0) {
    unsigned backoff = 256;
    for (int i = 0; i < check.own_count; ++i) {
      const auto* own =
          static_cast<const volatile unsigned long long*>(static_cast<const void*>(check.own[i]));
      while (*own == 0) {
        __nanosleep(backoff);
        backoff = backoff < 8192 ? backoff * 2 : 8192;
      }
    }
  }
  __syncwarp();
  __threadfence_system();
}

__global__ void abort_token_kernel(AbortCheck verdict, unsigned long long* token,
                                   unsigned long long base) {
  // Steps (NOTE [abort relay]): 1. a system-scope fence, so that the reads follow every op
  // before this kernel on its stream (the message's sends: their source bytes were read);
  // 2. one read of each word; 3. the verdict into the token, which the next send carries.
  __threadfence_system();
  unsigned long long set = 0;
  for (int i = 0; i < verdict.watched_count; ++i)
    set |= *static_cast<const volatile unsigned long long*>(
        static_cast<const void*>(verdict.watched[i]));
  for (int i = 0; i < verdict.own_count; ++i)
    set |=
        *static_cast<const volatile unsigned long long*>(static_cast<const void*>(verdict.own[i]));
  *token = base | (set != 0 ? 1ull : 0ull);
}

}  // namespace

void launch_abort_token(const AbortCheck& verdict, std::uint64_t* token, cudaStream_t stream,
                        std::uint64_t base) {
  abort_token_kernel<<<1, 1, 0, stream>>>(verdict, reinterpret_cast<unsigned long long*>(token),
                                          static_cast<unsigned long long>(base));
  TIDE_CUDA_CHECK_LAUNCH();
}

void launch_abort_check(const AbortCheck& check, cudaStream_t stream) {
  abort_check_kernel<<<1, 32, 0, stream>>>(check);
  TIDE_CUDA_CHECK_LAUNCH();
}

void prepare_abort_check() {
  cudaFuncAttributes attributes{};  // needs the loaded function: loads it
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, abort_check_kernel));
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, abort_token_kernel));
}

}  // namespace tide::kernels
