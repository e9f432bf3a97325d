// CudaExecutor: a Program run once per run() on the one CUDA executor, the sequence runner, as a
// call sequence of period 1 (NOTE [one-shot programs]).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "program_checks.hpp"
#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/kernels/signal/counter_add.hpp"
#include "tide/program/legal_order.hpp"

namespace tide::exec {

// NOTE [one-shot programs]
// Paper Sec. 6 (everything resolved at construction, nothing copied host to device per run),
// Sec. 7.5 (fail-stop). A one-shot program is a call sequence of period 1 (NOTE [call
// sequences]): its one template is the program itself, whose wait thresholds are already
// those of a call that starts from zero, and every run adds the same total T_c to counter c,
// so run k waits for k T_c + value (the counter epochs of NOTE [CUDA executor op mapping]).
// CudaExecutor builds that sequence and runs it on the sequence runner, the one CUDA executor,
// whose mapping, fusion, copy-engine pool, rail messages and watch it shares. The runner's
// one-shot mode differs from a group's calls only where a Program is not a call template:
//   - kTensor and kOutput regions are the fabric's buffers, resolved at construction (a call
//     binds nothing);
//   - kSum and kLand keep the program's alpha and accumulate (a call template's are per call);
//   - ops no legal order reaches (a wait never satisfied) follow in program order, event waits
//     deferred behind their records (NOTE [enqueue order]), so that a timeout names them;
//   - every call takes the stream path: no slot graphs, no claim on the graph wait budget.
// Steps of run():
//   1. after a timeout, a fresh runner: its construction zeroes the local ranks' signal words
//      (CudaRunResult::counters_reset; across processes a barrier must follow, NOTE [fabric
//      interface]);
//   2. one call on the executor's caller stream, a blocking stream on the first local rank's
//      device (so it follows the synchronous upload(), fill() and any legacy-stream work),
//      then a completion event on that stream;
//   3. the event polled until it completes or the timeout passes; an asynchronous CUDA error
//      leaves the executor stuck;
//   4. on a timeout: the runner's watch names the unsatisfied waits, release_waits() lets every
//      stream drain (bounded by kDrainTimeout), the runner goes (step 1 builds the next), and
//      run() throws ExecutionTimeout. Streams that do not drain (a message receive whose send
//      never comes) leave the executor stuck: it keeps its resources, releases the fabric and
//      refuses further runs.

namespace {

using Clock = std::chrono::steady_clock;
using program::Buffer;
using program::OpKind;
using program::Program;
using sequence_detail::SeqOp;

// How long a drain after a timeout or a failed enqueue may take before the executor gives its
// streams up as stuck.
constexpr double kDrainTimeoutS = 10.0;

std::string cuda_status(cudaError_t s) {
  return std::string(cudaGetErrorName(s)) + " (" + cudaGetErrorString(s) + ")";
}

// The period-1 sequence of a program (NOTE [one-shot programs]).
program::CallSequence one_shot_sequence(const Program& program) {
  program::CallTemplate t;
  t.program = program;
  t.event_age.assign(program.ops.size(), 0);
  t.additions = program::counter_additions(program);
  t.additions.resize(
      static_cast<std::size_t>(program.ranks) * static_cast<std::size_t>(program.counters), 0);
  t.order = program::legal_order(program);
  program::CallSequence s;
  s.templates.push_back(std::move(t));
  s.period = 1;
  s.counters = program.counters;
  s.events_per_call = program.events;
  s.max_event_age = 0;
  return s;
}

void check_fabric(const Program& program, const fabric::Fabric& fabric) {
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
  bool any = false;
  for (int r = 0; r < program.ranks; ++r) {
    if (!fabric.local(r)) continue;
    any = true;
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
  if (!any) throw InvalidArgument("CudaExecutor: the fabric runs none of the program's ranks here");
}

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

struct CudaExecutor::State {
  const Program& program;
  fabric::Fabric& fabric;
  CudaExecutorOptions options;
  program::CallSequence sequence;              // period 1: the program (NOTE [one-shot programs])
  std::unique_ptr<CudaSequenceRunner> runner;  // null after a timeout until the next run
  std::vector<CudaCallBindings> bindings;      // one per rank, empty: the buffers are bound
  int device = 0;                              // the first local rank's: the caller's device
  cudaStream_t caller = nullptr;
  cudaEvent_t done = nullptr;
  CudaRunResult counts;  // what every run enqueues (from the mapped ops)
  bool stuck = false;    // streams could not be drained: resources kept, runs refused

  State(const Program& p, fabric::Fabric& f, const CudaExecutorOptions& o)
      : program(p), fabric(f), options(o) {}
  ~State() {
    if (stuck) {
      (void)runner.release();  // its streams still run: freeing their memory would hang
      return;
    }
    runner.reset();
    if (done != nullptr) (void)cudaEventDestroy(done);
    if (caller != nullptr) (void)cudaStreamDestroy(caller);
  }

  void make_runner() {
    CudaSequenceOptions o;
    o.replay_graphs = false;
    o.copy_streams = options.copy_streams;
    CudaSequencePlace place;
    if (options.messages) place.messages = options.messages();
    runner.reset(new CudaSequenceRunner(sequence, fabric, place, o, CudaSequenceRunner::OneShot{}));
  }
  CudaSequenceRunner::State& inner() const { return *runner->state_; }

  // Polls `done` until it completed or `timeout_s` passed. Throws CudaError on an asynchronous
  // fault.
  bool wait(double timeout_s) const {
    const Clock::time_point start = Clock::now();
    for (;;) {
      const cudaError_t s = cudaEventQuery(done);
      if (s == cudaSuccess) return true;
      if (s != cudaErrorNotReady) {
        (void)cudaGetLastError();
        throw CudaError("CudaExecutor: the run failed on the device: " + cuda_status(s));
      }
      if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Step 4 of NOTE [one-shot programs]: release every wait, drain, drop the runner (or stick).
  void release_and_drain() {
    bool drained = false;
    try {
      runner->release_waits();
      drained = wait(kDrainTimeoutS) && runner->idle();
    } catch (const std::exception&) {
      drained = false;
    }
    if (drained) {
      runner.reset();
    } else {
      stuck = true;
      fabric.release();
    }
  }

  void count_ops();
  void collect_profile(CudaRunResult& r) const;
};

CudaExecutor::CudaExecutor(const Program& program, fabric::Fabric& fabric,
                           const CudaExecutorOptions& options)
    : state_(std::make_unique<State>(program, fabric, options)) {
  if (options.copy_streams < 1 || options.copy_streams > 16) {
    throw InvalidArgument("CudaExecutor: copy_streams = " + std::to_string(options.copy_streams) +
                          " (need 1..16)");
  }
  cuda_detail::check_program(program);
  check_fabric(program, fabric);
  State& st = *state_;
  st.sequence = one_shot_sequence(program);
  st.bindings.resize(static_cast<std::size_t>(program.ranks));
  for (int r = 0; r < program.ranks; ++r) {
    if (fabric.local(r)) {
      st.device = fabric.device_of(r);
      break;
    }
  }
  TIDE_CUDA_CHECK(cudaSetDevice(st.device));
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&st.caller, cudaStreamDefault));
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
  st.make_runner();
  st.count_ops();
}

CudaExecutor::~CudaExecutor() = default;

const Program& CudaExecutor::program() const {
  return state_->program;
}

// What every run enqueues, from the runner's mapped (fused) ops.
void CudaExecutor::State::count_ops() {
  const sequence_detail::Template& t = inner().mapping.templates[0];
  counts.deferred_ops = t.deferred;
  for (const SeqOp& m : t.ops) {
    if (m.empty) continue;
    if (m.message) {
      counts.copies += static_cast<std::int64_t>(m.message->parts.size());
      continue;
    }
    switch (m.kind) {
      case OpKind::kCopy:
      case OpKind::kRailPut:
        counts.copies += static_cast<std::int64_t>(m.copies.size());
        counts.copy_calls += static_cast<std::int64_t>(m.copies.size());
        if (m.kind == OpKind::kRailPut) ++counts.kernels;
        break;
      case OpKind::kSignal: {
        const auto per = static_cast<std::int64_t>(kernels::kMaxCounterAddsPerLaunch);
        const auto adds = static_cast<std::int64_t>(m.adds.size());
        counts.kernels += m.adds.empty() ? 1 : (adds + per - 1) / per;
        break;
      }
      case OpKind::kWait:
        counts.memops += static_cast<std::int64_t>(std::max<std::size_t>(1, m.waits.size()));
        break;
      case OpKind::kSum:
      case OpKind::kLand:
      case OpKind::kCast:
        ++counts.kernels;
        break;
      default:
        break;
    }
  }
}

// The timing events of a completed profiled run (sequence_profile.cpp) into `r`. Times
// between events are only defined on one device: each stream's span is measured from the
// earliest stream head of its device.
void CudaExecutor::State::collect_profile(CudaRunResult& r) const {
  const CudaSequenceRunner::State& s = inner();
  const sequence_detail::Template& t = s.mapping.templates[0];
  std::map<int, cudaEvent_t> origin;  // device -> earliest head
  for (const int i : t.streams) {
    const cudaEvent_t head = s.enqueue.profile.streams[static_cast<std::size_t>(i)].first;
    const int d = fabric.device_of(s.devices.stream_rank[static_cast<std::size_t>(i)]);
    const auto [it, fresh] = origin.emplace(d, head);
    if (fresh) continue;
    float ms = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, it->second, head));
    if (ms < 0) it->second = head;
  }
  for (const int i : t.streams) {
    const auto& [head, tail] = s.enqueue.profile.streams[static_cast<std::size_t>(i)];
    const int rank = s.devices.stream_rank[static_cast<std::size_t>(i)];
    const cudaEvent_t o = origin.at(fabric.device_of(rank));
    float begin = 0, end = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&begin, o, head));
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&end, o, tail));
    const int name = s.devices.stream_name[static_cast<std::size_t>(i)];
    // CudaStreamSpan::stream: the name index; -1 rail messages, -2 the copy pool.
    const int span = name == sequence_detail::kRailStreamName ? -1 : name < 0 ? -2 : name;
    r.streams.push_back({rank, span, static_cast<double>(begin), static_cast<double>(end)});
  }
  for (std::size_t k = 0; k < t.ops.size(); ++k) {
    const auto& [a, b] = s.enqueue.profile.ops[k];
    if (a == nullptr) continue;
    float ms = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    const program::Op& op = program.ops[static_cast<std::size_t>(t.ops[k].op)];
    const int ctas = program::ctas_of(op);
    r.kernels_timed.push_back({t.ops[k].op, op.rank, op.kind(),
                               op.kind() == OpKind::kCast ? ctas : std::max(1, ctas),
                               static_cast<double>(ms)});
  }
}

void CudaExecutor::upload(const Buffer& buffer, std::span<const std::byte> bytes,
                          std::int64_t offset) {
  const auto n = static_cast<std::int64_t>(bytes.size());
  check_range(state_->fabric, buffer, offset, n, "upload");
  if (n == 0) return;
  TIDE_CUDA_CHECK(cudaSetDevice(state_->fabric.device_of(buffer.rank)));
  TIDE_CUDA_CHECK(cudaMemcpy(static_cast<std::byte*>(state_->fabric.pointer(buffer)) + offset,
                             bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
}

void CudaExecutor::fill(const Buffer& buffer, std::byte value) {
  check_range(state_->fabric, buffer, 0, 0, "fill");
  const std::int64_t n = state_->fabric.bytes(buffer);
  if (n == 0) return;
  TIDE_CUDA_CHECK(cudaSetDevice(state_->fabric.device_of(buffer.rank)));
  TIDE_CUDA_CHECK(cudaMemset(state_->fabric.pointer(buffer), std::to_integer<int>(value),
                             static_cast<std::size_t>(n)));
}

std::vector<std::byte> CudaExecutor::download(const Buffer& buffer) {
  check_range(state_->fabric, buffer, 0, 0, "download");
  const std::int64_t n = state_->fabric.bytes(buffer);
  std::vector<std::byte> out(static_cast<std::size_t>(n));
  if (n == 0) return out;
  TIDE_CUDA_CHECK(cudaSetDevice(state_->fabric.device_of(buffer.rank)));
  TIDE_CUDA_CHECK(cudaMemcpy(out.data(), state_->fabric.pointer(buffer),
                             static_cast<std::size_t>(n), cudaMemcpyDeviceToHost));
  return out;
}

CudaRunResult CudaExecutor::run(const CudaRunOptions& options) {
  State& st = *state_;
  if (st.stuck) {
    throw CudaError(
        "CudaExecutor: an earlier run left streams that could not be drained; "
        "this executor (and its fabric) cannot run again: restart the process");
  }
  if (!(options.timeout_s > 0.0)) {
    throw InvalidArgument("CudaExecutor::run: timeout_s = " + std::to_string(options.timeout_s) +
                          " (need > 0)");
  }
  CudaRunResult stats = st.counts;
  if (!st.runner) {  // step 1
    st.make_runner();
    stats.counters_reset = true;
  }
  CudaSequenceRunner::State& inner = st.inner();
  if (options.profile) inner.enqueue.make_profile_events();
  const Clock::time_point start = Clock::now();
  try {  // step 2
    inner.enqueue.profile.on = options.profile;
    st.runner->enqueue(st.bindings, 1.0f, false, st.caller);
    inner.enqueue.profile.on = false;
    TIDE_CUDA_CHECK(cudaSetDevice(st.device));
    TIDE_CUDA_CHECK(cudaEventRecord(st.done, st.caller));
  } catch (...) {
    inner.enqueue.profile.on = false;
    st.release_and_drain();
    throw;
  }
  stats.enqueue_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  bool ok = false;
  try {  // step 3
    ok = st.wait(options.timeout_s);
  } catch (...) {
    st.stuck = true;  // an asynchronous fault: the context is unusable
    st.fabric.release();
    throw;
  }
  if (!ok) {  // step 4
    std::string text = "CudaExecutor: the run did not complete within " +
                       std::to_string(options.timeout_s) + " s (fail-stop).";
    try {
      const std::optional<CudaStalledCall> stall = st.runner->stalled(std::chrono::milliseconds(0));
      if (stall) {
        text += " Unsatisfied waits:";
        for (const std::string& line : stall->waits)
          text += "\n  " + line;
      }
    } catch (const std::exception& e) {
      text += std::string(" (its waits could not be read: ") + e.what() + ")";
    }
    st.release_and_drain();
    throw ExecutionTimeout(text);
  }
  stats.wall_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (options.profile) st.collect_profile(stats);
  return stats;
}

std::string CudaExecutor::message_path() const {
  return state_->runner ? state_->runner->message_path() : std::string{};
}

std::int64_t CudaExecutor::device_bytes() const {
  std::int64_t bytes = 0;
  if (!state_->runner) return bytes;
  for (const sequence_detail::Template& t : state_->inner().mapping.templates) {
    for (const SeqOp& m : t.ops) {
      if (m.table != nullptr)
        bytes +=
            static_cast<std::int64_t>(m.table->host_runs().size() * sizeof(kernels::Level1Run));
    }
  }
  return bytes;
}

}  // namespace tide::exec
