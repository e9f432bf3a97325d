// The CUDA executor (architecture: exec/cuda): runs a Program's ops of the ranks the fabric
// calls local on GPUs, bitwise equal to the CPU reference executor (invariant 1). It is the
// one-shot face of the CUDA sequence runner: a call sequence of period 1 with buffers bound at
// construction (NOTE [one-shot programs] in src/exec/cuda/executor.cpp; use: docs/executor.md).
// Contract (NOTE [CUDA executor op mapping] in docs/executor.md): construction
// validates the program, resolves every pointer, table and kernel argument and zeroes the local
// counters (no metadata copies at run time). run() enqueues one run and waits up to the
// timeout; on a timeout it names every unsatisfied wait, releases the waits so the streams
// drain, and throws ExecutionTimeout (undrained: it keeps its resources and refuses further
// runs). upload(), fill() and download() are synchronous.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/program/program.hpp"
#include "tide/transport/message_transport.hpp"

namespace tide::exec {

// A run did not complete within its timeout; the message names the unsatisfied waits.
class ExecutionTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CudaExecutorOptions {
  // Streams per rank a copy op's descriptors are dealt over, 1..16 (NOTE [copy-engine pool]).
  int copy_streams = 1;
  // Fresh message transports per runner, for ranks that are not load/store reachable.
  std::function<transport::MessageTransports()> messages = {};
};

struct CudaRunOptions {
  double timeout_s = 60.0;  // per run, from the first enqueue; > 0
  // Timing events around every kernel op and at each stream's head and tail (kernels_timed,
  // streams); two event records per kernel and stream: leave off when timing enqueue.
  bool profile = false;
};

// One kernel op of a profiled run.
struct CudaKernelTiming {
  int op = 0;  // index into Program::ops
  int rank = 0;
  program::OpKind kind = program::OpKind::kSum;
  int ctas = 0;     // the op's CTA budget (kCast 0: the launcher's 4 per SM)
  double ms = 0.0;  // event before the launch to event after it, on its stream
};

// One stream of a profiled run: its head and tail events, in ms after the earliest head.
struct CudaStreamSpan {
  int rank = 0;
  int stream = 0;  // index into Program::stream_names; -1 rail messages, -2 copy pool
  double begin_ms = 0.0;
  double end_ms = 0.0;
};

struct CudaRunResult {
  double enqueue_us = 0.0;        // host time to enqueue every op (and the completion events)
  double wall_us = 0.0;           // first enqueue to observed completion (polling granularity)
  std::int64_t copies = 0;        // non-empty copy descriptors issued (message parts included)
  std::int64_t copy_calls = 0;    // copy API calls: cudaMemcpyAsync, cudaMemcpy2DAsync
  std::int64_t kernels = 0;       // kernel launches (sum, land, cast, fused counter additions)
  std::int64_t memops = 0;        // stream memory operations (the fused waits' terms)
  std::int64_t deferred_ops = 0;  // ops enqueued after a later op (behind an event wait)
  bool counters_reset = false;    // this run reset the counters synchronously (after a timeout)
  // Only with CudaRunOptions::profile.
  std::vector<CudaKernelTiming> kernels_timed;
  std::vector<CudaStreamSpan> streams;
};

class CudaExecutor {
 public:
  // `program` and `fabric` (sized for it) outlive the executor. Errors name the op.
  CudaExecutor(const program::Program& program, fabric::Fabric& fabric,
               const CudaExecutorOptions& options = {});
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  // The checks before any GPU work: ids, regions, copy geometry, kernel shapes, events.
  // tide::InvalidArgument (malformed) or tide::Unsupported (not mappable), naming the op.
  static void check(const program::Program& program);

  // Writes `bytes` at `offset`; InvalidArgument when the range does not fit.
  void upload(const program::Buffer& buffer, std::span<const std::byte> bytes,
              std::int64_t offset = 0);
  // Sets every byte of a buffer to `value` (poisoning outputs before a run).
  void fill(const program::Buffer& buffer, std::byte value);
  // A buffer's bytes (after run()).
  std::vector<std::byte> download(const program::Buffer& buffer);

  // Runs the program once; repeatable. ExecutionTimeout, tide::CudaError naming the op, or
  // InvalidArgument for an event-wait cycle.
  CudaRunResult run(const CudaRunOptions& options = {});

  const program::Program& program() const;
  // CudaSequenceRunner::message_path(); empty without messages or runner.
  std::string message_path() const;
  // Device bytes of the Level 1 segment tables (counters are the fabric's).
  std::int64_t device_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::exec
