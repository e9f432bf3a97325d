// The CUDA executor (architecture: exec/cuda): runs a Program's ops of the ranks the fabric
// calls local on GPUs, bitwise equal to the CPU reference executor (invariant 1). It is the
// one-shot face of the CUDA sequence runner: a call sequence of period 1 with buffers bound at
// construction (NOTE [one-shot programs] in src/exec/cuda/executor.cpp; use: docs/executor.md).
//
// Contract (how each op maps to CUDA: NOTE [CUDA executor op mapping] in docs/executor.md):
// - Construction validates the program, resolves every pointer, table and kernel argument and
//   zeroes the local ranks' counters; no op copies metadata host to device at run time.
// - run() enqueues one run and waits for it on the host, up to the timeout. On a timeout
//   (fail-stop) it names every unsatisfied wait, releases the waits so the streams drain, and
//   throws ExecutionTimeout; should they not drain, the executor keeps its resources and
//   refuses further runs.
// - upload(), fill() and download() are synchronous.
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
  // Where some ranks are not load/store reachable: the message transports of each runner the
  // executor builds (CudaSequencePlace::messages; fresh ones per runner, as a released
  // transport stays released). Empty: none.
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
  int ctas = 0;     // the op's CTA budget (the launched grid is at most this; kCast: 0 is
                    // the launcher's default of 4 per SM)
  double ms = 0.0;  // timing event before the launch to timing event after it, same stream
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
  // `program` and `fabric` must outlive the executor; the fabric must have been sized for the
  // program (same ranks, buffers at least as large). Validates the program (as check()
  // does), then creates streams, events, counters and Level 1 tables. Errors name the op.
  CudaExecutor(const program::Program& program, fabric::Fabric& fabric,
               const CudaExecutorOptions& options = {});
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  // Everything the executor checks about a program before touching a GPU: ids and regions
  // in range, copy geometry, the kernel ops' shapes (what launch_level1_sum, launch_landing
  // and launch_cast_fp32_to_bf16 accept), events recorded once and waited only where
  // recorded. Throws tide::InvalidArgument (malformed) or tide::Unsupported (well formed but
  // not mappable yet), naming the op.
  static void check(const program::Program& program);

  // Writes `bytes` into a buffer at `offset` (synchronous). Throws InvalidArgument when the
  // range does not fit.
  void upload(const program::Buffer& buffer, std::span<const std::byte> bytes,
              std::int64_t offset = 0);
  // Sets every byte of a buffer to `value` (synchronous; poisoning outputs before a run).
  void fill(const program::Buffer& buffer, std::byte value);
  // A buffer's bytes (synchronous; call after run()).
  std::vector<std::byte> download(const program::Buffer& buffer);

  // Runs the whole program once; repeatable. Throws ExecutionTimeout (above),
  // tide::CudaError naming the op whose call failed, or InvalidArgument for an event-wait
  // cycle.
  CudaRunResult run(const CudaRunOptions& options = {});

  const program::Program& program() const;
  // How the program's rail messages travel (CudaSequenceRunner::message_path(): "two-sided",
  // "one-sided", ...; empty without messages, or while no runner exists after a timeout).
  std::string message_path() const;
  // Device bytes of the Level 1 segment tables the executor holds (the counters are the
  // fabric's signal words; the runner's few words of its own are not counted).
  std::int64_t device_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::exec
