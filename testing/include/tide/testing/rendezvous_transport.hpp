// A MessageTransport (tide/transport/message_transport.hpp) for tests on one GPU: ranks of one
// process exchange messages over the pointers the virtual fabric gives them, with NCCL's two-sided
// matching emulated on the device, so that the sequence runner's message order (NOTE [rail
// messages]) is exercised without a second host.
//
// NOTE [rendezvous transport]
// Per ordered pair (from, to) one channel in device memory: `posted` and `done` (64-bit,
// cumulative, never reset), and the posted receive's destination and byte count.
// Numbering: each side numbers its messages on the device, from a word only its own side
// writes, in its kernels' execution order (the k-th send matches the k-th receive, as NCCL
// matches them: NOTE [rail messages], "Matching"): a receive is number posted + 1, a send
// number done + 1. Every kernel of one side reads the same number (the word changes only in
// the side's last kernel), and the host keeps no count, so a graph that captured messages
// numbers them afresh at every replay, and graph launches and stream-path calls mix freely.
//   recv k, on the receiver's stream:
//     1. a 1-thread kernel stores the destination and byte count into the channel, then
//        __threadfence_system(), then stores posted = k;
//     2. a 1-warp kernel waits until done >= k (bounded; see below).
//     What follows on the stream (an unpack, the counter addition) reads the data.
//   send k, on the sender's stream:
//     1. a 1-warp kernel waits until posted >= k (the send waits for its receive, as NCCL's
//        does: a receive never posted holds the send forever);
//     2. a copy kernel reads the posted destination and byte count (after the wait, so it
//        sees what step 1 of recv k stored before posting), traps where the byte count
//        differs from the send's (a mismatched pair), and copies the bytes;
//     3. a 1-thread kernel runs __threadfence_system(), then stores done = k.
// One channel slot suffices: recv k+1 of a pair is enqueued on the same stream after recv k,
// whose wait holds the stream until send k is done, so the slot is never overwritten while a
// send still reads it.
// Order: a send holds its stream until its receive is posted, and a receive holds its stream
// until its send is done; so sends and receives enqueued on two ranks' streams in crossing
// orders (rank a: send to b, then receive from b; rank b: send to a, then receive from a)
// deadlock, as NCCL's would. The runner's watchdog then names the call (NOTE [CUDA call
// sequences] 5). The waits are bounded (by default kRendezvousTimeoutNs of the device's global
// timer):
// past the bound the kernel prints the pair, the message number and the word it waited for,
// and traps (NOTE style 8: loud failure; the context is lost, as with any device check).
// Release (fail-stop): release() stores 1 into a word of mapped host memory (ReleaseWord) that
// every wait polls beside its word; a released wait returns at once, and every kernel after it
// (the copy, the done store) reads the word as set and does nothing, so the streams drain well
// before the bound. The runner's release_waits() calls it, after its own releases.
// Graphs: every kernel is capturable and numbers on the device (Numbering), so the runner's
// slot graphs and a caller's graph replay calls with messages (NOTE [CUDA call sequences] 3,
// 6). The kernels' pointers (the message's source or destination) are parameters fixed at
// capture: the runner does not re-point them.
// Not a performance model: the copy is a plain SM copy on the sender's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tide/transport/message_transport.hpp"
#include "tide/transport/release_word.hpp"

namespace tide::testing {

inline constexpr std::uint64_t kRendezvousTimeoutNs = std::uint64_t{60} * 1000 * 1000 * 1000;

class RendezvousTransport final : public transport::MessageTransport {
 public:
  // Channels for `ranks` ranks in memory of `device` (every device that runs a rank's streams
  // must reach it: one GPU, or peers with peer access, as the virtual fabric sets up). Each
  // wait traps after `timeout_ns` of the device's global timer.
  RendezvousTransport(int ranks, int device, std::uint64_t timeout_ns = kRendezvousTimeoutNs);
  ~RendezvousTransport() override;
  RendezvousTransport(const RendezvousTransport&) = delete;
  RendezvousTransport& operator=(const RendezvousTransport&) = delete;
  const char* path() const override { return "test-rendezvous"; }

  // Enqueue on `stream`, whose device must be current. Not thread-safe: the caller serialises
  // (the runner's lock).
  void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) override;
  void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) override;

  void prepare() override;  // NOTE [preloaded kernels]
  // Thread-safe, idempotent (NOTE [rendezvous transport], Release).
  void release() noexcept override { release_.set(); }

  // Sends enqueued from the host so far (a graph's replays enqueue none).
  std::int64_t messages() const { return messages_; }

  struct Channel;  // one ordered pair's words (defined with the kernels)

 private:
  Channel* channel(int from, int to) const;
  int ranks_ = 0;
  std::uint64_t timeout_ns_ = kRendezvousTimeoutNs;
  Channel* channels_ = nullptr;  // device: ranks x ranks
  std::int64_t messages_ = 0;
  transport::ReleaseWord release_;
};

}  // namespace tide::testing
