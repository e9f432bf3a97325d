// NOTE [nccl window fabric]: the runtime's regions and signal words in the NCCL window.
#include "tide/fabric/nccl_window_fabric.hpp"

#include <string>
#include <utility>

#include "tide/core/error.hpp"
#include "tide/fabric/runtime_window.hpp"

namespace tide::fabric {

std::int64_t NcclWindowFabric::required_window_bytes(std::int64_t arena_bytes,
                                                     std::int64_t signal_words) {
  return window_bytes(arena_bytes, signal_words);
}

NcclWindowFabric::NcclWindowFabric(NcclFabric& nccl, std::int64_t arena_bytes,
                                   std::int64_t signal_words, std::vector<int> hosts)
    : nccl_(nccl),
      arena_bytes_(arena_bytes),
      signal_offset_(window_signal_offset(arena_bytes)),
      signal_words_(signal_words),
      hosts_(std::move(hosts)) {
  if (!hosts_.empty() && static_cast<int>(hosts_.size()) != nccl.world()) {
    throw InvalidArgument("NcclWindowFabric: " + std::to_string(hosts_.size()) +
                          " host indices for a world of " + std::to_string(nccl.world()));
  }
  if (!hosts_.empty() && nccl.message_comm(0) == nullptr) {
    throw InvalidArgument(
        "NcclWindowFabric: emulated hosts need the NCCL fabric's message lanes "
        "(NcclFabricOptions::message_lanes = 2)");
  }
  if (nccl.arena_bytes() < required_window_bytes(arena_bytes, signal_words)) {
    throw InvalidArgument("NcclWindowFabric: the window holds " +
                          std::to_string(nccl.arena_bytes()) + " bytes, the runtime needs " +
                          std::to_string(required_window_bytes(arena_bytes, signal_words)));
  }
  for (int r = 0; r < nccl.world(); ++r) {
    if (window(r) == nullptr) {
      throw Unsupported("rank " + std::to_string(r) + " is not load/store reachable from rank " +
                        std::to_string(nccl.rank()) +
                        " (another host): the runtime's nccl backend runs the ranks of one "
                        "host for now");
    }
  }
}

bool NcclWindowFabric::load_store(int from, int to) const {
  if (from == to) return true;
  if (!hosts_.empty()) {
    if (from < 0 || to < 0 || from >= ranks() || to >= ranks()) return false;
    if (hosts_[static_cast<std::size_t>(from)] != hosts_[static_cast<std::size_t>(to)])
      return false;
  }
  if (from != nccl_.rank()) return to == nccl_.rank() && nccl_.peer_arena(from) != nullptr;
  return nccl_.peer_arena(to) != nullptr;
}

std::byte* NcclWindowFabric::window(int rank) const {
  return static_cast<std::byte*>(rank == nccl_.rank() ? nccl_.arena() : nccl_.peer_arena(rank));
}

void* NcclWindowFabric::pointer(const program::Buffer& buffer) const {
  if (buffer.space != program::Space::kArena || buffer.index != 0) return nullptr;
  if (buffer.rank < 0 || buffer.rank >= ranks()) return nullptr;
  return window(buffer.rank);
}

std::int64_t NcclWindowFabric::bytes(const program::Buffer& buffer) const {
  return pointer(buffer) != nullptr ? arena_bytes_ : 0;
}

std::uint64_t* NcclWindowFabric::signals(int owner) const {
  if (owner < 0 || owner >= ranks()) return nullptr;
  std::byte* w = window(owner);
  return w == nullptr ? nullptr : reinterpret_cast<std::uint64_t*>(w + signal_offset_);
}

void NcclWindowFabric::send(const void* data, std::size_t bytes, int peer, cudaStream_t stream) {
  send_on_lane(data, bytes, peer, 0, stream);
}

void NcclWindowFabric::recv(void* data, std::size_t bytes, int peer, cudaStream_t stream) {
  recv_on_lane(data, bytes, peer, 0, stream);
}

// NOTE [nccl fabric] 2b: world ranks are the lane communicator's ranks (color 0, key rank).
void NcclWindowFabric::send_on_lane(const void* data, std::size_t bytes, int peer, int lane,
                                    cudaStream_t stream) {
  ncclComm_t comm = nccl_.message_comm(lane);
  if (comm == nullptr) {
    throw Unsupported("NcclWindowFabric: no message lane " + std::to_string(lane) +
                      " (the NCCL fabric was built without message_lanes)");
  }
  nccl_.settle(comm, ncclSend(data, bytes, ncclUint8, peer, comm, stream), "ncclSend (message)");
}

void NcclWindowFabric::recv_on_lane(void* data, std::size_t bytes, int peer, int lane,
                                    cudaStream_t stream) {
  ncclComm_t comm = nccl_.message_comm(lane);
  if (comm == nullptr) {
    throw Unsupported("NcclWindowFabric: no message lane " + std::to_string(lane) +
                      " (the NCCL fabric was built without message_lanes)");
  }
  nccl_.settle(comm, ncclRecv(data, bytes, ncclUint8, peer, comm, stream), "ncclRecv (message)");
}

}  // namespace tide::fabric
