// One program's buffers on the NCCL fabric (NOTE [fabric interface]): the rank this process
// runs, its arena and signal words inside the fabric's symmetric window, its tensors and
// outputs as plain device buffers, and its LSA peers' arenas and signal words.
//
// NOTE [nccl program fabric]
// - Carving. The program's arena starts at offset 0 of the fabric's registered window; the
//   signal words (program.counters 64-bit words) start at signal_offset = the largest arena
//   of any rank rounded up to 4 KiB. Both offsets depend on the program alone, so they are the
//   same on every rank (the window is symmetric): peer p's words are at its LSA pointer plus
//   signal_offset. required_window_bytes(program) says how large the window must be.
// - Peers. pointer(Buffer{p, kArena}) is NcclFabric::peer_arena(p): any rank of the world on
//   one host (every rank is an LSA peer), nullptr for ranks on other hosts. On one host the
//   program's M x L split is free: one fabric serves every split of its world, because every
//   transfer, local or rail, is a load/store or copy-engine access to an LSA peer.
// - Tensors and outputs of this rank: cudaMalloc'ed at construction (FSDP2's gradients and
//   masters live in PyTorch's allocator, not in the window); other ranks' are not addressable.
// - Messages (NOTE [rail messages]). load_store(from, to) is true when both ranks are in one
//   LSA team (LSA teams are contiguous runs of world ranks) and, with
//   NcclProgramOptions::messages_between_nodes, on one node of the program's M x L split.
//   Otherwise puts and signals travel as ncclSend / ncclRecv on NcclProgramOptions::
//   message_comm (world ranks; the main communicator by default): the path for rail peers on
//   other hosts, which a single host reproduces when asked to treat its declared nodes as
//   separate.
// - Not collective: every rank builds its own from the same program. The executor built on it
//   zeroes this rank's words, so a barrier must follow every rank's executor construction.
#pragma once

#include <cstdint>
#include <memory>

#include "tide/fabric/fabric.hpp"
#include "tide/fabric/nccl_fabric.hpp"
#include "tide/program/program.hpp"

namespace tide::fabric {

struct NcclProgramOptions {
  int gpus_per_node = 0;  // L of the program's split (needed by messages_between_nodes)
  // Treat ranks on different nodes of the program's split as not load/store reachable, so
  // that every transfer between nodes goes through messages (as between hosts).
  bool messages_between_nodes = false;
  // The communicator messages travel on (world ranks). nullptr: the fabric's main
  // communicator, whose channels are capped (Sec. 6.1); a message-heavy run wants one with
  // NCCL's default channels (tide-nccl makes one by ncclCommSplit).
  ncclComm_t message_comm = nullptr;
};

class NcclProgramFabric final : public Fabric {
 public:
  // Window bytes a program needs: its largest arena (4 KiB rounded) plus its signal words.
  static std::int64_t required_window_bytes(const program::Program& program);

  // Throws tide::InvalidArgument when the program's world differs from the fabric's or the
  // window is too small (naming required_window_bytes), tide::CudaError on allocation.
  NcclProgramFabric(NcclFabric& nccl, const program::Program& program,
                    const NcclProgramOptions& options = {});
  ~NcclProgramFabric() override;
  NcclProgramFabric(const NcclProgramFabric&) = delete;
  NcclProgramFabric& operator=(const NcclProgramFabric&) = delete;

  int ranks() const override;
  bool local(int rank) const override;
  int device() const override;
  void* pointer(const program::Buffer& buffer) const override;
  std::int64_t bytes(const program::Buffer& buffer) const override;
  std::uint64_t* signals(int owner) const override;
  std::int64_t signal_words() const override;
  bool load_store(int from, int to) const override;
  void send(const void* data, std::size_t bytes, int peer, cudaStream_t stream) override;
  void recv(void* data, std::size_t bytes, int peer, cudaStream_t stream) override;
  void release() noexcept override;

  std::int64_t signal_offset() const;
  std::int64_t tensor_bytes() const;  // cudaMalloc'ed bytes of this rank's tensors and outputs

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::fabric
