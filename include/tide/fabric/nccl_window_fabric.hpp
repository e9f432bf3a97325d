// The NCCL fabric's view for the executor (NOTE [nccl window fabric]): the one NCCL fabric that
// the runtime and the tools (tide-nccl) build on. Built only with NCCL.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/fabric/nccl_fabric.hpp"
#include "tide/program/program.hpp"

namespace tide::fabric {

// NOTE [nccl window fabric]
// One symmetric NCCL window per rank (NcclFabric's arena) holds the arena at offset 0 and the
// signal words at signal_offset = the arena bytes rounded up to 4 KiB (NOTE [runtime window]):
// offsets that are the same on every rank, so peer p's words are at its LSA pointer plus
// signal_offset. Every LSA peer's arena and words have a pointer (pointer(), signals()); for
// each peer the fabric says "addressable" or "reach by transport":
// - Addressable (load_store true): both ranks in one LSA team (contiguous runs of world ranks)
//   and on one host, real or emulated (NcclWindowOptions::hosts, or the nodes of the M x L
//   split with messages_between_nodes).
// - Reach by transport: puts and signals travel as ncclSend / ncclRecv, NOTE [rail messages]:
//   send()/recv() on NcclWindowOptions::message_comm (world ranks; the main communicator by
//   default, whose channels are capped, Sec. 6.1), and send_on_lane()/recv_on_lane() on the
//   NCCL fabric's message lane where it has one (NOTE [nccl fabric] 2b: the runtime's lanes,
//   each in one order on every rank), else as send()/recv(). Ranks of emulated hosts stay LSA
//   peers, so the runner still reads their abort words (NOTE [CUDA call sequences] 5). No
//   flush follows an arrival: NCCL completes a receive once its bytes are visible to later
//   work on its stream (NOTE [rail messages], Arrival and flush).
// - One-sided (opt-in, NOTE [nccl fabric] 5, NOTE [one-sided messages]): where the NCCL
//   fabric agreed on host RMA, one_sided() is true and puts and signals may instead travel as
//   ncclPutSignal into the peer's window on the lane's communicator (the arena window and the
//   token area that step 5 registered there), waited for with ncclWaitSignal; send()/recv()
//   stay as they are. one_sided_reason() is the NCCL fabric's host_rma_reason().
// Buffers: for the runtime (the first constructor) tensors and outputs are not the fabric's
// (the caller binds them per call), so pointer() answers arenas only. For one program (the
// second constructor: tide-nccl, one-shot CudaExecutor programs) the window is sized from the
// program (required_window_bytes), every rank's arena bytes are the program's, and this rank's
// tensors and outputs are cudaMalloc'ed at construction (FSDP2's gradients and masters live in
// PyTorch's allocator, not in the window); other ranks' are not addressable.
// Not collective: every rank builds its own. An executor built on it zeroes this rank's words,
// so a barrier must follow every rank's construction of its executor (NOTE [fabric interface]).
struct NcclWindowOptions {
  // Refuse a world with ranks that are not LSA peers (one machine). The runtime's nccl backend
  // turns it off over several hosts (NOTE [runtime] 9, src/runtime/nccl_layout.hpp), as do
  // tools that carry messages.
  bool one_host = true;
  // Rank r's host, real or emulated (the runtime's nodes_as_hosts on one machine of several
  // GPUs); empty: one host. Needs the NCCL fabric's message lanes
  // (NcclFabricOptions::message_lanes).
  std::vector<int> hosts;
  int gpus_per_node = 0;  // L of the M x L split (needed by messages_between_nodes)
  // Treat ranks on different nodes of the split as on different hosts, so that every transfer
  // between nodes goes through messages.
  bool messages_between_nodes = false;
  // The communicator send()/recv() use (world ranks); nullptr: the fabric's main communicator.
  // A message-heavy run wants one with NCCL's default channels (tide-nccl makes one by
  // ncclCommSplit).
  ncclComm_t message_comm = nullptr;
};

class NcclWindowFabric final : public Fabric {
 public:
  static std::int64_t required_window_bytes(std::int64_t arena_bytes, std::int64_t signal_words);
  // A program's window: its largest arena (4 KiB rounded) plus its signal words.
  static std::int64_t required_window_bytes(const program::Program& program);

  // The runtime's window: `arena_bytes` per rank, `signal_words` words. Throws
  // InvalidArgument where the window is too small or `hosts` does not fit the world,
  // Unsupported (with one_host) where a rank is not an LSA peer.
  NcclWindowFabric(NcclFabric& nccl, std::int64_t arena_bytes, std::int64_t signal_words,
                   const NcclWindowOptions& options = {});
  // One program's buffers (the program must outlive the fabric). Throws InvalidArgument when
  // the program's world differs from the fabric's or the window is too small (naming
  // required_window_bytes), CudaError on allocation.
  NcclWindowFabric(NcclFabric& nccl, const program::Program& program,
                   const NcclWindowOptions& options);
  ~NcclWindowFabric() override;
  NcclWindowFabric(const NcclWindowFabric&) = delete;
  NcclWindowFabric& operator=(const NcclWindowFabric&) = delete;

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
  void send_on_lane(const void* data, std::size_t bytes, int peer, int lane,
                    cudaStream_t stream) override;
  void recv_on_lane(void* data, std::size_t bytes, int peer, int lane,
                    cudaStream_t stream) override;
  bool one_sided() const override;
  std::string one_sided_reason() const override;
  void put_signal(const void* data, std::size_t bytes, int peer, std::int64_t window_offset,
                  int lane, cudaStream_t stream) override;
  void put_token(const std::uint64_t* token, int peer, std::uint64_t number, int lane,
                 cudaStream_t stream) override;
  void signal(int peer, int lane, cudaStream_t stream) override;
  void wait_signals(int peer, int count, int lane, cudaStream_t stream) override;
  std::uint64_t next_token_number(int peer, int lane, bool sending) override;
  std::uint64_t* token_source(int peer, std::uint64_t number, int lane) override;
  const std::uint64_t* token_slot(int peer, std::uint64_t number, int lane) const override;
  void release() noexcept override;

  std::int64_t signal_offset() const;
  std::int64_t tensor_bytes() const;  // cudaMalloc'ed bytes of this rank's tensors and outputs

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::fabric
