// The CUDA sequence runner, step 5 of NOTE [CUDA call sequences]: completion events per call,
// the stalled call and its unsatisfied waits, and the release of every wait after an abort.
#include "sequence_watch.hpp"

#include <algorithm>
#include <string>
#include <thread>

#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/kernels/cuda_check.hpp"

namespace tide::exec {

using sequence_detail::Watch;

namespace {

// Far above any threshold a sequence reaches, so that every GEQ wait on the word passes.
constexpr std::uint64_t kReleased = std::uint64_t{1} << 62;
constexpr std::size_t kMaxNamedWaits = 8;
// How long the watchdog waits for its word reads: a stream aliased onto a hardware queue
// that a stalled wait holds cannot run them.
constexpr auto kReadBound = std::chrono::milliseconds(500);

// The host's view of `p` when it is mapped host memory (read and written with no GPU queue),
// else nullptr.
volatile std::uint64_t* host_view(const std::uint64_t* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (a.type != cudaMemoryTypeHost || a.hostPointer == nullptr) return nullptr;
  return static_cast<volatile std::uint64_t*>(a.hostPointer);
}

double seconds_since(Watch::Clock::time_point t) {
  return std::chrono::duration<double>(Watch::Clock::now() - t).count();
}

}  // namespace

void CudaSequenceRunner::State::create_watch() {
  watch = std::make_unique<Watch>();
  for (const int r : local_ranks) {
    use_device_of(r);
    cudaStream_t s = nullptr;
    TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    watch->readers.push_back(s);
    void* words = nullptr;
    TIDE_CUDA_CHECK(
        cudaHostAlloc(&words, static_cast<std::size_t>(counters + 1) * 16, cudaHostAllocDefault));
    watch->host_words.push_back(static_cast<std::uint64_t*>(words));
  }
  use_device_of(local_ranks.empty() ? 0 : local_ranks[0]);
  watch->events.assign(static_cast<std::size_t>(kWatchedCalls), nullptr);
  for (cudaEvent_t& e : watch->events)
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

void CudaSequenceRunner::State::destroy_watch() noexcept {
  if (!watch) return;
  for (cudaEvent_t e : watch->events)
    if (e != nullptr) (void)cudaEventDestroy(e);
  for (cudaStream_t s : watch->readers)
    (void)cudaStreamDestroy(s);
  for (std::uint64_t* w : watch->host_words)
    (void)cudaFreeHost(w);
  watch.reset();
}

bool CudaSequenceRunner::State::released() const {
  std::lock_guard lock(watch->mutex);
  return watch->released;
}

void CudaSequenceRunner::State::watch_call(std::int64_t e, cudaStream_t caller) {
  use_device_of(local_ranks.empty() ? 0 : local_ranks[0]);  // the events' device
  std::lock_guard lock(watch->mutex);
  if (watch->entries.size() == watch->events.size()) watch->entries.pop_front();
  const int slot = watch->next;
  watch->next = (watch->next + 1) % static_cast<int>(watch->events.size());
  TIDE_CUDA_CHECK(cudaEventRecord(watch->events[static_cast<std::size_t>(slot)], caller));
  watch->entries.push_back({e, Watch::Clock::now(), slot});
}

std::vector<std::int64_t> CudaSequenceRunner::State::totals_before(std::int64_t e) const {
  std::vector<std::int64_t> base(totals.size(), 0);
  const std::int64_t period = sequence.period;
  for (std::int64_t t = 0; t < period; ++t) {
    const std::int64_t times = e / period + (t < e % period ? 1 : 0);
    const std::vector<std::int64_t>& add = templates[static_cast<std::size_t>(t)].additions;
    for (std::size_t i = 0; i < base.size(); ++i)
      base[i] += times * add[i];
  }
  return base;
}

std::vector<std::string> CudaSequenceRunner::State::unsatisfied_waits(std::int64_t e) const {
  // The local ranks' words, read on private streams into pinned memory, with a bound: the
  // caller's streams may be blocked behind the stalled call, and a private stream may share
  // a hardware queue with one of its waits.
  std::vector<std::string> lines;
  if (options.gate_word != nullptr && fabric.local(options.gate_rank)) {
    const volatile std::uint64_t* gate = host_view(options.gate_word);
    if (gate != nullptr && *gate < 1) {
      lines.push_back("rank " + std::to_string(options.gate_rank) + ": held by the test gate");
    }
  }
  std::vector<std::uint64_t> words(totals.size(), 0);
  const std::size_t n = static_cast<std::size_t>(counters);
  for (std::size_t k = 0; k < local_ranks.size(); ++k) {
    const int r = local_ranks[k];
    std::uint64_t* host = watch->host_words[k];
    TIDE_CUDA_CHECK(cudaSetDevice(fabric.device_of(r)));
    TIDE_CUDA_CHECK(cudaMemcpyAsync(host, fabric.signals(r) + place.first_signal_word, n * 8,
                                    cudaMemcpyDefault, watch->readers[k]));
    const auto deadline = Watch::Clock::now() + kReadBound;
    cudaError_t read = cudaErrorNotReady;
    while ((read = cudaStreamQuery(watch->readers[k])) == cudaErrorNotReady &&
           Watch::Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (read != cudaSuccess) {
      lines.push_back("its waits could not be read (rank " + std::to_string(r) +
                      "'s word read did not complete: the GPU's queues are held)");
      return lines;
    }
    std::copy(host, host + n, words.begin() + static_cast<std::ptrdiff_t>(r * counters));
  }
  const std::vector<std::int64_t> base = totals_before(e);
  const program::Program& p = sequence.for_call(e).program;
  std::size_t unnamed = 0;
  for (const program::Op& op : p.ops) {
    const auto* wait = op.get_if<program::WaitOp>();
    if (wait == nullptr || !fabric.local(wait->counter.rank)) continue;
    const std::size_t total =
        static_cast<std::size_t>(wait->counter.rank) * static_cast<std::size_t>(counters) +
        static_cast<std::size_t>(wait->counter.id);
    const std::int64_t threshold = base[total] + wait->value;
    const auto holds = static_cast<std::int64_t>(words[total]);
    if (threshold <= 0 || holds >= threshold) continue;
    if (lines.size() >= kMaxNamedWaits) {
      ++unnamed;
      continue;
    }
    lines.push_back("rank " + std::to_string(op.rank) + " stream '" +
                    p.stream_names[static_cast<std::size_t>(op.stream)] + "' waits ('" + op.label +
                    "') for counter " + std::to_string(wait->counter.id) +
                    " >= " + std::to_string(threshold) + ", holds " + std::to_string(holds));
  }
  if (unnamed > 0) lines.push_back("and " + std::to_string(unnamed) + " more waits");
  return lines;
}

std::optional<CudaStalledCall> CudaSequenceRunner::stalled(
    std::chrono::milliseconds timeout) const {
  const State& s = *state_;
  Watch& w = *s.watch;
  CudaStalledCall out;
  {
    std::lock_guard lock(w.mutex);
    for (;;) {
      if (w.entries.empty()) return std::nullopt;
      const Watch::Entry& e = w.entries.front();
      const cudaError_t q = cudaEventQuery(w.events[static_cast<std::size_t>(e.slot)]);
      if (q == cudaSuccess) {
        w.entries.pop_front();
        continue;
      }
      out.call = e.call;
      out.seconds = seconds_since(e.enqueued);
      if (q != cudaErrorNotReady) {
        (void)cudaGetLastError();
        out.waits.push_back(std::string("CUDA error ") + cudaGetErrorName(q) + ": " +
                            cudaGetErrorString(q));
        return out;
      }
      if (out.seconds * 1000.0 < static_cast<double>(timeout.count())) return std::nullopt;
      break;
    }
  }
  try {
    out.waits = s.unsatisfied_waits(out.call);
  } catch (const std::exception& x) {
    out.waits.push_back(std::string("its waits could not be read: ") + x.what());
  }
  return out;
}

bool CudaSequenceRunner::idle() const {
  Watch& w = *state_->watch;
  std::lock_guard lock(w.mutex);
  while (!w.entries.empty() &&
         cudaEventQuery(w.events[static_cast<std::size_t>(w.entries.front().slot)]) ==
             cudaSuccess) {
    w.entries.pop_front();
  }
  return w.entries.empty();
}

bool CudaSequenceRunner::stuck() const {
  return state_->released() && !idle();
}

void CudaSequenceRunner::release_waits() {
  State& s = *state_;
  Watch& w = *s.watch;
  std::lock_guard lock(w.mutex);
  w.released = true;
  // Asynchronous from pinned memory, never waited for: a copy queued behind a held hardware
  // queue completes only if that queue drains (the caller of release_waits checks idle()).
  const std::size_t n = static_cast<std::size_t>(s.counters);
  for (std::size_t k = 0; k < s.local_ranks.size(); ++k) {
    const int r = s.local_ranks[k];
    std::uint64_t* host = w.host_words[k] + (n + 1);  // the release half
    std::fill(host, host + n + 1, kReleased);
    TIDE_CUDA_CHECK(cudaSetDevice(s.fabric.device_of(r)));
    TIDE_CUDA_CHECK(cudaMemcpyAsync(s.fabric.signals(r) + s.place.first_signal_word, host, n * 8,
                                    cudaMemcpyDefault, w.readers[k]));
    if (r == s.options.gate_rank && s.options.gate_word != nullptr) {
      if (volatile std::uint64_t* gate = host_view(s.options.gate_word)) {
        *gate = kReleased;
      } else {
        TIDE_CUDA_CHECK(cudaMemcpyAsync(const_cast<std::uint64_t*>(s.options.gate_word), host + n,
                                        8, cudaMemcpyDefault, w.readers[k]));
      }
    }
  }
}

}  // namespace tide::exec
