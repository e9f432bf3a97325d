// LSA peer tables of one communicator's symmetric window (NOTE [nccl fabric], step 4). The
// device API types stay in lsa_peers.cu: host units see only this plain interface.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>
#include <vector>

namespace tide::fabric::detail {

// Settles an NCCL call on a non-blocking communicator (bounded) and throws on failure.
using NcclSettle = std::function<void(ncclComm_t, ncclResult_t, const char* call)>;

struct LsaPeers {
  int lsa_rank = 0;
  int lsa_size = 0;
  void** device_table = nullptr;  // lsa_size pointers, cudaMalloc'ed
  std::vector<void*> host_table;  // the same, on the host
  void* dev_comm = nullptr;       // the ncclDevComm (owned; opaque to host units)
};

// Collective over `comm`: ncclDevCommCreate (nothing requested), then one kernel that calls
// ncclGetLsaPointer(window, 0, i) for every LSA peer i. `sync` waits (bounded) for `stream`.
// A communicator of one rank has no device communicator (NCCL gives it no symmetric
// support): its table is `own`, the window's base.
LsaPeers make_lsa_peers(ncclComm_t comm, ncclWindow_t window, void* own, cudaStream_t stream,
                        const NcclSettle& settle, const std::function<void()>& sync);
// ncclDevCommDestroy and cudaFree; never throws.
void destroy_lsa_peers(ncclComm_t comm, LsaPeers& peers) noexcept;

}  // namespace tide::fabric::detail
