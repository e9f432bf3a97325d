// NOTE [nccl window fabric]: the runtime's regions and signal words in the NCCL window.
#include "tide/fabric/nccl_window_fabric.hpp"

#include "tide/core/error.hpp"
#include "tide/fabric/runtime_window.hpp"

namespace tide::fabric {

std::int64_t NcclWindowFabric::required_window_bytes(std::int64_t arena_bytes,
                                                     std::int64_t signal_words) {
  return window_bytes(arena_bytes, signal_words);
}

NcclWindowFabric::NcclWindowFabric(NcclFabric& nccl, std::int64_t arena_bytes,
                                   std::int64_t signal_words)
    : nccl_(nccl),
      arena_bytes_(arena_bytes),
      signal_offset_(window_signal_offset(arena_bytes)),
      signal_words_(signal_words) {
  if (nccl.arena_bytes() < required_window_bytes(arena_bytes, signal_words)) {
    throw InvalidArgument("NcclWindowFabric: the window holds " +
                          std::to_string(nccl.arena_bytes()) + " bytes, the runtime needs " +
                          std::to_string(required_window_bytes(arena_bytes, signal_words)));
  }
  for (int r = 0; r < nccl.world(); ++r) {
    if (!load_store(nccl.rank(), r)) {
      throw Unsupported("rank " + std::to_string(r) + " is not load/store reachable from rank " +
                        std::to_string(nccl.rank()) +
                        " (another host): the runtime's nccl backend runs the ranks of one "
                        "host for now");
    }
  }
}

bool NcclWindowFabric::load_store(int from, int to) const {
  if (from == to) return true;
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

}  // namespace tide::fabric
