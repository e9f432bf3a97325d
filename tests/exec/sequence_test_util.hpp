// Shared by the CUDA sequence runner's tests (cuda_sequence_test.cpp, failstop_test.cpp): the
// seed, random shapes, device buffers (mapped host memory for what the host reads while GPU
// queues are held), streams, the virtual fabric a sequence needs, and the gate that holds a
// rank back (CudaSequenceFaultInjection::gate_word).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "test_seed.hpp"
#include "tide/core/layout.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/fabric/virtual_fabric.hpp"
#include "tide/program/call_sequence.hpp"
#include "tide/testing/emulated_nodes.hpp"

namespace tide::sequence_testing {

using exec::CudaSequenceOptions;
using program::CallSequence;

inline constexpr std::int64_t kRegionOffset =
    8192;                             // the group's region is not at the arena's start
inline constexpr int kFirstWord = 3;  // nor its counters at word 0

// TIDE_TEST_SEED or a fresh seed (tests/support/test_seed.hpp); callers trace it.
inline std::uint64_t test_seed() {
  return tide::testing::pick_test_seed();
}

inline std::vector<ParamShape> odd_shapes(std::mt19937_64& rng, int count) {
  std::vector<ParamShape> shapes;
  for (int p = 0; p < count; ++p) {
    shapes.push_back(ParamShape{"p" + std::to_string(p), 1 + static_cast<std::int64_t>(rng() % 29),
                                1 + static_cast<std::int64_t>(rng() % 41)});
  }
  return shapes;
}

struct Topo {
  int nodes, gpus;
};

// A device allocation, or with `mapped` pinned host memory the GPU reaches through its
// mapping (the gate tests read it while GPU queues are held, without any GPU work).
class Dev {
 public:
  explicit Dev(std::size_t bytes, bool mapped = false) : bytes_(bytes), mapped_(mapped) {
    const std::size_t n = bytes == 0 ? 16 : bytes;
    if (mapped) {
      TIDE_CUDA_CHECK(cudaHostAlloc(&p_, n, cudaHostAllocMapped));
    } else {
      TIDE_CUDA_CHECK(cudaMalloc(&p_, n));
    }
  }
  ~Dev() { (void)(mapped_ ? cudaFreeHost(p_) : cudaFree(p_)); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void* get() const { return p_; }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host) {
    TIDE_CUDA_CHECK(cudaMemcpy(p_, host, bytes_, cudaMemcpyDefault));
  }
  void fill(unsigned char byte) {
    if (mapped_) {
      std::memset(p_, byte, bytes_);
    } else {
      TIDE_CUDA_CHECK(cudaMemset(p_, byte, bytes_));
    }
  }
  std::vector<std::byte> download() const {
    std::vector<std::byte> out(bytes_);
    TIDE_CUDA_CHECK(cudaMemcpy(out.data(), p_, bytes_, cudaMemcpyDefault));
    return out;
  }
  // Whether the bytes equal `want`, read by the host from mapped memory (no GPU work).
  bool equals(const std::vector<std::byte>& want) const {
    const auto* v = static_cast<const volatile std::byte*>(p_);
    if (want.size() != bytes_) return false;
    for (std::size_t i = 0; i < bytes_; ++i)
      if (v[i] != want[i]) return false;
    return true;
  }
  // Bytes other than `byte`, read by the host from mapped memory (no GPU work).
  std::size_t count_other_than(unsigned char byte) const {
    std::size_t n = 0;
    const auto* v = static_cast<const volatile unsigned char*>(p_);
    for (std::size_t i = 0; i < bytes_; ++i)
      n += v[i] != byte;
    return n;
  }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  bool mapped_ = false;
};

inline std::unique_ptr<fabric::VirtualFabric> fabric_for(const CallSequence& seq) {
  std::vector<program::BufferSizes> sizes;
  for (const program::BufferSizes& b : seq.templates[0].program.buffers) {
    program::BufferSizes s;
    s.arena_bytes = kRegionOffset + b.arena_bytes;  // tensors and outputs are the caller's
    sizes.push_back(s);
  }
  fabric::VirtualFabricOptions o;
  o.signal_words = seq.counters + kFirstWord + 2;
  return std::make_unique<fabric::VirtualFabric>(sizes, o);
}

// The runner's options in these tests, and where its messages go (tide/testing/
// emulated_nodes.hpp): with node_size > 0, ranks r, p with r / node_size != p / node_size are on
// different emulated nodes and their puts and signals travel as messages through the rendezvous
// transport; with one_sided too, through the loopback transport where every template plans
// (else two-sided, one_sided_refusal() says why).
struct SequenceTestOptions : CudaSequenceOptions {
  SequenceTestOptions() = default;
  SequenceTestOptions(const CudaSequenceOptions& o) : CudaSequenceOptions(o) {}  // NOLINT
  int node_size = 0;
  bool one_sided = false;
};

// The fabric a test's runner takes: `fabric` itself, or emulated nodes over it.
class TestFabric {
 public:
  TestFabric(fabric::Fabric& fabric, const SequenceTestOptions& options)
      : fabric_(fabric),
        nodes_(options.node_size > 0
                   ? std::make_unique<tide::testing::EmulatedNodesFabric>(fabric, options.node_size)
                   : nullptr),
        one_sided_(options.one_sided) {}
  fabric::Fabric& get() { return nodes_ ? *nodes_ : fabric_; }
  // {kRegionOffset, kFirstWord}, with fresh transports between emulated nodes.
  exec::CudaSequencePlace place() {
    exec::CudaSequencePlace p{kRegionOffset, kFirstWord};
    if (nodes_) p.messages = tide::testing::emulated_node_transports(fabric_, one_sided_);
    return p;
  }

 private:
  fabric::Fabric& fabric_;
  std::unique_ptr<tide::testing::EmulatedNodesFabric> nodes_;
  bool one_sided_ = false;
};

class Stream {
 public:
  Stream() { TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// Holds a rank back at the start of its calls while the word is 0. The word is mapped host
// memory: the host opens the gate with a store, through no GPU queue (streams aliased onto
// the held queues could not run a copy).
class Gate {
 public:
  Gate() : word_(8, true) { set(1); }
  const std::uint64_t* word() const { return static_cast<const std::uint64_t*>(word_.get()); }
  void set(std::uint64_t v) {
    *static_cast<volatile std::uint64_t*>(word_.get()) = v;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

 private:
  Dev word_;
};

// Options whose rank `rank` waits for `gate` at the start of every call.
inline CudaSequenceOptions gated(const Gate& gate, int rank) {
  CudaSequenceOptions o;
  o.fault_injection.gate_rank = rank;
  o.fault_injection.gate_word = gate.word();
  return o;
}

}  // namespace tide::sequence_testing
