// The CPU reference executor (architecture: exec/reference): runs every rank's ops of a Program in
// one process as a deterministic discrete-event simulation, with real data, seeded interleavings,
// race and deadlock detection, and the cost model's times (use: docs/reference_executor.md).
// Contract (NOTE [reference execution semantics] in docs/reference_executor.md):
// - Buffers start as poison (0xFF); input() marks bytes as written before every op.
// - Ops of one (rank, stream) run in list order; waits and event waits complete once met; data
//   effects and counter additions apply atomically at an op's completion. One seed is fully
//   deterministic; other seeds and jitter explore other legal interleavings.
// - Races, reads of unwritten, released or stale bytes, deadlocks, unsatisfiable waits,
//   malformed ops and call-order mismatches are collected in RunResult::errors, never thrown.
// - Arithmetic follows NOTE [arithmetic order] (tide/core/arithmetic.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tide/exec/cost_model.hpp"
#include "tide/program/program.hpp"

namespace tide::exec {

enum class ErrorKind : std::uint8_t {
  kUnorderedRead,      // read of bytes whose last writer does not happen before the reader
  kUnwrittenRead,      // read of bytes never written
  kReleasedRead,       // read of bytes released (freed) earlier
  kConsumedRead,       // a landing sums a partial an earlier landing summed, not rewritten since
  kUnorderedWrite,     // write over bytes still to be read, or whose last write is unordered
  kDeadlock,           // ops left, none can proceed (one per blocked stream head)
  kUnsatisfiableWait,  // static: a wait that can never be satisfied
  kInvalidOp,          // static: a malformed op (bounds, geometry, counter or event ids)
  kCallOrderMismatch,  // static: ranks issue different calls at one position of their sequences
};
inline constexpr int kErrorKinds = 9;

std::string_view error_kind_name(ErrorKind kind);

struct ExecError {
  ErrorKind kind = ErrorKind::kInvalidOp;
  int op = -1;             // index into Program::ops
  int other_op = -1;       // the conflicting op (writer, reader, event record), or -1
  int rank = 0;            // the rank of `op`
  program::Buffer buffer;  // memory errors: the buffer and byte range [begin, end)
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::string message;  // one line naming the ops (labels, ranks, streams) and the bytes
};

struct RunOptions {
  std::uint64_t seed = 0;
  // Each op's duration times a factor uniform in [1 - jitter, 1 + jitter], 0 <= jitter < 1.
  double jitter = 0.0;
  int max_errors = 64;  // kept in RunResult::errors (error_count counts all)
  CostModel cost;
  bool record_times = true;  // keep RunResult::op_times (for traces)
  // Called every `progress_every` completed ops with (done, total).
  std::function<void(std::int64_t done, std::int64_t total)> progress;
  std::int64_t progress_every = std::int64_t{1} << 14;
};

struct OpTime {
  double start_us = -1.0;  // -1: never started
  double end_us = -1.0;    // -1: never completed
};

struct RunResult {
  bool completed = false;  // every op ran (but those with no valid rank and stream)
  bool deadlock = false;
  std::int64_t ops_run = 0;
  std::vector<ExecError> errors;                         // the first max_errors, in the order found
  std::int64_t error_count = 0;                          // all errors found
  std::array<std::int64_t, kErrorKinds> error_counts{};  // all errors found, by kind
  // Simulated time of the last completion; sum over SM ops of max(1, ctas) * duration (CTA-us).
  double makespan_us = 0.0;
  double sm_time_us = 0.0;
  // The largest, over ranks, of arena + output bytes plus the peak of its live per-parameter
  // tensor bytes (every output counts at once: for a step, the calls added up, not a peak).
  std::int64_t peak_buffer_bytes = 0;
  std::vector<OpTime> op_times;  // per Program::ops index, when record_times

  bool clean() const { return completed && error_count == 0; }
  std::int64_t count(ErrorKind kind) const {  // all errors of that kind found
    return error_counts[static_cast<std::size_t>(kind)];
  }
};

struct ExecutorOptions {
  // Only the schedule, counters, events and times (512 ranks with production shapes).
  bool timing_only = false;
};

class ReferenceExecutor {
 public:
  // `program` must outlive the executor. Allocates every rank's buffers unless timing-only.
  explicit ReferenceExecutor(const program::Program& program, ExecutorOptions options = {});
  ~ReferenceExecutor();
  ReferenceExecutor(const ReferenceExecutor&) = delete;
  ReferenceExecutor& operator=(const ReferenceExecutor&) = delete;

  // A buffer's bytes (outputs after run); writes through it do not mark bytes set (input()).
  // InvalidArgument for an unknown buffer or in timing-only mode.
  std::span<std::byte> memory(const program::Buffer& buffer);
  // Marks [offset, offset + bytes) (bytes < 0: to the end) as set before the run; returns it.
  std::span<std::byte> input(const program::Buffer& buffer, std::int64_t offset = 0,
                             std::int64_t bytes = -1);

  // Runs the program: once with data (then InvalidArgument); timing-only runs may repeat.
  RunResult run(const RunOptions& options = {});

  const program::Program& program() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A Chrome trace of a run (Perfetto, chrome://tracing): a process per rank, a thread per
// stream, an event per op that ran; ranks >= max_ranks left out (< 0: none).
void write_chrome_trace(std::ostream& out, const program::Program& program, const RunResult& result,
                        int max_ranks = -1);
void write_chrome_trace_file(const std::string& path, const program::Program& program,
                             const RunResult& result, int max_ranks = -1);

// An SVG timeline of a run: a lane per (rank, stream) of the first `max_ranks` ranks.
void write_timeline_svg(std::ostream& out, const program::Program& program, const RunResult& result,
                        int max_ranks = 8);
void write_timeline_svg_file(const std::string& path, const program::Program& program,
                             const RunResult& result, int max_ranks = 8);

}  // namespace tide::exec
