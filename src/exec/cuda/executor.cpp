// The CUDA executor: maps every op of a Program onto CUDA streams, copy engines, stream memory
// operations, events and TIDE's kernels (NOTE [CUDA executor op mapping] in
// include/tide/exec/cuda_executor.hpp), enqueues a run, and waits for it with a timeout.
//
// Steps:
//   1. Construction: check_program(); resolve every region to device pointers on the fabric;
//      one non-blocking stream per used (rank, stream), one event per recorded (rank, event),
//      one counter array; a Level1SegmentTable per kSum (one synchronous upload each).
//   2. run(): enqueue every op in the order of NOTE [enqueue order] (event waits deferred
//      until their record is enqueued), waits offset by the run's counter epoch (no counter
//      reset on the hot path; NOTE [CUDA executor op mapping]); record one completion event
//      per stream. With CudaRunOptions::profile, timing events around kernels and streams.
//   3. Poll the completion events until all completed or the timeout; on a timeout name the
//      unsatisfied waits, release every wait so the streams drain, and throw (fail-stop).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <string>
#include <utility>

#include "cuda_driver.hpp"
#include "executor_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

namespace tide::exec {

using cuda_detail::rethrow_with;

// Rethrows the exception in flight with `prefix` added to its message, keeping its type.
[[noreturn]] void cuda_detail::rethrow_with(const std::string& prefix) {
  try {
    throw;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(prefix + e.what());
  } catch (const Unsupported& e) {
    throw Unsupported(prefix + e.what());
  } catch (const CudaError& e) {
    throw CudaError(prefix + e.what());
  } catch (const std::exception& e) {
    throw CudaError(prefix + e.what());
  }
}

void CudaExecutor::State::rethrow_with_op(int i) const {
  rethrow_with(op_where(program, i));
}

CudaExecutor::CudaExecutor(const Program& program, fabric::Fabric& fabric,
                           const CudaExecutorOptions& options)
    : state_(std::make_unique<State>(program, fabric, options)) {
  cuda_detail::check_program(program);
  if (options.copy_streams < 1 || options.copy_streams > 16) {
    throw InvalidArgument("CudaExecutor: copy_streams = " + std::to_string(options.copy_streams) +
                          " (need 1..16)");
  }
  if (fabric.ranks() != program.ranks) {
    throw InvalidArgument("CudaExecutor: the fabric has " + std::to_string(fabric.ranks()) +
                          " ranks, the program " + std::to_string(program.ranks) +
                          "; build the fabric from the program (VirtualFabric(program))");
  }
  if (fabric.signal_words() < program.counters) {
    throw InvalidArgument("CudaExecutor: the fabric has " + std::to_string(fabric.signal_words()) +
                          " signal words per rank, the program " +
                          std::to_string(program.counters) +
                          " counters; build the fabric from the program");
  }
  for (int r = 0; r < program.ranks; ++r) {
    if (!fabric.local(r)) continue;
    const program::BufferSizes& s = program.buffers[static_cast<std::size_t>(r)];
    auto too_small = [&](const Buffer& b, std::int64_t need) {
      if (fabric.bytes(b) < need) {
        throw InvalidArgument("CudaExecutor: the fabric's buffers of rank " + std::to_string(r) +
                              " are smaller than the program's; build the fabric from the program");
      }
    };
    too_small(Buffer{r, program::Space::kArena, 0}, s.arena_bytes);
    for (std::size_t i = 0; i < s.tensor_bytes.size(); ++i)
      too_small(Buffer{r, program::Space::kTensor, static_cast<int>(i)}, s.tensor_bytes[i]);
    for (std::size_t i = 0; i < s.output_bytes.size(); ++i)
      too_small(Buffer{r, program::Space::kOutput, static_cast<int>(i)}, s.output_bytes[i]);
  }

  State& st = *state_;
  st.use_device_of(-1);  // (rank -1: the fabric's first device) the control stream lives there
  (void)fabric::detail::driver();  // fail early when an entry point is missing
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&st.control, cudaStreamNonBlocking));

  st.counters.words = static_cast<std::size_t>(program.counters);
  for (int r = 0; r < program.ranks; ++r) {
    if (fabric.local(r)) st.local_ranks.push_back(r);
  }
  if (st.local_ranks.empty()) {
    throw InvalidArgument("CudaExecutor: the fabric runs none of the program's ranks here");
  }
  st.fill_local_signals(0);  // NOTE [fabric interface]: a barrier must follow across processes

  st.event_index.assign(
      static_cast<std::size_t>(program.ranks) * static_cast<std::size_t>(program.events), -1);
  std::map<std::pair<int, int>, int> stream_of;
  for (const Op& op : program.ops) {
    if (!fabric.local(op.rank)) continue;
    st.use_device_of(op.rank);  // its events and streams live on its device
    const auto* record = op.get_if<program::EventRecordOp>();
    if (record != nullptr && st.event_index[st.event_slot(op.rank, record->event)] < 0) {
      cudaEvent_t e = nullptr;
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      st.event_index[st.event_slot(op.rank, record->event)] = static_cast<int>(st.events.size());
      st.events.push_back(e);
    }
    const auto key = std::pair{op.rank, op.stream};
    if (stream_of.count(key) == 0) {
      cudaStream_t s = nullptr;
      TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      stream_of.emplace(key, static_cast<int>(st.streams.size()));
      st.streams.push_back(s);
      st.stream_owner.push_back({op.rank, StreamOwner::Role::kProgram, op.stream});
      cudaEvent_t e = nullptr;
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      st.done.push_back(e);
    }
  }
  st.ops.resize(program.ops.size());
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    if (!fabric.local(op.rank)) continue;  // another process runs it
    try {
      st.map_op(op, st.ops[i], stream_of.at(std::pair{op.rank, op.stream}));
    } catch (...) {
      rethrow_with(op_where(program, static_cast<int>(i)));
    }
  }
  st.schedule();
}

CudaExecutor::~CudaExecutor() = default;

const Program& CudaExecutor::program() const {
  return state_->program;
}

namespace {

void check_range(const fabric::Fabric& fabric, const Buffer& buffer, std::int64_t offset,
                 std::int64_t bytes, const char* who) {
  if (!fabric.local(buffer.rank)) {
    throw InvalidArgument(std::string("CudaExecutor::") + who + ": rank " +
                          std::to_string(buffer.rank) + " runs in another process");
  }
  const std::int64_t size = fabric.bytes(buffer);
  if (offset < 0 || bytes < 0 || offset + bytes > size) {
    throw InvalidArgument(std::string("CudaExecutor::") + who + ": bytes [" +
                          std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                          ") do not fit the buffer's " + std::to_string(size) + " bytes");
  }
}

}  // namespace

void CudaExecutor::upload(const Buffer& buffer, std::span<const std::byte> bytes,
                          std::int64_t offset) {
  const auto n = static_cast<std::int64_t>(bytes.size());
  check_range(state_->fabric, buffer, offset, n, "upload");
  if (n == 0) return;
  TIDE_CUDA_CHECK(cudaSetDevice(state_->fabric.device_of(buffer.rank)));
  state_->current_device = -1;
  TIDE_CUDA_CHECK(cudaMemcpy(static_cast<std::byte*>(state_->fabric.pointer(buffer)) + offset,
                             bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
}

void CudaExecutor::fill(const Buffer& buffer, std::byte value) {
  check_range(state_->fabric, buffer, 0, 0, "fill");
  const std::int64_t n = state_->fabric.bytes(buffer);
  if (n == 0) return;
  TIDE_CUDA_CHECK(cudaSetDevice(state_->fabric.device_of(buffer.rank)));
  state_->current_device = -1;
  TIDE_CUDA_CHECK(cudaMemset(state_->fabric.pointer(buffer), std::to_integer<int>(value),
                             static_cast<std::size_t>(n)));
}

std::vector<std::byte> CudaExecutor::download(const Buffer& buffer) {
  check_range(state_->fabric, buffer, 0, 0, "download");
  const std::int64_t n = state_->fabric.bytes(buffer);
  std::vector<std::byte> out(static_cast<std::size_t>(n));
  if (n == 0) return out;
  TIDE_CUDA_CHECK(cudaSetDevice(state_->fabric.device_of(buffer.rank)));
  state_->current_device = -1;
  TIDE_CUDA_CHECK(cudaMemcpy(out.data(), state_->fabric.pointer(buffer),
                             static_cast<std::size_t>(n), cudaMemcpyDeviceToHost));
  return out;
}

CudaRunResult CudaExecutor::run(const CudaRunOptions& options) {
  State& st = *state_;
  const Program& program = st.program;
  if (st.stuck) {
    throw CudaError(
        "CudaExecutor: an earlier run left streams that could not be drained; "
        "this executor (and its fabric) cannot run again: restart the process");
  }
  if (!(options.timeout_s > 0.0)) {
    throw InvalidArgument("CudaExecutor::run: timeout_s = " + std::to_string(options.timeout_s) +
                          " (need > 0)");
  }
  st.current_device = -1;  // the caller may have made another device current
  st.use_device_of(-1);
  CudaRunResult stats;
  // Every stream is idle here (the previous run completed or was drained). Counters hold
  // epoch x totals unless a timeout forced them high.
  if (st.counters.dirty) {
    st.fill_local_signals(0);
    st.counters.dirty = false;
    st.counters.epoch = 0;
    stats.counters_reset = true;
  }
  if (options.profile) st.make_profile_events();
  const Clock::time_point start = Clock::now();
  std::vector<bool> recorded(st.event_index.size(), false);
  std::vector<std::deque<int>> pending(st.streams.size());
  auto blocked = [&](int i) {
    const Op& op = program.ops[static_cast<std::size_t>(i)];
    const auto* wait = op.get_if<program::EventWaitOp>();
    return wait != nullptr && !recorded[st.event_slot(op.rank, wait->event)];
  };
  std::vector<bool> started;
  if (options.profile) started.assign(st.streams.size(), false);
  auto issue = [&](int i) {
    const Op& op = program.ops[static_cast<std::size_t>(i)];
    const Mapped& m = st.ops[static_cast<std::size_t>(i)];
    try {
      if (options.profile) {
        st.use_device_of(m.rank);
        cudaStream_t s = st.streams[static_cast<std::size_t>(m.stream)];
        if (!started[static_cast<std::size_t>(m.stream)]) {
          started[static_cast<std::size_t>(m.stream)] = true;
          TIDE_CUDA_CHECK(cudaEventRecord(
              st.profile_events.streams[static_cast<std::size_t>(m.stream)].first, s));
        }
        const auto& ke = st.profile_events.kernels[static_cast<std::size_t>(i)];
        if (ke.first != nullptr) TIDE_CUDA_CHECK(cudaEventRecord(ke.first, s));
        st.enqueue(m, stats);
        if (ke.second != nullptr) TIDE_CUDA_CHECK(cudaEventRecord(ke.second, s));
      } else {
        st.enqueue(m, stats);
      }
    } catch (...) {
      st.release_and_drain();
      rethrow_with(op_where(program, i));
    }
    const auto* record = op.get_if<program::EventRecordOp>();
    if (record != nullptr) recorded[st.event_slot(op.rank, record->event)] = true;
    return record != nullptr;
  };
  // Issues the heads of deferred streams while they are not blocked, until nothing moves.
  auto flush = [&]() {
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& q : pending) {
        while (!q.empty() && !blocked(q.front())) {
          moved = issue(q.front()) || moved;
          q.pop_front();
          ++stats.deferred_ops;
        }
      }
    }
  };
  for (const int index : st.order) {
    if (index < 0) {  // the receiving side of a message, on its rail stream
      try {
        st.enqueue(st.receives[static_cast<std::size_t>(-index - 1)], stats);
      } catch (...) {
        st.release_and_drain();
        rethrow_with("CudaExecutor: a message receive: ");
      }
      continue;
    }
    auto& q = pending[static_cast<std::size_t>(st.ops[static_cast<std::size_t>(index)].stream)];
    if ((!q.empty() || blocked(index)) && st.ops[static_cast<std::size_t>(index)].message) {
      // Messages must keep the global order (NOTE [rail messages]); a legal schedule never
      // defers an op, so this is a program the schedule could not place.
      st.release_and_drain();
      throw InvalidArgument(op_where(program, index) +
                            "a message op behind an unrecorded event: the program deadlocks");
    }
    if (!q.empty() || blocked(index)) {
      q.push_back(index);
      continue;
    }
    if (issue(index)) flush();
  }
  for (const auto& q : pending) {
    if (q.empty()) continue;
    const int i = q.front();
    st.release_and_drain();
    throw InvalidArgument(
        op_where(program, i) + "waits for event " +
        std::to_string(program.ops[static_cast<std::size_t>(i)].as<program::EventWaitOp>().event) +
        " whose record can only be enqueued after this wait completes (an "
        "event-wait cycle): the program deadlocks");
  }
  for (std::size_t i = 0; i < st.streams.size(); ++i) {
    st.use_device_of(st.stream_owner[i].rank);
    if (options.profile) {
      if (!started[i])
        TIDE_CUDA_CHECK(cudaEventRecord(st.profile_events.streams[i].first, st.streams[i]));
      TIDE_CUDA_CHECK(cudaEventRecord(st.profile_events.streams[i].second, st.streams[i]));
    }
    TIDE_CUDA_CHECK(cudaEventRecord(st.done[i], st.streams[i]));
  }
  stats.enqueue_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();

  std::vector<bool> complete;
  bool ok = false;
  try {
    ok = st.wait_all(options.timeout_s, &complete);
  } catch (...) {
    st.stuck = true;  // an asynchronous fault: the context is unusable
    st.fabric.release();
    throw;
  }
  if (!ok) {
    const std::string text = st.describe_timeout(options.timeout_s, complete);
    st.release_and_drain();
    throw ExecutionTimeout(text);
  }
  stats.wall_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  ++st.counters.epoch;
  if (options.profile) st.collect_profile(stats);
  return stats;
}

std::int64_t CudaExecutor::device_bytes() const {
  std::int64_t bytes = 0;
  for (const Mapped& m : state_->ops) {
    if (m.table != nullptr)
      bytes += static_cast<std::int64_t>(m.table->host_runs().size() * sizeof(kernels::Level1Run));
  }
  return bytes;
}

}  // namespace tide::exec
