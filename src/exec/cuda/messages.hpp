// Puts and signals between ranks that cannot address each other, as two-sided messages
// (the rail path to other hosts; paper Sec. 6.1-6.2).
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

#include "tide/fabric/fabric.hpp"
#include "tide/kernels/signal/abort_check.hpp"
#include "tide/program/program.hpp"

namespace tide::exec::cuda_detail {

struct MessagePart {
  void* data = nullptr;  // the contiguous bytes sent or received (the region, or `staging`)
  std::size_t bytes = 0;
  // A strided region: packed into / unpacked from `staging` by cudaMemcpy2DAsync.
  bool strided = false;
  void* region = nullptr;
  std::size_t width = 0, rows = 0, pitch = 0;
};

// NOTE [one-sided messages] (one_sided_messages.hpp): one put of a one-sided message: `bytes`
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

// Two-sided transfers between ranks. Contract (NCCL's point-to-point semantics): for each
// ordered pair (from, to), the k-th send(from, to, ...) matches the k-th recv(to, from, ...),
// with the same byte count; each is enqueued on a stream of its own rank's device and
// completes in that stream's order; a send may wait (on the device) until its receive is
// posted, so a caller that enqueues two pairs' sends and receives in crossing orders on one
// stream deadlocks. Host calls never wait for the device.
// release() (fail-stop, NOTE [CUDA call sequences] 5; any thread, idempotent, never waits for
// the device): every wait of the transport's own kernels, pending or later, ends at once and
// moves nothing, so the streams drain; what the released messages delivered is void. A
// transport whose waits are another library's (NCCL's) has nothing to release: the
// communicator's abort ends those.
// Graphs (NOTE [CUDA call sequences] 3, 4, 6): capture_refusal() says why sends and receives
// cannot be captured into CUDA graphs at all (empty: they can); per_process_refusal() says why
// one process may not capture a message's side while its partner enqueues the other side
// outside a graph (empty: it may, as where the matching is numbered on the device). The
// runner's own slot graphs need both empty (each process decides them from its own
// bindings); a caller's capture, which the caller makes on every rank alike, needs the first.
// path() names how messages travel, for reports: "two-sided" (NCCL send/receive),
// "one-sided" (NCCL put/signal), "ipc-rendezvous", or a one-GPU test transport's name.
class MessageTransport {
 public:
  virtual ~MessageTransport() = default;
  virtual const char* path() const = 0;
  virtual void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) = 0;
  virtual void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) = 0;
  virtual void release() noexcept {}
  virtual std::string capture_refusal() const { return {}; }
  virtual std::string per_process_refusal() const { return {}; }
};

// The fabric's own messages (Fabric::send_on_lane/recv_on_lane: one local rank per process,
// NCCL), on message lane `lane` (CudaSequencePlace::message_channels).
class FabricTransport final : public MessageTransport {
 public:
  explicit FabricTransport(fabric::Fabric& fabric, int lane = 0) : fabric_(fabric), lane_(lane) {}
  const char* path() const override { return "two-sided"; }
  void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) override;
  void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) override;
  // ncclSend / ncclRecv are capturable (NCCL >= 2.9), but NCCL needs a send and its receive
  // both captured or both not, and a graph holding them launched on both ranks alike.
  std::string per_process_refusal() const override;

 private:
  fabric::Fabric& fabric_;
  int lane_ = 0;
};

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

}  // namespace tide::exec::cuda_detail
