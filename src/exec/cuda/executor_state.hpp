// The CUDA executor's internal state (NOTE [CUDA executor op mapping] in
// include/tide/exec/cuda_executor.hpp), shared by the files of src/exec/cuda/:
//   map_ops.cpp     every op resolved at construction: pointers, copies, pools, kernel args
//   schedule.cpp    the enqueue order (NOTE [enqueue order]) and message receives
//   enqueue.cpp     one op onto its stream(s)
//   completion.cpp  waiting with a timeout, draining, profiles, teardown
//   executor.cpp    the public CudaExecutor: construction, upload/download, run()
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "messages.hpp"
#include "program_checks.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/fabric/fabric.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"

namespace tide::exec {

namespace cuda_detail {

using Clock = std::chrono::steady_clock;
using program::OpKind;

struct CopyCall {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t width = 0, rows = 0, dpitch = 0, spitch = 0;
  bool flat = true;  // one cudaMemcpyAsync of width * rows bytes
};

// One op, resolved to device pointers and launch arguments at construction. The per-kind
// fields are those NOTE [CUDA op resolution] (op_resolution.hpp) fills, with fixed pointers.
struct Mapped {
  OpKind kind = OpKind::kRelease;
  int rank = 0;     // the rank whose device runs it (a message receive: the receiver)
  int stream = -1;  // index into State::streams (-1: no stream work)
  bool empty = false;
  std::vector<CopyCall> copies;  // kCopy, kRailPut
  // Counters (kSignal, kWait, kRailPut): the device word, and its host index
  // (rank * program.counters + id) into State::counters.totals.
  std::uint64_t* counter = nullptr;
  std::size_t counter_index = 0;
  std::uint64_t value = 0;
  // Events (kEventRecord, kEventWait): index into State::events.
  int event = -1;
  // kSum: the full launch (out, staged, alpha and gradients included).
  kernels::Level1SumArgs sum{};
  std::vector<const void*> gradients;
  std::unique_ptr<kernels::Level1SegmentTable> table;
  kernels::Level1Tuning tuning{};
  // kLand: the full launch.
  kernels::LandingArgs land{};
  // kSum, kLand, kCast, kZero: the destination; kSum: the first staged input; kCast: the
  // source, `elems` elements on `ctas` CTAs.
  std::byte* out = nullptr;
  std::byte* in = nullptr;
  std::int64_t elems = 0;
  int ctas = 0;
  // kZero.
  std::size_t zero_width = 0, zero_rows = 0, zero_pitch = 0;
  // Copy-engine pool (CudaExecutorOptions::copy_streams, NOTE [copy-engine pool]): lane of
  // each CopyCall (0: the op's own stream, j: pool stream j - 1 of the rank), the pool
  // streams used (indices into State::streams), the fork event and one join event per pool
  // stream used. Empty when the op's copies stay on its own stream.
  std::vector<int> lane;
  std::vector<int> pool;
  cudaEvent_t fork = nullptr;
  std::vector<cudaEvent_t> joins;
  // A put or signal to an unreachable rank (NOTE [rail messages]): the message and the
  // rank's rail stream (index into State::streams).
  std::unique_ptr<cuda_detail::Message> message;
  int rail = -1;

  Mapped() = default;
  Mapped(Mapped&&) = default;
  Mapped& operator=(Mapped&&) = default;
  ~Mapped() {
    if (message) cuda_detail::release_message(*message);
    if (fork != nullptr) (void)cudaEventDestroy(fork);
    for (cudaEvent_t e : joins)
      (void)cudaEventDestroy(e);
  }
};

// Whom a stream of State::streams serves: a program stream of a rank, or one of the streams
// the executor adds for a rank (its rail messages, its copy-engine pool).
struct StreamOwner {
  enum class Role : std::uint8_t { kProgram, kRailMessages, kCopyPool };
  int rank = 0;
  Role role = Role::kProgram;
  int name = 0;  // kProgram: index into Program::stream_names

  // CudaStreamSpan::stream: the name index; -1 for rail messages, -2 for the copy pool.
  int span_stream() const {
    switch (role) {
      case Role::kRailMessages:
        return -1;
      case Role::kCopyPool:
        return -2;
      case Role::kProgram:
        break;
    }
    return name;
  }
};

inline std::string cuda_status(cudaError_t s) {
  return std::string(cudaGetErrorName(s)) + " (" + cudaGetErrorString(s) + ")";
}

// Rethrows the exception in flight with `prefix` added to its message, keeping its type.
[[noreturn]] void rethrow_with(const std::string& prefix);

}  // namespace cuda_detail

using cuda_detail::Clock;
using cuda_detail::CopyCall;
using cuda_detail::cuda_status;
using cuda_detail::Mapped;
using cuda_detail::op_where;
using cuda_detail::StreamOwner;
using program::Buffer;
using program::Op;
using program::OpKind;
using program::Program;
using program::Region;

struct CudaExecutor::State {
  const Program& program;
  fabric::Fabric& fabric;
  CudaExecutorOptions options;
  std::vector<Mapped> ops;
  // Streams: one per used (rank, stream name).
  std::vector<cudaStream_t> streams;
  std::vector<StreamOwner> stream_owner;      // per stream
  int current_device = -1;                    // the device last made current here
  std::map<int, int> rail_stream;             // rank -> its rail stream (messages)
  std::map<int, std::vector<int>> copy_pool;  // rank -> its pool streams (NOTE [copy-engine pool])
  std::vector<Mapped> receives;               // the receiving side of messages to local ranks
  void* token = nullptr;                      // 8 device bytes: the payload of signal messages
  std::vector<cudaEvent_t> done;              // completion event per stream
  cudaStream_t control = nullptr;             // counter resets and read-backs
  // Events: one per recorded (rank, id); slot = rank * program.events + id.
  std::vector<cudaEvent_t> events;
  std::vector<int> event_index;  // slot -> index into events, or -1
  // The ranks this process runs (Fabric::local), and their signal words (the counters of
  // those ranks: program.counters words each, NOTE [fabric interface]).
  std::vector<int> local_ranks;
  // Epoch-based counters: every run adds totals[c] to counter c; `epoch` runs completed since
  // the last reset, so the next run waits for epoch * totals[c] + value.
  struct CounterEpochs {
    std::size_t words = 0;  // program.counters: signal words per rank
    std::vector<std::uint64_t> totals;
    std::uint64_t epoch = 0;
    bool dirty = false;  // forced high after a timeout: reset before the next run
  } counters;
  // Profiling (created on the first profiled run): two timing events per kernel op (indexed
  // like ops; null elsewhere) and per stream.
  struct ProfileEvents {
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> kernels;
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> streams;
  } profile_events;
  bool stuck = false;  // streams could not be drained: resources are kept, runs refused
  // The enqueue order: a legal serial schedule (NOTE [enqueue order]), then any ops it could
  // not place, in program order. An entry -(k + 1) is receives[k].
  std::vector<int> order;

  State(const Program& p, fabric::Fabric& f, const CudaExecutorOptions& o)
      : program(p), fabric(f), options(o) {}

  [[noreturn]] void rethrow_with_op(int i) const;

  ~State();

  // Makes `rank`'s device current (kernels and stream calls must run on their stream's device).
  void use_device_of(int rank) {
    const int d = rank < 0 ? fabric.device() : fabric.device_of(rank);
    if (d == current_device) return;
    TIDE_CUDA_CHECK(cudaSetDevice(d));
    current_device = d;
  }

  // The rank's rail stream (messages), created on first use.
  int rail_of(int rank);

  std::string stream_name(std::size_t i) const {
    switch (stream_owner[i].role) {
      case StreamOwner::Role::kRailMessages:
        return "rail messages";
      case StreamOwner::Role::kCopyPool:
        return "copy pool";
      case StreamOwner::Role::kProgram:
        break;
    }
    return program.stream_names[static_cast<std::size_t>(stream_owner[i].name)];
  }

  std::byte* at(const Region& r) const;

  std::size_t counter_index(const program::Counter& c) const {
    return static_cast<std::size_t>(c.rank) * counters.words + static_cast<std::size_t>(c.id);
  }

  std::uint64_t* counter(const program::Counter& c) const;

  // Writes `byte` into every signal word of the local ranks (synchronously, on each rank's
  // device).
  void fill_local_signals(unsigned char byte);

  std::size_t event_slot(int rank, int event) const {
    return static_cast<std::size_t>(rank) * static_cast<std::size_t>(program.events) +
           static_cast<std::size_t>(event);
  }

  // The rank's copy-engine pool streams, made on first use (see NOTE [copy-engine pool] in
  // map_ops.cpp).
  std::vector<int>& pool_of(int rank);

  void map_pool(const Op& op, Mapped& m);

  void map_op(const Op& op, Mapped& m, int stream);

  static bool is_kernel(OpKind k) {
    return k == OpKind::kSum || k == OpKind::kLand || k == OpKind::kCast;
  }

  // Creates the profiling events once.
  void make_profile_events();

  // Enqueues one op on its stream. Throws with the CUDA error; the caller adds the op.
  void enqueue(const Mapped& m, CudaRunResult& stats);

  void enqueue_copy(const CopyCall& c, cudaStream_t s, CudaRunResult& stats);

  // An op's copies dealt over its stream and pool streams (NOTE [copy-engine pool]).
  void enqueue_pooled(const Mapped& m, cudaStream_t own, CudaRunResult& stats);

  // Polls every stream's completion event until all completed or `timeout_s` passed. Returns
  // whether all completed; throws CudaError on an asynchronous fault.
  bool wait_all(double timeout_s, std::vector<bool>* complete) const;

  // Sets every counter to a huge value so every stream waiting on one proceeds, then waits
  // for the streams; marks the executor stuck (and releases the fabric) if they do not drain.
  void release_and_drain();

  // Computes `order`, a legal serial schedule (see NOTE [enqueue order] in schedule.cpp).
  void schedule();

  // Appends op i to `order` where this process runs it: the op itself on its local rank, and
  // the receiving side of a message to a local rank (NOTE [rail messages]).
  void place(int i);

  std::size_t totals_size() const {
    return std::max<std::size_t>(1, static_cast<std::size_t>(program.ranks) * counters.words);
  }

  // Reads the profiling events of a completed run into `stats`.
  void collect_profile(CudaRunResult& stats) const;

  std::string describe_timeout(double timeout_s, const std::vector<bool>& complete) const;
};

}  // namespace tide::exec
