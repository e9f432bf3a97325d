// What the CUDA executor needs of a fabric (architecture: executors over fabrics): where a
// program's buffers and signal words live, as the ranks this process runs address them.
// NOTE [fabric interface]
// - Ranks: this process runs the ops of the ranks where local(rank) (all N on the virtual
//   fabric, one on the NCCL fabric).
// - Buffers: pointer(buffer) is this process's device address for any buffer of a local rank
//   and the arena of any load/store reachable rank; other ranks' tensors and outputs: nullptr.
// - Signal words: signal_words() 64-bit words per rank (the counters), signals(owner) as this
//   process addresses them (nullptr: unreachable); peers change them only by atomic additions.
// - Contents start undefined; the executor zeroes its local words when built, so every rank
//   must have built its executor before any runs (a barrier).
// - load_store(from, to): whether `from` writes `to`'s arena and words directly, the same on
//   every process; where not, puts and signals travel as messages (NOTE [rail messages]).
// - release() gives up every allocation without freeing it (undrained device work).
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
