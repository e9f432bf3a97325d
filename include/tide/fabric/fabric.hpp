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
//   signals travel as messages (NOTE [rail messages] in docs/executor.md) through a transport
//   (tide/transport/message_transport.hpp), not through the fabric.
// - release() gives up every allocation without freeing it (device work that could not be
//   drained may still use it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

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
  virtual void release() noexcept = 0;

 protected:
  Fabric() = default;
  Fabric(const Fabric&) = default;
  Fabric& operator=(const Fabric&) = default;
};

}  // namespace tide::fabric
