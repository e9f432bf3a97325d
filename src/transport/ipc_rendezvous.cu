// The ipc rendezvous transport's kernels: NOTE [ipc rendezvous transport] in
// docs/runtime.md (steps and synchronisation there; the contract in
// tide/transport/ipc_rendezvous.hpp).
#include <cstdio>
#include <string>

#include "rendezvous_wait.cuh"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/fabric/runtime_window.hpp"
#include "tide/transport/ipc_rendezvous.hpp"

namespace tide::transport {
namespace {

constexpr const char* kName = "ipc rendezvous transport";
constexpr unsigned int kThreads = 512;
constexpr auto kBounce = static_cast<unsigned long long>(fabric::kMessageBounceBytes);

using Word = unsigned long long;

__device__ volatile Word* word_at(std::byte* channel, std::size_t offset) {
  return reinterpret_cast<volatile Word*>(channel + offset);
}

__device__ unsigned long long chunks_of(unsigned long long bytes) {
  return bytes == 0 ? 1 : (bytes + kBounce - 1) / kBounce;
}

// The block copies `bytes` from `src` to `dst`; with `from_peer`, reads at L2 (the bounce a
// peer rewrites between chunks). 16 bytes at a time where both sides allow it.
__device__ void block_copy(void* dst, const void* src, unsigned long long bytes, bool from_peer) {
  if (((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src) |
        bytes) &
       15ull) == 0) {
    const auto* s = static_cast<const uint4*>(src);
    auto* d = static_cast<uint4*>(dst);
    for (unsigned long long i = threadIdx.x; i < bytes / 16; i += blockDim.x)
      d[i] = from_peer ? __ldcg(s + i) : s[i];
    return;
  }
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (unsigned long long i = threadIdx.x; i < bytes; i += blockDim.x)
    d[i] =
        from_peer ? static_cast<unsigned char>(__ldcg(reinterpret_cast<const char*>(s + i))) : s[i];
}

// One chunk of a message, either side (recv step 2, send step 2): thread 0 waits until the
// partner's word `ready` reaches `ready_at` (the chunk is filled / the bounce is free); the
// block copies `n` bytes from `src` to `dst` (reading at L2 where `from_peer`); thread 0 runs
// __threadfence_system() and stores `mine` = `mine_at` (drained / filled). False, with nothing
// moved, where the transport was released. `go` is the block's shared flag.
__device__ bool move_chunk(std::byte* channel, std::size_t ready, Word ready_at, std::size_t mine,
                           Word mine_at, void* dst, const void* src, unsigned long long n,
                           bool from_peer, const char* what, Word message, int from, int to,
                           const unsigned int* release, unsigned long long timeout_ns, int& go) {
  if (threadIdx.x == 0) {
    go = rendezvous_wait(const_cast<const Word*>(word_at(channel, ready)), ready_at, release,
                         timeout_ns, kName, what, message, from, to)
             ? 1
             : 0;
  }
  __syncthreads();
  if (go == 0) return false;
  if (n > 0) block_copy(dst, src, n, from_peer);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    *word_at(channel, mine) = mine_at;
  }
  return true;
}

// recv step 1.
__global__ void ipc_post_kernel(std::byte* channel, unsigned long long bytes,
                                const unsigned int* release) {
  if (rendezvous_released(release)) return;
  volatile Word* posted = word_at(channel, kChannelPosted);
  const Word k = *posted + 1;
  *word_at(channel, kChannelBytes) = bytes;
  __threadfence_system();
  *posted = k;
}

// recv step 2.
__global__ void ipc_drain_kernel(std::byte* channel, void* dst, unsigned long long bytes, int from,
                                 int to, const unsigned int* release,
                                 unsigned long long timeout_ns) {
  __shared__ int go;
  __shared__ Word base;
  if (threadIdx.x == 0) base = *word_at(channel, kChannelDrained);
  __syncthreads();
  const unsigned long long chunks = chunks_of(bytes);
  const std::byte* bounce = channel + fabric::kWindowPage;
  for (unsigned long long i = 0; i < chunks; ++i) {
    const unsigned long long at = i * kBounce;
    const unsigned long long n = bytes - at < kBounce ? bytes - at : kBounce;
    if (!move_chunk(channel, kChannelFilled, base + i + 1, kChannelDrained, base + i + 1,
                    static_cast<std::byte*>(dst) + at, bounce, n, true, "the send's filled",
                    *word_at(channel, kChannelPosted), from, to, release, timeout_ns, go))
      return;
  }
}

// send steps 1-3.
__global__ void ipc_send_kernel(std::byte* channel, const void* src, unsigned long long bytes,
                                int from, int to, const unsigned int* release,
                                unsigned long long timeout_ns) {
  __shared__ int go;
  __shared__ Word base;
  __shared__ Word k;
  if (threadIdx.x == 0) {
    k = *word_at(channel, kChannelSent) + 1;
    base = *word_at(channel, kChannelFilled);
    go = !rendezvous_released(release) &&
                 rendezvous_wait(const_cast<const Word*>(word_at(channel, kChannelPosted)), k,
                                 release, timeout_ns, kName, "the receive's posted", k, from, to)
             ? 1
             : 0;
    if (go != 0) {
      const Word want = *word_at(channel, kChannelBytes);
      if (want != bytes) {
        printf(
            "TIDE %s: message %llu from rank %d to rank %d: the send has %llu bytes, the "
            "receive posted %llu (mismatched order)\n",
            kName, k, from, to, bytes, want);
        __trap();
      }
    }
  }
  __syncthreads();
  if (go == 0) return;
  const unsigned long long chunks = chunks_of(bytes);
  std::byte* bounce = channel + fabric::kWindowPage;
  for (unsigned long long i = 0; i < chunks; ++i) {
    const unsigned long long at = i * kBounce;
    const unsigned long long n = bytes - at < kBounce ? bytes - at : kBounce;
    if (!move_chunk(channel, kChannelDrained, base + i, kChannelFilled, base + i + 1, bounce,
                    static_cast<const std::byte*>(src) + at, n, false, "the receive's drained", k,
                    from, to, release, timeout_ns, go))
      return;
  }
  if (threadIdx.x == 0) *word_at(channel, kChannelSent) = k;
}

}  // namespace

IpcRendezvousTransport::IpcRendezvousTransport(const fabric::IpcFabric& fabric, int channels,
                                               std::uint64_t timeout_ns)
    : fabric_(fabric), channels_(channels), timeout_ns_(timeout_ns) {
  if (channels < 0 || channels >= fabric::kMessageChannelSets) {
    throw InvalidArgument("IpcRendezvousTransport: channel set " + std::to_string(channels) +
                          " outside 0.." + std::to_string(fabric::kMessageChannelSets - 1));
  }
  const std::int64_t need = fabric::message_area_bytes(fabric.ranks());
  if (fabric.message_area_bytes() < need) {
    throw InvalidArgument("IpcRendezvousTransport: the fabric's message areas hold " +
                          std::to_string(fabric.message_area_bytes()) + " bytes, " +
                          std::to_string(fabric.ranks()) + " ranks need " + std::to_string(need) +
                          " (give the ipc fabric its hosts)");
  }
  for (int r = 0; r < fabric.ranks(); ++r) {
    if (fabric.message_area(r) == nullptr) {
      throw InvalidArgument("IpcRendezvousTransport: rank " + std::to_string(r) +
                            "'s message area is not mapped in this process");
    }
  }
}

std::byte* IpcRendezvousTransport::channel(int from, int to) const {
  const int ranks = fabric_.ranks();
  if (from < 0 || from >= ranks || to < 0 || to >= ranks) {
    throw InvalidArgument("IpcRendezvousTransport: pair " + std::to_string(from) + " -> " +
                          std::to_string(to) + " outside " + std::to_string(ranks) + " ranks");
  }
  return fabric_.message_area(to) +
         (static_cast<std::int64_t>(channels_) * ranks + from) * fabric::kMessageChannelBytes;
}

void IpcRendezvousTransport::send(int from, int to, const void* data, std::size_t bytes,
                                  cudaStream_t stream) {
  ipc_send_kernel<<<1, kThreads, 0, stream>>>(channel(from, to), data, bytes, from, to,
                                              release_.device(), timeout_ns_);
  TIDE_CUDA_CHECK(cudaGetLastError());
}

void IpcRendezvousTransport::recv(int to, int from, void* data, std::size_t bytes,
                                  cudaStream_t stream) {
  std::byte* c = channel(from, to);
  ipc_post_kernel<<<1, 1, 0, stream>>>(c, bytes, release_.device());
  TIDE_CUDA_CHECK(cudaGetLastError());
  ipc_drain_kernel<<<1, kThreads, 0, stream>>>(c, data, bytes, from, to, release_.device(),
                                               timeout_ns_);
  TIDE_CUDA_CHECK(cudaGetLastError());
}

MessageTransports ipc_transports(const fabric::IpcFabric& fabric, int lane) {
  MessageTransports t;
  if (fabric.message_area_bytes() > 0) {
    t.two_sided = std::make_shared<IpcRendezvousTransport>(fabric, lane);
    t.no_one_sided = "its messages travel through a rendezvous transport";
  }
  return t;
}

void IpcRendezvousTransport::prepare() {
  cudaFuncAttributes a{};
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&a, ipc_post_kernel));
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&a, ipc_drain_kernel));
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&a, ipc_send_kernel));
}

}  // namespace tide::transport
