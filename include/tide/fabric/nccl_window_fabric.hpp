// A runtime's arena on the NCCL fabric (NOTE [nccl window fabric]). Built only with NCCL.
#pragma once

#include <cstdint>

#include "tide/fabric/fabric.hpp"
#include "tide/fabric/nccl_fabric.hpp"

namespace tide::fabric {

// NOTE [nccl window fabric]
// The runtime's window (NOTE [runtime window]) is one symmetric NCCL window per rank. Arenas and
// words of LSA-reachable ranks are addressed through their LSA pointers; tensors and outputs are
// not the fabric's (the caller binds them per call), so pointer() answers only arenas. Ranks that
// are not load/store reachable (another host) are not supported by the runtime yet.
class NcclWindowFabric final : public Fabric {
 public:
  static std::int64_t required_window_bytes(std::int64_t arena_bytes, std::int64_t signal_words);

  NcclWindowFabric(NcclFabric& nccl, std::int64_t arena_bytes, std::int64_t signal_words);

  int ranks() const override { return nccl_.world(); }
  bool local(int rank) const override { return rank == nccl_.rank(); }
  int device() const override { return nccl_.device(); }
  void* pointer(const program::Buffer& buffer) const override;
  std::int64_t bytes(const program::Buffer& buffer) const override;
  std::uint64_t* signals(int owner) const override;
  std::int64_t signal_words() const override { return signal_words_; }
  bool load_store(int from, int to) const override;
  void release() noexcept override { nccl_.release(); }

 private:
  std::byte* window(int rank) const;
  NcclFabric& nccl_;
  std::int64_t arena_bytes_ = 0;
  std::int64_t signal_offset_ = 0;
  std::int64_t signal_words_ = 0;
};

}  // namespace tide::fabric
