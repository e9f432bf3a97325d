// How rail messages travel between ranks that cannot address each other (paper Sec. 6.1-6.2):
// the one interface every transport implements (architecture: transport/). The runner maps a
// program's puts and signals onto messages (src/transport/message.hpp) and enqueues them
// through the transports its place names (CudaSequencePlace::messages).
//
// Contract of MessageTransport (NCCL's point-to-point semantics):
// - For each ordered pair (from, to), the k-th send(from, to, ...) matches the k-th
//   recv(to, from, ...), with the same byte count; each is enqueued on a stream of its own
//   rank's device and completes in that stream's order. A send may wait (on the device) until
//   its receive is posted, so a caller that enqueues two pairs' sends and receives in crossing
//   orders on one stream deadlocks. Host calls never wait for the device.
// - prepare() loads the transport's kernels on the current device before any stream of the
//   context can wait (NOTE [preloaded kernels]); the runner calls it once per local rank.
// - release() (fail-stop, NOTE [CUDA call sequences] 5; any thread, idempotent, never waits
//   for the device): every wait of the transport's own kernels, pending or later, ends at once
//   and moves nothing, so the streams drain; what the released messages delivered is void. A
//   transport whose waits are another library's (NCCL's) has nothing to release: the
//   communicator's abort ends those.
// - Graphs (NOTE [CUDA call sequences] 3, 4, 6): capture_refusal() says why sends and receives
//   cannot be captured into CUDA graphs at all (empty: they can); per_process_refusal() says
//   why one process may not capture a message's side while its partner enqueues the other side
//   outside a graph (empty: it may). The runner's slot graphs need both empty; a caller's
//   capture, which the caller makes on every rank alike, needs the first.
// - path() names how messages travel, for reports: "two-sided" (NCCL send/receive),
//   "one-sided" (NCCL put/signal), "ipc-rendezvous", or a one-GPU test transport's name.
// OneSidedTransport adds the puts, numbered tokens and signal waits of NOTE [one-sided
// messages] (docs/executor.md); its send()/recv() throw tide::InternalError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tide::transport {

class MessageTransport {
 public:
  virtual ~MessageTransport() = default;
  virtual const char* path() const = 0;
  virtual void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) = 0;
  virtual void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) = 0;
  virtual void prepare() {}
  virtual void release() noexcept {}
  virtual std::string capture_refusal() const { return {}; }
  virtual std::string per_process_refusal() const { return {}; }
};

// Each call names both ranks; enqueued on a stream of its first rank's device, completing in
// its order.
class OneSidedTransport : public MessageTransport {
 public:
  void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) override;
  void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) override;
  // `bytes` from `data` (in `from`'s window: its arena) into `to`'s window at
  // `window_offset`, then one signal at `to`.
  virtual void put_signal(int from, int to, const void* data, std::size_t bytes,
                          std::int64_t window_offset, cudaStream_t stream) = 0;
  // The 8-byte token at `token` (token_source(from, to, number), where the sender wrote it)
  // into `to`'s slot for `from`'s `number`-th token, then a signal.
  virtual void put_token(int from, int to, const std::uint64_t* token, std::uint64_t number,
                         cudaStream_t stream) = 0;
  // Where `from` writes its `number`-th token to `to` before put_token (device, on `from`'s
  // device, inside a registered window: NCCL puts only from one).
  virtual std::uint64_t* token_source(int from, int to, std::uint64_t number) = 0;
  // Until `count` more signals from `from` have arrived at `to`.
  virtual void wait_signals(int to, int from, int count, cudaStream_t stream) = 0;
  // 1, 2, ... for the tokens `self` sends to (receives from) `peer`, in call order: the same
  // number on both sides of a message.
  virtual std::uint64_t next_token_number(int self, int peer, bool sending) = 0;
  // Where `from`'s `number`-th token to `to` lands (device, on `to`'s device).
  virtual const std::uint64_t* token_slot(int to, int from, std::uint64_t number) const = 0;
};

// The transports a runner's messages may take, the same choice on every process:
// - two_sided carries every message where one_sided is absent or refuses a template (null:
//   the fabric has no messages, and a message throws tide::Unsupported at construction);
// - one_sided, where given, carries a runner's messages where every template plans (NOTE
//   [one-sided messages]); no_one_sided says why it is absent.
struct MessageTransports {
  std::shared_ptr<MessageTransport> two_sided;
  std::shared_ptr<OneSidedTransport> one_sided;
  std::string no_one_sided = "one-sided messages are off: the fabric has no one-sided messages";
};

}  // namespace tide::transport
