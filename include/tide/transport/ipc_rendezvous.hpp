// A MessageTransport between processes that map each other's memory but must not store to it
// directly (the ipc fabric over emulated hosts, NOTE [ipc fabric]), with NCCL's two-sided semantics
// (Sec. 6.1-6.2). Contract: channel (set c, sender s) of receiver d is a page of cumulative words
// (posted, bytes, filled, drained, sent; offsets below) and a bounce buffer of kMessageBounceBytes
// in d's message area. Each side numbers its messages on the device, from the words: the k-th send
// of s to d matches the k-th receive of d from s, so runners sharing a channel set must never run
// messages at once on a device (the runtime's lanes, NOTE [lane handoff]). A send waits for its
// receive to be posted, traps on a mismatched byte count, and is complete (its source reusable)
// once its last chunk is in the bounce; what follows a recv on its stream reads the data. Every
// wait traps after timeout_ns naming the pair, and ends at once after release(). Nothing is
// numbered on the host, so calls may be captured into graphs. Not a performance model: one block
// copies. The steps and their fences: NOTE [ipc rendezvous transport] in docs/runtime.md.
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
  // Channel set `channels` (< kMessageChannelSets) of `fabric`'s message areas
  // (InvalidArgument where it has none, or too small ones).
  IpcRendezvousTransport(const fabric::IpcFabric& fabric, int channels,
                         std::uint64_t timeout_ns = kIpcRendezvousTimeoutNs);
  const char* path() const override { return "ipc-rendezvous"; }

  // On `stream` (its device current); `from` (send) or `to` (recv) is this process's rank.
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

// Lane `lane`'s transports: this one where the fabric has message areas, else none.
MessageTransports ipc_transports(const fabric::IpcFabric& fabric, int lane);

}  // namespace tide::transport
