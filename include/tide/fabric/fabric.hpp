// What the CUDA executor needs of a fabric (architecture: executors over fabrics): where a
// program's buffers and signal words live, as the ranks this process runs address them.
//
// NOTE [fabric interface]
// - Ranks. A fabric serves a program's N ranks; this process runs the ops of the ranks for
//   which local(rank) is true (all N on the virtual fabric, one on the NCCL fabric). The
//   executor enqueues only local ranks' ops; the other ranks' processes run theirs.
// - Buffers. pointer(buffer) is the device address this process uses for a buffer: any
//   buffer of a local rank, and the arena of any rank that is load/store reachable (a peer
//   arena on the virtual fabric, an LSA peer's arena through NCCL's symmetric window).
//   Tensors and outputs of other processes' ranks are not addressable (nullptr).
// - Signal words. Every rank owns signal_words() 64-bit words (the executor's counters, one
//   per program counter id) in memory its peers can add to: signals(owner) is owner's array
//   as this process addresses it, nullptr where owner is not reachable. Words of local ranks
//   can be reset by this process; a peer's words change only by atomic additions.
// - Contents start undefined; the executor zeroes its local ranks' signal words when it is
//   built. Across processes, every rank must have built its executor before any rank runs
//   (a barrier; the multi-GPU runner does it), or a fast peer's additions could be zeroed.
// - Messages. load_store(from, to) says whether rank `from` can write rank `to`'s arena and
//   signal words directly; the same answer on every process. Where it is false, puts and
//   signals travel as messages (NOTE [rail messages] in docs/executor.md): two-sided through
//   send()/recv(), through message areas (message_area_bytes() > 0: the ipc rendezvous
//   transport), or one-sided where one_sided() (NOTE [one-sided messages] in
//   src/exec/cuda/one_sided_messages.hpp). Fabrics without a kind throw tide::Unsupported.
// - release() gives up every allocation without freeing it (device work that could not be
//   drained may still use it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tide/program/program.hpp"

namespace tide::fabric {

class Fabric {
 public:
  virtual ~Fabric() = default;

  virtual int ranks() const = 0;
  virtual bool local(int rank) const = 0;
  virtual int device() const = 0;  // the CUDA device of the first local rank
  // The CUDA device of a local rank (the virtual fabric can spread ranks over the GPUs of
  // one host; its streams, events, kernels and buffers live there).
  virtual int device_of(int rank) const {
    (void)rank;
    return device();
  }

  virtual void* pointer(const program::Buffer& buffer) const = 0;
  // The size the program asked for (0 for buffers this process cannot address).
  virtual std::int64_t bytes(const program::Buffer& buffer) const = 0;

  virtual std::uint64_t* signals(int owner) const = 0;
  virtual std::int64_t signal_words() const = 0;

  virtual bool load_store(int from, int to) const {
    (void)from;
    (void)to;
    return true;
  }
  // Enqueue one message of `bytes` to / from rank `peer` on `stream`; matched in issue order
  // per pair of ranks. Only called where load_store is false.
  virtual void send(const void* data, std::size_t bytes, int peer, cudaStream_t stream);
  virtual void recv(void* data, std::size_t bytes, int peer, cudaStream_t stream);
  // The same on message lane `lane` (the runtime's lanes, CudaSequencePlace::message_channels):
  // a fabric whose lanes must not share one order (NCCL's: a communicator per lane) keeps
  // them apart; by default the lane is ignored.
  virtual void send_on_lane(const void* data, std::size_t bytes, int peer, int lane,
                            cudaStream_t stream) {
    (void)lane;
    send(data, bytes, peer, stream);
  }
  virtual void recv_on_lane(void* data, std::size_t bytes, int peer, int lane,
                            cudaStream_t stream) {
    (void)lane;
    recv(data, bytes, peer, stream);
  }
  // Message areas (ipc over emulated hosts): message_area_bytes() per rank, as this process
  // addresses them; none by default.
  virtual std::byte* message_area(int owner) const {
    (void)owner;
    return nullptr;
  }
  virtual std::int64_t message_area_bytes() const { return 0; }
  // One-sided messages; none by default. one_sided() is the same on every process (opt-in,
  // NCCL >= 2.29); one_sided_reason() says why it is false. put_signal() writes at an arena
  // offset of the peer's window and adds one signal there; put_token() writes this rank's
  // k-th 8-byte abort token to the peer (token_source(), numbered by next_token_number()) into
  // the peer's token_slot() and adds one signal; wait_signals() waits on `stream` for `count`
  // more signals from `peer`.
  virtual bool one_sided() const { return false; }
  virtual std::string one_sided_reason() const { return "the fabric has no one-sided messages"; }
  virtual void put_signal(const void* data, std::size_t bytes, int peer, std::int64_t window_offset,
                          int lane, cudaStream_t stream);
  virtual void put_token(const std::uint64_t* token, int peer, std::uint64_t number, int lane,
                         cudaStream_t stream);
  virtual void signal(int peer, int lane, cudaStream_t stream);
  virtual void wait_signals(int peer, int count, int lane, cudaStream_t stream);
  // 1, 2, ... for the tokens this process sends to (receives from) `peer` on `lane`, in issue
  // order: the same number on both sides of a message.
  virtual std::uint64_t next_token_number(int peer, int lane, bool sending);
  virtual std::uint64_t* token_source(int peer, std::uint64_t number, int lane);
  virtual const std::uint64_t* token_slot(int peer, std::uint64_t number, int lane) const;

  virtual void release() noexcept = 0;

 protected:
  Fabric() = default;
  Fabric(const Fabric&) = default;
  Fabric& operator=(const Fabric&) = default;
};

}  // namespace tide::fabric
