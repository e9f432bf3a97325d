// The CUDA executor after enqueueing: completion polled with a timeout, the drain after a
// timeout (fail-stop, Sec. 7.5), timeout reports naming the unsatisfied waits, profiles,
// and teardown.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "executor_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

namespace tide::exec {

namespace {

// A value above every threshold a program can wait for: written into every counter after a
// timeout so that every cuStreamWaitValue64 (GEQ) passes and the streams drain.
constexpr unsigned char kReleaseByte = 0x3F;  // 0x3F3F3F3F3F3F3F3F

// How long a drain after a timeout or an enqueue failure may take before the executor gives
// its streams up as stuck.
constexpr double kDrainTimeoutS = 10.0;

}  // namespace

CudaExecutor::State::~State() {
  if (stuck) {
    // Freeing memory that stuck streams still use would wait forever: keep everything.
    for (auto* list : {&ops, &receives}) {
      for (Mapped& m : *list) {
        (void)m.table.release();
        (void)m.message.release();
      }
    }
    return;
  }
  for (std::size_t i = 0; i < streams.size(); ++i) {
    (void)cudaSetDevice(fabric.device_of(stream_owner[i].rank));
    (void)cudaStreamSynchronize(streams[i]);
  }
  for (cudaEvent_t e : done)
    (void)cudaEventDestroy(e);
  for (cudaEvent_t e : events)
    (void)cudaEventDestroy(e);
  for (auto& v : {&profile_events.kernels, &profile_events.streams}) {
    for (auto [a, b] : *v) {
      if (a != nullptr) (void)cudaEventDestroy(a);
      if (b != nullptr) (void)cudaEventDestroy(b);
    }
  }
  for (cudaStream_t s : streams)
    (void)cudaStreamDestroy(s);
  if (control != nullptr) (void)cudaStreamDestroy(control);
  if (token != nullptr) (void)cudaFree(token);
}

// Writes `byte` into every signal word of the local ranks (synchronously, on each rank's
// device).
void CudaExecutor::State::fill_local_signals(unsigned char byte) {
  for (int r : local_ranks) {
    use_device_of(r);
    TIDE_CUDA_CHECK(
        cudaMemset(fabric.signals(r), byte, std::max<std::size_t>(1, counters.words) * 8));
  }
}

// Creates the profiling events once.
void CudaExecutor::State::make_profile_events() {
  if (!profile_events.streams.empty()) return;
  auto timing = [] {
    cudaEvent_t e = nullptr;
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
    return e;
  };
  profile_events.kernels.assign(ops.size(), {nullptr, nullptr});
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (!is_kernel(ops[i].kind) || ops[i].empty || ops[i].stream < 0) continue;
    use_device_of(ops[i].rank);
    profile_events.kernels[i] = {timing(), timing()};
  }
  for (std::size_t i = 0; i < streams.size(); ++i) {
    use_device_of(stream_owner[i].rank);
    profile_events.streams.emplace_back(timing(), timing());
  }
}

// Polls every stream's completion event until all completed or `timeout_s` passed. Returns
// whether all completed; throws CudaError on an asynchronous fault.
bool CudaExecutor::State::wait_all(double timeout_s, std::vector<bool>* complete) const {
  const Clock::time_point start = Clock::now();
  std::vector<bool> ok(done.size(), false);
  std::size_t remaining = done.size();
  for (;;) {
    for (std::size_t i = 0; i < done.size(); ++i) {
      if (ok[i]) continue;
      const cudaError_t st = cudaEventQuery(done[i]);
      if (st == cudaSuccess) {
        ok[i] = true;
        --remaining;
      } else if (st != cudaErrorNotReady) {
        throw CudaError("CudaExecutor: stream of rank " + std::to_string(stream_owner[i].rank) +
                        " '" + stream_name(i) + "' failed: " + cuda_status(st));
      }
    }
    if (remaining == 0) break;
    if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) break;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  if (complete != nullptr) *complete = ok;
  return remaining == 0;
}

// Sets every counter to a huge value so every stream waiting on one proceeds, then waits
// for the streams; marks the executor stuck (and releases the fabric) if they do not drain.
void CudaExecutor::State::release_and_drain() {
  bool drained = false;
  try {
    counters.dirty = true;
    fill_local_signals(kReleaseByte);
    drained = wait_all(kDrainTimeoutS, nullptr);
  } catch (const std::exception&) {
    drained = false;
  }
  if (!drained) {
    stuck = true;
    fabric.release();
  }
}

// Reads the profiling events of a completed run into `stats`.
void CudaExecutor::State::collect_profile(CudaRunResult& stats) const {
  // Times between events are only defined on one device: each stream's span is measured
  // from the earliest stream head of its device.
  std::map<int, cudaEvent_t> origin;  // device -> earliest head
  for (std::size_t i = 0; i < profile_events.streams.size(); ++i) {
    const int d = fabric.device_of(stream_owner[i].rank);
    const auto [it, fresh] = origin.emplace(d, profile_events.streams[i].first);
    if (fresh) continue;
    float ms = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, it->second, profile_events.streams[i].first));
    if (ms < 0) it->second = profile_events.streams[i].first;
  }
  for (std::size_t i = 0; i < profile_events.streams.size(); ++i) {
    cudaEvent_t o = origin.at(fabric.device_of(stream_owner[i].rank));
    float begin = 0, end = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&begin, o, profile_events.streams[i].first));
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&end, o, profile_events.streams[i].second));
    stats.streams.push_back({stream_owner[i].rank, stream_owner[i].span_stream(),
                             static_cast<double>(begin), static_cast<double>(end)});
  }
  for (std::size_t i = 0; i < profile_events.kernels.size(); ++i) {
    const auto& [a, b] = profile_events.kernels[i];
    if (a == nullptr) continue;
    float ms = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    const Op& op = program.ops[i];
    const int ctas = program::ctas_of(op);
    stats.kernels_timed.push_back({static_cast<int>(i), op.rank, op.kind(),
                                   op.kind() == OpKind::kCast ? ctas : std::max(1, ctas),
                                   static_cast<double>(ms)});
  }
}

std::string CudaExecutor::State::describe_timeout(double timeout_s,
                                                  const std::vector<bool>& complete) const {
  // This run's additions to the local ranks' counters (host index as in `totals`).
  std::vector<std::uint64_t> values(totals_size(), 0);
  std::vector<bool> readable(values.size(), false);
  std::string read_error;
  for (int r : local_ranks) {
    const std::size_t first = static_cast<std::size_t>(r) * counters.words;
    // Synchronous and stream-less: the executor's streams may be stuck, and the words may
    // live on another device than the control stream.
    const cudaError_t sync = counters.words == 0
                                 ? cudaSuccess
                                 : cudaMemcpy(values.data() + first, fabric.signals(r),
                                              counters.words * 8, cudaMemcpyDeviceToHost);
    if (sync != cudaSuccess) {
      read_error = " (counters could not be read: " + cuda_status(sync) + ")";
      break;
    }
    for (std::size_t k = 0; k < counters.words; ++k)
      readable[first + k] = true;
  }
  std::string text = "CudaExecutor: the run did not complete within " + std::to_string(timeout_s) +
                     " s (fail-stop)" + read_error + ".";
  int streams_left = 0;
  std::string stream_list;
  for (std::size_t i = 0; i < complete.size(); ++i) {
    if (complete[i]) continue;
    if (++streams_left <= 16) {
      stream_list +=
          " (rank " + std::to_string(stream_owner[i].rank) + ", '" + stream_name(i) + "')";
    }
  }
  text += " Incomplete streams: " + std::to_string(streams_left) + ":" + stream_list + ".";
  if (!read_error.empty()) return text;
  int unsatisfied = 0;
  std::string waits;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    const auto* wait = op.get_if<program::WaitOp>();
    if (wait == nullptr || !fabric.local(op.rank)) continue;
    const std::size_t c = counter_index(wait->counter);
    if (!readable[c]) continue;
    const std::uint64_t have =
        values[c] - counters.epoch * counters.totals[c];  // this run's additions
    if (have >= static_cast<std::uint64_t>(wait->value)) continue;
    if (++unsatisfied <= 16) {
      waits += "\n  " + op_where(program, static_cast<int>(i)) + "counter " +
               std::to_string(wait->counter.id) + " of rank " + std::to_string(wait->counter.rank) +
               " holds " + std::to_string(have) + " < " + std::to_string(wait->value);
    }
  }
  text += " Unsatisfied waits: " + std::to_string(unsatisfied) +
          (unsatisfied > 16 ? " (first 16)" : "") + ":" + waits;
  return text;
}

}  // namespace tide::exec
