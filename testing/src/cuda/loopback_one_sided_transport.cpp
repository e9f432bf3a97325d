// One-sided messages over the virtual fabric's pointers, for tests: NOTE [loopback one-sided
// transport] in tide/testing/loopback_one_sided_transport.hpp.
#include "tide/testing/loopback_one_sided_transport.hpp"

#include <string>

#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/signal/counter_add.hpp"
#include "tide/kernels/signal/generation_wait.hpp"

namespace tide::testing {

namespace {

std::size_t pair(int to, int from, int ranks) {
  return static_cast<std::size_t>(to) * static_cast<std::size_t>(ranks) +
         static_cast<std::size_t>(from);
}

}  // namespace

LoopbackOneSidedTransport::LoopbackOneSidedTransport(fabric::Fabric& fabric, int ranks)
    : fabric_(fabric), ranks_(ranks), expected_(pair(ranks, 0, ranks), 0) {
  TIDE_CUDA_CHECK(cudaSetDevice(fabric.device()));
  const std::size_t words = pair(ranks, 0, ranks) + 1;
  const std::size_t tokens = 2 * pair(ranks, 0, ranks) * kTokenRing;
  const cudaError_t a = cudaMalloc(reinterpret_cast<void**>(&words_), words * 8);
  const cudaError_t b = cudaMalloc(reinterpret_cast<void**>(&tokens_), tokens * 8);
  if (a != cudaSuccess || b != cudaSuccess) {
    (void)cudaFree(words_);
    (void)cudaFree(tokens_);
    TIDE_CUDA_CHECK(a != cudaSuccess ? a : b);
  }
  TIDE_CUDA_CHECK(cudaMemset(words_, 0, words * 8));
  TIDE_CUDA_CHECK(cudaMemset(tokens_, 0, tokens * 8));
}

LoopbackOneSidedTransport::~LoopbackOneSidedTransport() {
  (void)cudaFree(words_);
  (void)cudaFree(tokens_);
}

std::uint64_t* LoopbackOneSidedTransport::signal_word(int to, int from) const {
  return words_ + pair(to, from, ranks_);
}

void LoopbackOneSidedTransport::put_signal(int from, int to, const void* data, std::size_t bytes,
                                           std::int64_t window_offset, cudaStream_t stream) {
  auto* base =
      static_cast<std::byte*>(fabric_.pointer(program::Buffer{to, program::Space::kArena, 0}));
  if (base == nullptr || window_offset < 0 ||
      window_offset + static_cast<std::int64_t>(bytes) >
          fabric_.bytes(program::Buffer{to, program::Space::kArena, 0})) {
    throw InvalidArgument("LoopbackOneSidedTransport: a put of " + std::to_string(bytes) +
                          " bytes at " + std::to_string(window_offset) +
                          " leaves the arena of rank " + std::to_string(to));
  }
  const auto* source = static_cast<const std::byte*>(
      fabric_.pointer(program::Buffer{from, program::Space::kArena, 0}));
  const auto* at = static_cast<const std::byte*>(data);
  const std::int64_t source_bytes = fabric_.bytes(program::Buffer{from, program::Space::kArena, 0});
  if (source == nullptr || at < source || at > source + source_bytes ||
      static_cast<std::int64_t>(bytes) > source + source_bytes - at) {
    throw InternalError("LoopbackOneSidedTransport: a put of " + std::to_string(bytes) +
                        " bytes reads outside the arena of rank " + std::to_string(from) +
                        " (NCCL puts only from a registered window)");
  }
  TIDE_CUDA_CHECK(
      cudaMemcpyAsync(base + window_offset, data, bytes, cudaMemcpyDeviceToDevice, stream));
  kernels::launch_counter_add(signal_word(to, from), 1, stream);
}

void LoopbackOneSidedTransport::put_token(int from, int to, const std::uint64_t* token,
                                          std::uint64_t number, cudaStream_t stream) {
  if (token != token_source(from, to, number)) {
    throw InternalError(
        "LoopbackOneSidedTransport: a token put from outside its send slot "
        "(NCCL puts only from a registered window)");
  }
  auto* slot = const_cast<std::uint64_t*>(token_slot(to, from, number));
  TIDE_CUDA_CHECK(cudaMemcpyAsync(slot, token, 8, cudaMemcpyDeviceToDevice, stream));
  kernels::launch_counter_add(signal_word(to, from), 1, stream);
}

void LoopbackOneSidedTransport::wait_signals(int to, int from, int count, cudaStream_t stream) {
  std::int64_t total = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    total = expected_[pair(to, from, ranks_)] += count;
  }
  const kernels::GenerationWait wait{signal_word(to, from), total, 0};
  kernels::launch_generation_waits({&wait, 1}, words_ + pair(ranks_, 0, ranks_), stream);
}

std::uint64_t LoopbackOneSidedTransport::next_token_number(int self, int peer, bool sending) {
  const std::lock_guard<std::mutex> lock(mutex_);
  return ++numbers_[{self, peer, sending}];
}

std::uint64_t* LoopbackOneSidedTransport::token_source(int from, int to, std::uint64_t number) {
  return tokens_ + (pair(ranks_, 0, ranks_) + pair(from, to, ranks_)) * kTokenRing +
         number % kTokenRing;
}

const std::uint64_t* LoopbackOneSidedTransport::token_slot(int to, int from,
                                                           std::uint64_t number) const {
  return tokens_ + pair(to, from, ranks_) * kTokenRing + number % kTokenRing;
}

std::string LoopbackOneSidedTransport::capture_refusal() const {
  return "its test messages are one-sided loopback puts whose waits the host counts (NOTE "
         "[loopback one-sided transport]), like the NCCL transport's not capturable";
}

}  // namespace tide::testing
