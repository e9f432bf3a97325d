// A OneSidedTransport (tide/transport/message_transport.hpp) for tests on one GPU: the ranks of one
// process (the virtual fabric) put into each other's arenas through the fabric's pointers, so that
// the sequence runner's one-sided path (NOTE [one-sided messages]: routes, numbered tokens, the
// receiver's signal waits and checked additions) runs without NCCL 2.29 or a second GPU.
// Tests hand it to the runner (CudaSequencePlace::messages, with a RendezvousTransport for the
// templates that do not plan).
//
// NOTE [loopback one-sided transport]
// - A put: cudaMemcpyAsync into fabric.pointer(arena of `to`) + window_offset on the sender's
//   stream, then a counter addition (system-scope fence, then atomicAdd_system) of 1 to the
//   pair's signal word (to, from): a signal counted only after its bytes, as assumption (ii)
//   of NOTE [one-sided messages], and in issue order on the stream, as (iii).
// - A token: the same, into the token area (to, from, number mod kTokenRing), from the send
//   slot (from, to, number mod kTokenRing) token_source() gives.
// - NCCL's window rule (NOTE [one-sided messages] (iv)) holds here too: a put whose source is
//   not inside the sender's arena, or a token not from its send slot, throws
//   tide::InternalError, so that the one-GPU tests catch a route NCCL would refuse.
// - A wait: the host adds `count` to the pair's expected total and enqueues a wait kernel
//   (tide/kernels/signal/generation_wait.hpp, step 0) until the signal word reaches it.
//   Host-counted, so not for graphs: capture_refusal() says so, as the NCCL transport's does.
// - release(): nothing of its own (its waits are the runner's generation waits, which the
//   abort words do not end): a released runner's streams drain only as far as the peers'
//   puts arrive. Tests that release a runner use the rendezvous transport.
// Signal words and token area live on the fabric's device (tests run every rank on one GPU).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/transport/message_transport.hpp"

namespace tide::testing {

class LoopbackOneSidedTransport final : public transport::OneSidedTransport {
 public:
  static constexpr int kTokenRing = 64;

  // Allocates ranks^2 signal words and ranks^2 * kTokenRing token slots, zeroed, on
  // fabric.device() (tide::CudaError).
  LoopbackOneSidedTransport(fabric::Fabric& fabric, int ranks);
  ~LoopbackOneSidedTransport() override;
  LoopbackOneSidedTransport(const LoopbackOneSidedTransport&) = delete;
  LoopbackOneSidedTransport& operator=(const LoopbackOneSidedTransport&) = delete;
  const char* path() const override { return "test-one-sided"; }

  void put_signal(int from, int to, const void* data, std::size_t bytes, std::int64_t window_offset,
                  cudaStream_t stream) override;
  void put_token(int from, int to, const std::uint64_t* token, std::uint64_t number,
                 cudaStream_t stream) override;
  void wait_signals(int to, int from, int count, cudaStream_t stream) override;
  std::uint64_t next_token_number(int self, int peer, bool sending) override;
  std::uint64_t* token_source(int from, int to, std::uint64_t number) override;
  const std::uint64_t* token_slot(int to, int from, std::uint64_t number) const override;
  std::string capture_refusal() const override;
  std::string per_process_refusal() const override { return capture_refusal(); }

 private:
  std::uint64_t* signal_word(int to, int from) const;
  fabric::Fabric& fabric_;
  int ranks_ = 0;
  std::uint64_t* words_ = nullptr;      // [to][from] signals, then the generation word
  std::uint64_t* tokens_ = nullptr;     // [to][from][kTokenRing] received, then
                                        // [from][to][kTokenRing] to send
  std::vector<std::int64_t> expected_;  // [to][from] signals waited for so far
  std::map<std::tuple<int, int, bool>, std::uint64_t> numbers_;
  std::mutex mutex_;
};

}  // namespace tide::testing
