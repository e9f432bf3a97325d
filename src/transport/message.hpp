// One side of a rail message (a put or signal between ranks that cannot address each other:
// the rail path to other hosts; paper Sec. 6.1-6.2) and how it is enqueued through a
// MessageTransport (tide/transport/message_transport.hpp).
//
// Contract (the design: NOTE [rail messages] and NOTE [abort relay] in docs/executor.md):
// - A kRailPut or kSignal from s to d where Fabric::load_store(s, d) is false becomes the
//   sender's side on s's rail stream (data, then an 8-byte abort token) and the receiver's
//   side on d's (data, token, then d's counter addition, which counts only a zero token).
// - Every process must enqueue its rail stream's sides in the order of the one global
//   schedule (NOTE [enqueue order]): that is what matches sends with receives and keeps the
//   messages deadlock-free.
// - No flush follows an arrival: the counter's system-scope addition after the receive is the
//   release that a wait's acquire pairs with.
// - Where the bytes travel is a MessageTransport's; whether it may be captured in a graph is
//   its own to say. A timeout cannot release an NCCL receive: only the communicator's abort
//   ends it; the rendezvous transports' waits end with MessageTransport::release().
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tide/kernels/signal/abort_check.hpp"
#include "tide/program/program.hpp"
#include "tide/transport/message_transport.hpp"

namespace tide::transport {

struct MessagePart {
  void* data = nullptr;  // the contiguous bytes sent or received (the region, or `staging`)
  std::size_t bytes = 0;
  // A strided region: packed into / unpacked from `staging` by cudaMemcpy2DAsync.
  bool strided = false;
  void* region = nullptr;
  std::size_t width = 0, rows = 0, pitch = 0;
};

// NOTE [one-sided messages] (docs/executor.md): one put of a one-sided message: `bytes`
// from byte `first` of part `part`'s source region (counted from its first byte, rows at its
// pitch) into the receiver's window at `window_offset`; a descriptor takes one put per run
// contiguous in both its source and its destination.
struct OneSidedPut {
  std::size_t part = 0;
  std::size_t first = 0;
  std::size_t bytes = 0;
  std::int64_t window_offset = 0;
};

// How a message travels one-sided; empty (one_sided false) for two-sided messages.
struct OneSidedRoute {
  bool one_sided = false;
  std::vector<OneSidedPut> puts;  // sender
  int signals = 0;                // receiver: the signals it waits for (puts and the token)
};

struct Message {
  bool sender = true;
  int self = -1;                     // the rank whose side this is (sender or receiver)
  int peer = -1;                     // the other rank
  std::vector<MessagePart> parts;    // empty: one 8-byte token
  std::uint64_t* counter = nullptr;  // receiver: its own counter word
  std::uint64_t value = 0;
  cudaEvent_t ready = nullptr;  // sender: the op's stream -> the rail stream
  cudaEvent_t sent = nullptr;   // sender: the rail stream -> the op's stream
  std::vector<void*> staging;   // device buffers this message owns
  OneSidedRoute route;          // NOTE [one-sided messages]
};

// True when a region's bytes are one contiguous run (one row, or pitch == width).
inline bool contiguous(const program::Region& r) {
  return r.rows <= 1 || r.pitch == r.width;
}

// Whether `op` is a put or signal whose counter is on a rank other than its own, and its
// (from, to) pair.
bool crosses_ranks(const program::Op& op, int& from, int& to);

// How a message resolves its device addresses: `region` the first byte of a region (nullptr:
// not addressable by this process), `counter` a counter's word (nullptr: not addressable).
struct MessageAddresses {
  std::function<std::byte*(const program::Region&)> region;
  std::function<std::uint64_t*(const program::Counter&)> counter;
};

// The sender's or the receiver's side of a message op (device pointers resolved, staging
// allocated for strided parts where `staging`, events created). A one-sided route (NOTE
// [one-sided messages]) reads and writes its regions in place and takes staging = false.
// Throws tide::Unsupported for a put whose destinations are not all on the counter's rank, or
// a region this process cannot address.
Message map_message(const program::Op& op, bool sender, const MessageAddresses& at,
                    bool staging = true);

// NOTE [abort relay]: the words one side of a message uses. Sender: `verdict` (its token's
// words) and `send_token` (an 8-byte word on the sender's device). Receiver: `recv_token` (on
// its device), `own_abort` (its abort word) and `relay` (the runner's relayed-abort word).
struct MessageRelay {
  kernels::AbortCheck verdict{};
  std::uint64_t* send_token = nullptr;
  std::uint64_t* recv_token = nullptr;
  const std::uint64_t* own_abort = nullptr;
  std::uint64_t* relay = nullptr;
};

// Enqueues one side (NOTE [rail messages], NOTE [abort relay]) through `transport`: the data,
// then the abort token. A one-sided message (m.route.one_sided) goes through
// enqueue_one_sided_message (NOTE [one-sided messages]) and needs a OneSidedTransport.
void enqueue_message(const Message& m, MessageTransport& transport, cudaStream_t rail,
                     cudaStream_t op_stream, const MessageRelay& relay);

// Frees staging and events; never throws.
void release_message(Message& m) noexcept;

}  // namespace tide::transport
