// The ipc fabric (architecture: fabric/ipc): one process per rank on the GPUs of one host, peers'
// windows mapped through CUDA IPC. Ranks may share a GPU. Needs CUDA only (no NCCL).
//
// NOTE [ipc fabric]
// What it is: the runtime's window (NOTE [runtime window]) of each rank in memory the other
// processes of the host map, as PyTorch's CUDA symmetric memory and DeepEP's intranode buffers
// share theirs. Every peer is addressable (load_store is true for every pair), so the sequence
// runner runs over it unchanged, rail puts between emulated nodes included (M x L splits on one
// host), and it needs no NCCL windows (so NCCL older than 2.28, or none).
// Handles (ipc_memory.hpp, chosen per process by choose_ipc_handles):
//   - fd, the default where it works: the window is a cuMemCreate allocation with a POSIX file
//     descriptor handle. A peer takes the exporter's descriptor with pidfd_getfd, imports it
//     (cuMemImportFromShareableHandle), maps it into its own address range and gives its device
//     access. Why first: VMM allocations are what torch's symmetric memory and the virtual
//     fabric use; their granularity is the device's (2 MiB), the mapping is explicit (no
//     implicit peer-access enabling for the whole context), and nothing goes through the
//     legacy cudaIpc path, which needs cudaMalloc memory and opens a whole allocation.
//   - cuda-ipc, where the device has no POSIX fd handles, the kernel no pidfd_getfd, or the
//     host's ptrace policy (Yama) forbids peers to take descriptors: cudaMalloc,
//     cudaIpcGetMemHandle, cudaIpcOpenMemHandle(cudaIpcMemLazyEnablePeerAccess). The probe of
//     ../shared/probes/ipc_pingpong.cu showed it works between processes of one GPU.
//   All ranks must choose the same kind; they agree through the exchange, and disagree loudly.
// Construction (collective; every step is an exchange of one string per rank through the
// caller's bootstrap store, bounded by the store's timeout):
//   1. The window: the caller's (IpcFabricOptions::window, memory from ipc_allocate, e.g. a
//      torch.cuda.MemPool tensor over tide_ipc_mem_alloc) or the fabric's own ipc_allocate.
//   2. "handles": each rank publishes its kind, its allocation's size, the window's offset in
//      it, and the handle (pid and descriptor, or the cudaIpc handle's bytes).
//   3. "mapped": each rank maps every peer's window and publishes "ok" or its error; where any
//      rank failed, every rank throws tide::Unsupported naming it. Only then do the exporters
//      close their exported descriptors (a peer still taking one would fail otherwise).
// Liveness: a mapping keeps the peer's memory alive until it is unmapped, also after the peer's
// process dies; the driver frees everything of a process that ends, so nothing is left behind
// a job (the device script checks the GPU's free memory). Teardown: peers' mappings, then the
// own window where the fabric allocated it. release() gives everything up without freeing it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/fabric/ipc_memory.hpp"

namespace tide::fabric {

// One value per rank, in rank order: every rank's `mine` for the step named `step` (collective;
// the caller bounds it and throws on a timeout).
using IpcExchange =
    std::function<std::vector<std::string>(const std::string& step, const std::string& mine)>;

struct IpcFabricOptions {
  int device = -1;               // the CUDA device; -1: the current one
  std::int64_t arena_bytes = 0;  // the runtime's regions (> 0)
  std::int64_t signal_words = 1;
  // The caller's window: memory from ipc_allocate of at least ipc_window_bytes(options,
  // world), owned and freed by the caller after the fabric; nullptr: the fabric's own.
  void* window = nullptr;
  // Emulated hosts: rank r's host index (empty: one host). Where ranks of several hosts are
  // given, the window ends in a message area (window_bytes() grows by message_area_bytes).
  std::vector<int> hosts;
};

// The bytes a rank's window takes with these options (the arena, the signal words and, over
// emulated hosts, the message area).
std::int64_t ipc_window_bytes(const IpcFabricOptions& options, int world);

class IpcFabric final : public Fabric {
 public:
  // Validates the arguments (tide::InvalidArgument) before any exchange; then builds the fabric
  // (tide::CudaError, tide::Unsupported where a peer cannot be mapped).
  IpcFabric(int rank, int world, const IpcFabricOptions& options, const IpcExchange& exchange);
  ~IpcFabric() override;
  IpcFabric(const IpcFabric&) = delete;
  IpcFabric& operator=(const IpcFabric&) = delete;

  int ranks() const override { return world_; }
  bool local(int rank) const override { return rank == rank_; }
  int device() const override { return device_; }
  void* pointer(const program::Buffer& buffer) const override;
  std::int64_t bytes(const program::Buffer& buffer) const override;
  std::uint64_t* signals(int owner) const override;
  std::int64_t signal_words() const override { return signal_words_; }
  bool load_store(int from, int to) const override;
  std::byte* message_area(int owner) const override;
  std::int64_t message_area_bytes() const override { return message_bytes_; }
  void release() noexcept override;

  std::byte* window() const { return windows_[static_cast<std::size_t>(rank_)]; }
  std::int64_t window_bytes() const;
  IpcHandles handles() const { return handles_; }

 private:
  struct Mapping {
    std::byte* base = nullptr;  // the peer's allocation as this process maps it
    std::int64_t bytes = 0;
    IpcHandles handles = IpcHandles::kCudaIpc;
  };
  Mapping map_peer(const std::string& published) const;
  void unmap(const Mapping& m) const;

  int rank_ = 0;
  int world_ = 1;
  int device_ = 0;
  std::int64_t arena_bytes_ = 0;
  std::int64_t signal_words_ = 0;
  std::vector<int> hosts_;          // by rank; empty: one host
  std::int64_t message_bytes_ = 0;  // per rank's window; 0: no message area
  IpcHandles handles_ = IpcHandles::kCudaIpc;
  void* owned_ = nullptr;            // the window's allocation when the fabric made it
  std::vector<std::byte*> windows_;  // by rank, as this process addresses them
  std::vector<Mapping> mappings_;    // peers' allocations mapped here
};

}  // namespace tide::fabric
