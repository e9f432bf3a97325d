// The ipc fabric (architecture: fabric/ipc): one process per rank on the GPUs of one host, peers'
// windows mapped through CUDA IPC. Ranks may share a GPU. Needs CUDA only (no NCCL).
// Contract (NOTE [ipc fabric] in docs/runtime.md): each rank's window is the runtime's (NOTE
// [runtime window]), mapped by every peer; ranks of different emulated hosts exchange messages
// through the windows' message areas instead. Construction is collective through the caller's
// IpcExchange (which bounds it); all ranks use one handle kind; where any rank cannot map a
// peer, every rank throws tide::Unsupported naming it. A mapping keeps the peer's memory alive,
// also after the peer dies; release() gives everything up unfreed.
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
  // The caller's ipc_allocate memory (>= ipc_window_bytes, freed after the fabric), or null.
  void* window = nullptr;
  // Emulated hosts: rank r's host (empty: one); several add a message area to the window.
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
  void release() noexcept override;
  // Message areas (NOTE [ipc rendezvous transport]): message_area_bytes() per rank, as this
  // process maps them; 0 and nullptr without hosts.
  std::byte* message_area(int owner) const;
  std::int64_t message_area_bytes() const { return message_bytes_; }

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
