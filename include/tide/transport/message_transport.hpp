// How rail messages travel between ranks that cannot address each other (Sec. 6.1-6.2): the
// interface every transport implements (architecture: transport/; the runner's mapping of puts
// and signals onto messages is src/transport/message.hpp).
// Contract of MessageTransport (NCCL's point-to-point semantics):
// - Per ordered pair, the k-th send(from, to) matches the k-th recv(to, from), same byte count;
//   each completes in the order of its rank's stream. A send may wait on the device for its
//   receive, so crossing orders on one stream deadlock. Host calls never wait for the device.
// - prepare() loads the kernels before any stream can wait (NOTE [preloaded kernels]).
// - release() (any thread, idempotent, non-blocking; NOTE [CUDA call sequences] 5): the
//   transport's own waits end at once and move nothing; what they delivered is void. NCCL's
//   waits end with the communicator's abort instead.
// - capture_refusal(): why messages cannot be captured into graphs at all; per_process_refusal():
//   why one side may not be captured while the partner's is not (empty: they may). Slot graphs
//   need both empty, a caller's capture the first (NOTE [CUDA call sequences] 3, 4, 6).
// - path(): "two-sided", "one-sided", "ipc-rendezvous", or a test transport's name.
// OneSidedTransport adds puts, numbered tokens and signal waits (NOTE [one-sided messages] in
// docs/executor.md); its send()/recv() throw tide::InternalError.
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

// Each call names both ranks and completes in the order of its first rank's stream.
class OneSidedTransport : public MessageTransport {
 public:
  void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) override;
  void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) override;
  // `bytes` from `data` (in `from`'s arena) to `to`'s window at `window_offset`, then a signal.
  virtual void put_signal(int from, int to, const void* data, std::size_t bytes,
                          std::int64_t window_offset, cudaStream_t stream) = 0;
  // The token at token_source(from, to, number) into `to`'s slot for it, then a signal.
  virtual void put_token(int from, int to, const std::uint64_t* token, std::uint64_t number,
                         cudaStream_t stream) = 0;
  // Where `from` writes that token before put_token (device, inside a registered window).
  virtual std::uint64_t* token_source(int from, int to, std::uint64_t number) = 0;
  // Until `count` more signals from `from` have arrived at `to`.
  virtual void wait_signals(int to, int from, int count, cudaStream_t stream) = 0;
  // 1, 2, ... per (self, peer, direction): the same number on both sides of a message.
  virtual std::uint64_t next_token_number(int self, int peer, bool sending) = 0;
  // Where `from`'s `number`-th token to `to` lands (device, on `to`'s device).
  virtual const std::uint64_t* token_slot(int to, int from, std::uint64_t number) const = 0;
};

// A runner's transports, the same on every process: one_sided where given and every template
// plans (NOTE [one-sided messages]; else no_one_sided says why), else two_sided (null: no
// messages, and a message throws tide::Unsupported at construction).
struct MessageTransports {
  std::shared_ptr<MessageTransport> two_sided;
  std::shared_ptr<OneSidedTransport> one_sided;
  std::string no_one_sided = "one-sided messages are off: the fabric has no one-sided messages";
};

}  // namespace tide::transport
