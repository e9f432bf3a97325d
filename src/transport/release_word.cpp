// A rendezvous transport's release word: the contract is in tide/transport/release_word.hpp.
#include "tide/transport/release_word.hpp"

#include <cuda_runtime_api.h>

#include "tide/cuda/check.hpp"

namespace tide::transport {

ReleaseWord::ReleaseWord() {
  void* p = nullptr;
  TIDE_CUDA_CHECK(
      cudaHostAlloc(&p, sizeof(unsigned int), cudaHostAllocMapped | cudaHostAllocPortable));
  host_ = static_cast<unsigned int*>(p);
  *static_cast<volatile unsigned int*>(host_) = 0;
  void* d = nullptr;
  TIDE_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
  device_ = static_cast<unsigned int*>(d);
}

ReleaseWord::~ReleaseWord() {
  if (host_ != nullptr) (void)cudaFreeHost(host_);
}

void ReleaseWord::set() noexcept {
  __atomic_store_n(host_, 1u, __ATOMIC_SEQ_CST);
}

bool ReleaseWord::is_set() const noexcept {
  return __atomic_load_n(host_, __ATOMIC_SEQ_CST) != 0;
}

}  // namespace tide::transport
