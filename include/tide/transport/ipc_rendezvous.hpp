// A MessageTransport (tide/transport/message_transport.hpp) between processes that map each other's
// memory but must not store to each other directly: the ipc fabric over emulated hosts (NOTE [ipc
// fabric]). Several processes on one GPU then exchange the sequence runner's rail messages with
// NCCL's two-sided semantics (a send waits for its receive), as ranks on different hosts would
// through ncclSend / ncclRecv (paper Sec. 6.1-6.2).
//
// NOTE [ipc rendezvous transport]
// Memory. Every rank's window ends in a message area (IpcFabric::message_area, NOTE [runtime
// window]) that every process maps: kMessageChannelSets sets of one channel per sending rank.
// Channel (set c, sender s) of receiver d lies in d's area at (c * ranks + s) *
// kMessageChannelBytes: a 4 KiB page of words, each on its own 128-byte line, then a bounce
// buffer of kMessageBounceBytes. Words (cumulative, never reset; the fabric zeroes its own area
// before its construction's last exchange, so before any peer can touch it):
//   posted   receives posted (written by d)      bytes    the latest receive's byte count (d)
//   filled   chunks the sender filled (s)        drained  chunks the receiver drained (d)
//   sent     sends begun (s)
// Each side numbers its messages on the device, from the words, in its kernels' execution
// order: the k-th send of s to d on the device matches the k-th receive of d from s. The host
// keeps no count, so runners that share a channel set need no shared object: what they need is
// that their messages never run at once on a device, which the runtime's lanes give (its
// sequences of one lane share a set, CudaSequencePlace::message_channels; each call of a lane
// starts after the previous one completed, NOTE [lane handoff]). A message of n bytes moves in
// max(1, ceil(n / B)) chunks of B = kMessageBounceBytes; chunk j (cumulative over the pair) is
// the j-th fill of the bounce buffer.
//   recv, on the receiver's stream:
//     1. a 1-thread kernel: k = posted + 1; stores bytes = n, __threadfence_system(), posted = k;
//     2. a 1-block kernel, per chunk j: thread 0 waits until filled >= j (acquire: the wait ends
//        with __threadfence_system()); the block copies the bounce into the destination, reading
//        it at L2 (ld.global.cg: L1 may hold the previous chunk's lines); __syncthreads();
//        thread 0 runs __threadfence_system() and stores drained = j.
//     What follows on the stream (an unpack, the counter addition) reads the data.
//   send, on the sender's stream: one 1-block kernel:
//     1. thread 0: k = sent + 1; waits until posted >= k (the send waits for its receive, as
//        NCCL's does); reads bytes and traps where it differs from n (a mismatched pair);
//     2. per chunk j: thread 0 waits until drained >= j - 1 (the bounce is free); the block
//        copies the chunk into the bounce; __syncthreads(); thread 0 runs
//        __threadfence_system() and stores filled = j;
//     3. thread 0 stores sent = k. The send is complete once its last chunk is in the bounce
//        (its source may be reused), as an NCCL send is once its data left the buffer.
// One `bytes` slot suffices: receive k+1 of a pair posts only after receive k drained its last
// chunk, which the sender filled after it read `bytes`.
// Order and deadlock: as NOTE [rendezvous transport] (crossed orders deadlock, as NCCL's would).
// Bounds and release: every wait is bounded (kIpcRendezvousTimeoutNs by default, longer than
// any runtime call timeout's watchdog, which acts first): past it the kernel prints the pair,
// the message number, the word and its value, and traps. Every wait also polls the transport's
// ReleaseWord (release_word.hpp): after release() (the runner's release_waits(), on a
// fail-stop abort) the kernels end at once and move nothing, so the process's streams drain;
// a peer still waiting on this rank's messages is released by its own watchdog (its call
// times out, NOTE [CUDA call sequences] 5 (b)). A peer that died leaves its mapped memory
// alive (NOTE [ipc fabric], Liveness), so nothing faults.
// Graphs: nothing is numbered on the host (every number comes from the words when the kernel
// runs), so a replayed graph's messages take the next numbers, and one process's graph
// launches mix with its partner's stream-path calls: the runner captures calls with messages
// into its slot graphs and a caller's graph (NOTE [CUDA call sequences] 3, 6). Not a
// performance model: one block copies.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tide/fabric/ipc_fabric.hpp"
#include "tide/transport/message_transport.hpp"
#include "tide/transport/release_word.hpp"

namespace tide::transport {

inline constexpr std::uint64_t kIpcRendezvousTimeoutNs = std::uint64_t{600} * 1000 * 1000 * 1000;

class IpcRendezvousTransport final : public MessageTransport {
 public:
  // Channel set `channels` (0 <= channels < kMessageChannelSets) of `fabric`'s message areas
  // (tide::InvalidArgument where the fabric has none, or too small ones). Each wait traps
  // after `timeout_ns` of the device's global timer.
  IpcRendezvousTransport(const fabric::IpcFabric& fabric, int channels,
                         std::uint64_t timeout_ns = kIpcRendezvousTimeoutNs);
  const char* path() const override { return "ipc-rendezvous"; }

  // Enqueue on `stream`, whose device must be current; `from` (send) or `to` (recv) is a rank
  // of this process. Host calls never wait for the device.
  void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) override;
  void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) override;
  void prepare() override;  // NOTE [preloaded kernels]
  // Thread-safe, idempotent (NOTE [ipc rendezvous transport], Bounds and release).
  void release() noexcept override { release_.set(); }

 private:
  std::byte* channel(int from, int to) const;  // in `to`'s area, as this process maps it
  const fabric::IpcFabric& fabric_;
  int channels_ = 0;
  std::uint64_t timeout_ns_ = kIpcRendezvousTimeoutNs;
  ReleaseWord release_;
};

// The words of NOTE [ipc rendezvous transport], as byte offsets in a channel's page.
inline constexpr std::size_t kChannelPosted = 0;
inline constexpr std::size_t kChannelBytes = 128;
inline constexpr std::size_t kChannelFilled = 256;
inline constexpr std::size_t kChannelDrained = 384;
inline constexpr std::size_t kChannelSent = 512;

// The transports of message lane `lane` over `fabric`: the ipc rendezvous transport where the
// fabric has message areas (emulated hosts), else none (every rank load/store reachable).
MessageTransports ipc_transports(const fabric::IpcFabric& fabric, int lane);

}  // namespace tide::transport
