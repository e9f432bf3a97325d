// A runtime's arena on the NCCL fabric (NOTE [nccl window fabric]). Built only with NCCL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/fabric/nccl_fabric.hpp"

namespace tide::fabric {

// NOTE [nccl window fabric]
// The runtime's window (NOTE [runtime window]) is one symmetric NCCL window per rank. Arenas and
// words of LSA-reachable ranks are addressed through their LSA pointers; tensors and outputs are
// not the fabric's (the caller binds them per call), so pointer() answers only arenas. Ranks that
// are not LSA peers (another host) are refused at construction (the runner needs every rank's
// abort word, NOTE [CUDA call sequences] 5). Emulated hosts (`hosts`, the runtime's
// nodes_as_hosts on one machine of several GPUs): load_store is false between ranks of
// different hosts although they are LSA peers, so the runner's puts and signals between them
// travel as two-sided messages, ncclSend / ncclRecv on the NCCL fabric's message lane
// (NOTE [nccl fabric] 2b; built with message_lanes = 2). No flush follows an arrival: NCCL
// completes a receive once its bytes are visible to later work on its stream (NOTE [rail
// messages], Arrival and flush).
class NcclWindowFabric final : public Fabric {
 public:
  static std::int64_t required_window_bytes(std::int64_t arena_bytes, std::int64_t signal_words);

  // `hosts`: rank r's emulated host (empty: one host; otherwise nccl needs message lanes).
  NcclWindowFabric(NcclFabric& nccl, std::int64_t arena_bytes, std::int64_t signal_words,
                   std::vector<int> hosts = {});

  int ranks() const override { return nccl_.world(); }
  bool local(int rank) const override { return rank == nccl_.rank(); }
  int device() const override { return nccl_.device(); }
  void* pointer(const program::Buffer& buffer) const override;
  std::int64_t bytes(const program::Buffer& buffer) const override;
  std::uint64_t* signals(int owner) const override;
  std::int64_t signal_words() const override { return signal_words_; }
  bool load_store(int from, int to) const override;
  void send(const void* data, std::size_t bytes, int peer, cudaStream_t stream) override;
  void recv(void* data, std::size_t bytes, int peer, cudaStream_t stream) override;
  void send_on_lane(const void* data, std::size_t bytes, int peer, int lane,
                    cudaStream_t stream) override;
  void recv_on_lane(void* data, std::size_t bytes, int peer, int lane,
                    cudaStream_t stream) override;
  void release() noexcept override { nccl_.release(); }

 private:
  std::byte* window(int rank) const;
  NcclFabric& nccl_;
  std::int64_t arena_bytes_ = 0;
  std::int64_t signal_offset_ = 0;
  std::int64_t signal_words_ = 0;
  std::vector<int> hosts_;  // by rank; empty: one host
};

}  // namespace tide::fabric
