// The rendezvous transport's kernels and channels: NOTE [rendezvous transport] in
// tide/testing/rendezvous_transport.hpp.
#include <cstdio>
#include <string>

#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/testing/rendezvous_transport.hpp"
#include "transport/rendezvous_wait.cuh"

namespace tide::testing {

using transport::rendezvous_released;
using transport::rendezvous_wait;

struct RendezvousTransport::Channel {
  unsigned long long posted;
  unsigned long long done;
  void* dst;
  unsigned long long bytes;
};

namespace {

using Channel = RendezvousTransport::Channel;

constexpr const char* kName = "rendezvous transport";

// The message numbers (NOTE [rendezvous transport], Numbering): each side reads its own
// count, a word only its own stream writes, so every kernel of one message sees the same number.
__device__ unsigned long long next_send(const Channel* c) {
  return static_cast<const volatile Channel*>(c)->done + 1;
}

// Step 2 of recv (`send_side` 0: done >= k, k the number step 1 posted) and step 1 of send
// (`send_side` 1: posted >= k, k the send's number): lane 0 waits (bounded, releasable).
__global__ void rendezvous_wait_kernel(const Channel* c, int send_side, int from, int to,
                                       const unsigned int* release, unsigned long long timeout_ns) {
  if (threadIdx.x != 0) return;
  const auto* v = static_cast<const volatile Channel*>(c);
  const unsigned long long k = send_side != 0 ? next_send(c) : v->posted;
  const volatile unsigned long long* word = send_side != 0 ? &v->posted : &v->done;
  (void)rendezvous_wait(const_cast<const unsigned long long*>(word), k, release, timeout_ns, kName,
                        send_side != 0 ? "the receive's posted" : "the send's done", k, from, to);
}

// recv step 1: k = posted + 1.
__global__ void rendezvous_post_kernel(Channel* c, void* dst, unsigned long long bytes,
                                       const unsigned int* release) {
  if (rendezvous_released(release)) return;
  auto* v = static_cast<volatile Channel*>(c);
  const unsigned long long k = v->posted + 1;
  v->dst = dst;
  v->bytes = bytes;
  __threadfence_system();
  v->posted = k;
}

// send step 2: every block reads the posted destination, checks the byte count, copies its
// share (16 bytes at a time where both sides allow it).
__global__ void rendezvous_copy_kernel(const Channel* c, const void* src, unsigned long long bytes,
                                       int from, int to, const unsigned int* release) {
  if (rendezvous_released(release)) return;  // the wait before it may have been released
  const auto* v = static_cast<const volatile Channel*>(c);
  void* const dst = v->dst;
  const unsigned long long want = v->bytes;
  if (want != bytes) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      printf(
          "TIDE rendezvous transport: message %llu from rank %d to rank %d: the send has %llu "
          "bytes, the receive posted %llu (mismatched order)\n",
          next_send(c), from, to, bytes, want);
    }
    __trap();
  }
  const unsigned long long tid =
      static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  if (((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src) |
        bytes) &
       15ull) == 0) {
    const auto* s = static_cast<const uint4*>(src);
    auto* d = static_cast<uint4*>(dst);
    for (unsigned long long i = tid; i < bytes / 16; i += stride)
      d[i] = s[i];
    return;
  }
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (unsigned long long i = tid; i < bytes; i += stride)
    d[i] = s[i];
}

// send step 3: done = k.
__global__ void rendezvous_done_kernel(Channel* c, const unsigned int* release) {
  if (rendezvous_released(release)) return;
  const unsigned long long k = next_send(c);
  __threadfence_system();
  static_cast<volatile Channel*>(c)->done = k;
}

}  // namespace

RendezvousTransport::RendezvousTransport(int ranks, int device, std::uint64_t timeout_ns)
    : ranks_(ranks), timeout_ns_(timeout_ns) {
  if (ranks < 1) throw InvalidArgument("RendezvousTransport: needs at least one rank");
  const auto pairs = static_cast<std::size_t>(ranks) * static_cast<std::size_t>(ranks);
  int current = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&current));
  TIDE_CUDA_CHECK(cudaSetDevice(device));
  TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&channels_), pairs * sizeof(Channel)));
  // Synchronous on purpose: the channels are zero before any stream can use them.
  TIDE_CUDA_CHECK(cudaMemset(channels_, 0, pairs * sizeof(Channel)));
  TIDE_CUDA_CHECK(cudaSetDevice(current));
}

RendezvousTransport::~RendezvousTransport() {
  if (channels_ != nullptr) (void)cudaFree(channels_);
}

RendezvousTransport::Channel* RendezvousTransport::channel(int from, int to) const {
  if (from < 0 || from >= ranks_ || to < 0 || to >= ranks_) {
    throw InvalidArgument("RendezvousTransport: pair " + std::to_string(from) + " -> " +
                          std::to_string(to) + " outside " + std::to_string(ranks_) + " ranks");
  }
  return channels_ + static_cast<std::size_t>(from) * static_cast<std::size_t>(ranks_) +
         static_cast<std::size_t>(to);
}

void RendezvousTransport::send(int from, int to, const void* data, std::size_t bytes,
                               cudaStream_t stream) {
  Channel* c = channel(from, to);
  rendezvous_wait_kernel<<<1, 32, 0, stream>>>(c, 1, from, to, release_.device(), timeout_ns_);
  TIDE_CUDA_CHECK(cudaGetLastError());
  const unsigned long long chunks = (bytes + 4095) / 4096;
  const unsigned int blocks =
      static_cast<unsigned int>(chunks < 1 ? 1 : (chunks > 64 ? 64 : chunks));
  rendezvous_copy_kernel<<<blocks, 256, 0, stream>>>(c, data, bytes, from, to, release_.device());
  TIDE_CUDA_CHECK(cudaGetLastError());
  rendezvous_done_kernel<<<1, 1, 0, stream>>>(c, release_.device());
  TIDE_CUDA_CHECK(cudaGetLastError());
  ++messages_;
}

void RendezvousTransport::recv(int to, int from, void* data, std::size_t bytes,
                               cudaStream_t stream) {
  Channel* c = channel(from, to);
  rendezvous_post_kernel<<<1, 1, 0, stream>>>(c, data, bytes, release_.device());
  TIDE_CUDA_CHECK(cudaGetLastError());
  rendezvous_wait_kernel<<<1, 32, 0, stream>>>(c, 0, from, to, release_.device(), timeout_ns_);
  TIDE_CUDA_CHECK(cudaGetLastError());
}

void RendezvousTransport::prepare() {
  cudaFuncAttributes a{};
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&a, rendezvous_wait_kernel));
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&a, rendezvous_post_kernel));
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&a, rendezvous_copy_kernel));
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&a, rendezvous_done_kernel));
}

}  // namespace tide::testing
