// LSA peer tables through the NCCL 2.28 device API (NOTE [nccl fabric], step 4).
#include <nccl.h>
#include <nccl_device.h>

#include <memory>

#include "lsa_peers.hpp"
#include "tide/cuda/check.hpp"
#include "tide/version_gates.hpp"

#if !TIDE_HAS_NCCL_FABRIC
#error "the NCCL fabric needs NCCL >= 2.28 (TIDE_HAS_NCCL_FABRIC in tide/version_gates.hpp)"
#endif

namespace tide::fabric::detail {
namespace {

// One thread per LSA peer: the peer's window base as this GPU addresses it.
__global__ void lsa_pointer_table(ncclWindow_t window, int count, void** table) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < count) table[i] = ncclGetLsaPointer(window, 0, i);
}

}  // namespace

LsaPeers make_lsa_peers(ncclComm_t comm, ncclWindow_t window, void* own, cudaStream_t stream,
                        const NcclSettle& settle, const std::function<void()>& sync) {
  LsaPeers peers;
  int count = 0;
  settle(comm, ncclCommCount(comm, &count), "ncclCommCount");
  if (count == 1) {
    // A communicator of one rank (a rail of M = 1): NCCL gives it no symmetric support
    // (no peers, so not "all direct P2P"), and its only LSA peer is this rank's own window.
    peers.lsa_rank = 0;
    peers.lsa_size = 1;
    peers.host_table = {own};
    TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&peers.device_table), sizeof(void*)));
    TIDE_CUDA_CHECK(cudaMemcpy(peers.device_table, &own, sizeof(void*), cudaMemcpyHostToDevice));
    return peers;
  }
  auto dev = std::make_unique<ncclDevComm>();
  ncclDevCommRequirements reqs{};  // no barriers, no GIN, and never multimem
  reqs.lsaMultimem = false;
  settle(comm, ncclDevCommCreate(comm, &reqs, dev.get()), "ncclDevCommCreate");
  peers.lsa_rank = dev->lsaRank;
  peers.lsa_size = dev->lsaSize;
  peers.dev_comm = dev.release();
  try {
    const int n = peers.lsa_size;
    TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&peers.device_table),
                               sizeof(void*) * static_cast<std::size_t>(n)));
    const int threads = 32;
    lsa_pointer_table<<<(n + threads - 1) / threads, threads, 0, stream>>>(window, n,
                                                                           peers.device_table);
    TIDE_CUDA_CHECK_LAUNCH();
    sync();
    peers.host_table.resize(static_cast<std::size_t>(n));
    TIDE_CUDA_CHECK(cudaMemcpy(peers.host_table.data(), peers.device_table,
                               sizeof(void*) * static_cast<std::size_t>(n),
                               cudaMemcpyDeviceToHost));
  } catch (...) {
    destroy_lsa_peers(comm, peers);
    throw;
  }
  return peers;
}

void destroy_lsa_peers(ncclComm_t comm, LsaPeers& peers) noexcept {
  if (peers.dev_comm != nullptr) {
    auto* dev = static_cast<ncclDevComm*>(peers.dev_comm);
    (void)ncclDevCommDestroy(comm, dev);
    delete dev;
    peers.dev_comm = nullptr;
  }
  if (peers.device_table != nullptr) {
    (void)cudaFree(peers.device_table);
    peers.device_table = nullptr;
  }
  peers.host_table.clear();
}

}  // namespace tide::fabric::detail
