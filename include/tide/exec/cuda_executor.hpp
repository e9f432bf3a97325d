// The CUDA executor (architecture: exec/cuda): runs a Program on a GPU
// through a fabric, with copy engines, stream memory operations, events and TIDE's kernels.
// It runs the ops of the ranks the fabric calls local: all N on the virtual fabric (N ranks
// on one GPU), this process's rank on the NCCL fabric (one process per GPU; the other
// processes run theirs). Its outputs are bitwise equal to the CPU reference executor's
// (invariant 1 of the architecture note).
//
// Use:
//   fabric::VirtualFabric fab(program);             // allocates every rank's buffers
//   CudaExecutor ex(program, fab);                  // validates, builds tables, streams, events
//   ex.upload(Buffer{0, Space::kTensor, 1}, bytes); // inputs (and poison, with fill())
//   CudaRunResult r = ex.run();                     // enqueues everything, waits with a timeout
//   std::vector<std::byte> out = ex.download(Buffer{0, Space::kOutput, 0});
//
// One executor: CudaExecutor is the one-shot face of the CUDA sequence runner
// (cuda_sequence.hpp). It runs its Program as a call sequence of period 1 whose buffers are
// bound at construction (NOTE [one-shot programs] in src/exec/cuda/executor.cpp), so a
// program, a group's calls and the runtime share one mapping, one enqueue path, one copy-engine
// pool, one rail-message path and one watch.
//
// NOTE [CUDA executor op mapping]
// Streams: one non-blocking cudaStream_t per (rank, stream name) that has ops, plus per rank a
// rail stream (messages) and the copy-engine pool's streams. One host thread enqueues every op
// of every stream; CUDA stream order and device-side waits give NOTE [reference execution
// semantics]'s order. The enqueue order is a legal serial schedule computed at construction
// (NOTE [enqueue order] in src/exec/cuda/enqueue_order.hpp: streams alias onto a few in-order
// hardware queues, so a wait must never be submitted before the signal it needs), followed by
// any op it could not place, in program order, event waits deferred behind their records. A
// fusion pass then joins consecutive waits and consecutive counter additions of one stream
// (NOTE [CUDA call sequences] 1); bits do not change.
//   kCopy        each descriptor is one cudaMemcpyAsync (1-D) or cudaMemcpy2DAsync (2-D), in
//                descriptor order, device to device, on copy engines. (One
//                cudaMemcpyBatchAsync per op measured slower to enqueue on the H200:
//                bench/results/executor/README.md.) With copy_streams > 1 the
//                per-descriptor calls of one op are dealt over a small pool of streams
//                (Sec. 6.2; NOTE [copy-engine pool] in src/exec/cuda/sequence_copy_pool.cpp).
//   kRailPut     its copies as kCopy, then the counter addition on the destination rank, both
//                on the sender's stream (the addition follows the write in stream order). To a
//                rank this process cannot address: a two-sided message (NOTE [rail messages]).
//   kSignal      counter += value by a 1-thread kernel (__threadfence_system();
//                atomicAdd_system), launched on the signalling stream. Why a kernel:
//                cuStreamWriteValue64 writes a value, it cannot add, and several streams and
//                ranks add to one counter in an order fixed only at run time, so no
//                enqueue-time cumulative value is valid.
//   kWait        a batch of WAIT_VALUE_64 (GEQ) stream memory operations: the stream's front
//                end waits on device memory (no SM, no host polling).
//   Counters     64-bit, the fabric's signal words (NOTE [fabric interface]): counter id c of
//                rank r is word c of Fabric::signals(r), so a peer process adds to it
//                through its load/store mapping. The local ranks' words are zeroed at
//                construction and never reset on the hot path: counters are epoch-based.
//                A run adds the same total T_c to counter c every time, so run k (0-based
//                since the last reset) starts with counter c == k T_c and waits for
//                k T_c + value. Only after a timeout (counters forced high to drain) does the
//                next run reset them synchronously.
//   kEventRecord / kEventWait   cudaEventRecord / cudaStreamWaitEvent on one cudaEvent_t
//                per (rank, event id) (timing disabled).
//   kSum         launch_level1_sum with a Level1SegmentTable built at construction from the
//                op's segments (tensor indices renumbered per op, gradient pointers passed as
//                kernel parameters); the L - 1 staged regions must sit in one buffer with one
//                pitch and a uniform stride (they do in TIDE-RS); recommended_level1_tuning.
//   kLand        launch_landing, the wave's sources as partial pointers (peer arenas).
//   kCast        launch_cast_fp32_to_bf16.
//   kZero        cudaMemsetAsync (1-D) or cudaMemset2DAsync.
//   kRelease     nothing: a marker (the allocator-visible release is the caller's business).
// No op copies metadata host to device at run time: pointers, tables and kernel arguments
// are resolved at construction.
// Completion: the run's call records a completion event on the executor's stream, polled
// until it completed or the timeout passed. On a timeout (fail-stop, Sec. 7.5) the runner's
// watch reads the counters and names every wait whose counter is still below its threshold,
// every wait is then released so every stream drains, and run() throws ExecutionTimeout.
// Should the streams not drain either, the executor keeps its resources (and releases the
// fabric's) instead of freeing memory in use, and refuses further runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/program/program.hpp"

namespace tide::exec {

// A run did not complete within its timeout; the message names the unsatisfied waits.
class ExecutionTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CudaExecutorOptions {
  // Streams a copy op's descriptors are dealt over: its own and copy_streams - 1 pool streams
  // per rank (Sec. 6.2; NOTE [copy-engine pool] in src/exec/cuda/sequence_copy_pool.cpp). 1:
  // every copy on its op's stream. 1..16.
  int copy_streams = 1;
};

struct CudaRunOptions {
  double timeout_s = 60.0;  // per run, from the first enqueue; > 0
  // Timing events around every kernel op (kSum, kLand, kCast) and at the head and tail of
  // every stream; the result then carries CudaRunResult::kernels_timed and stream spans.
  // Adds two event records per kernel and per stream: leave off when timing enqueue.
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

  // Runs the whole program once; repeatable. Throws ExecutionTimeout (see the NOTE),
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
