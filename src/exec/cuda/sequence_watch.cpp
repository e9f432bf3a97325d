// The CUDA sequence runner, step 5 of NOTE [CUDA call sequences]: completion events per call,
// the stalled call and its unsatisfied waits, and the release of every wait after an abort.
#include "sequence_watch.hpp"

#include <string>

#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/kernels/cuda_check.hpp"

namespace tide::exec {

using sequence_detail::Watch;

namespace {

// Far above any threshold a sequence reaches, so that every GEQ wait on the word passes.
constexpr std::uint64_t kReleased = std::uint64_t{1} << 62;
constexpr std::size_t kMaxNamedWaits = 8;

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
  // The local ranks' words, read on private streams (the caller's may be blocked behind them).
  std::vector<std::uint64_t> words(totals.size(), 0);
  std::uint64_t gate = 1;
  for (std::size_t k = 0; k < local_ranks.size(); ++k) {
    const int r = local_ranks[k];
    TIDE_CUDA_CHECK(cudaSetDevice(fabric.device_of(r)));
    TIDE_CUDA_CHECK(cudaMemcpyAsync(
        words.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(counters),
        fabric.signals(r) + place.first_signal_word, static_cast<std::size_t>(counters) * 8,
        cudaMemcpyDeviceToHost, watch->readers[k]));
    if (r == options.gate_rank && options.gate_word != nullptr) {
      TIDE_CUDA_CHECK(
          cudaMemcpyAsync(&gate, options.gate_word, 8, cudaMemcpyDeviceToHost, watch->readers[k]));
    }
    TIDE_CUDA_CHECK(cudaStreamSynchronize(watch->readers[k]));
  }
  std::vector<std::string> lines;
  if (gate < 1) lines.push_back("rank " + std::to_string(options.gate_rank) + ": the test gate");
  const std::vector<std::int64_t> base = totals_before(e);
  const program::Program& p = sequence.for_call(e).program;
  std::size_t unnamed = 0;
  for (const program::Op& op : p.ops) {
    if (op.kind != program::OpKind::kWait || !fabric.local(op.counter.rank)) continue;
    const std::size_t total =
        static_cast<std::size_t>(op.counter.rank) * static_cast<std::size_t>(counters) +
        static_cast<std::size_t>(op.counter.id);
    const std::int64_t threshold = base[total] + op.value;
    const auto holds = static_cast<std::int64_t>(words[total]);
    if (threshold <= 0 || holds >= threshold) continue;
    if (lines.size() >= kMaxNamedWaits) {
      ++unnamed;
      continue;
    }
    lines.push_back("rank " + std::to_string(op.rank) + " stream '" +
                    p.stream_names[static_cast<std::size_t>(op.stream)] + "' waits ('" + op.label +
                    "') for counter " + std::to_string(op.counter.id) +
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

void CudaSequenceRunner::release_waits() {
  State& s = *state_;
  Watch& w = *s.watch;
  std::lock_guard lock(w.mutex);
  w.released = true;
  const std::vector<std::uint64_t> high(static_cast<std::size_t>(s.counters), kReleased);
  for (std::size_t k = 0; k < s.local_ranks.size(); ++k) {
    const int r = s.local_ranks[k];
    TIDE_CUDA_CHECK(cudaSetDevice(s.fabric.device_of(r)));
    TIDE_CUDA_CHECK(cudaMemcpyAsync(s.fabric.signals(r) + s.place.first_signal_word, high.data(),
                                    high.size() * 8, cudaMemcpyHostToDevice, w.readers[k]));
    if (r == s.options.gate_rank && s.options.gate_word != nullptr) {
      TIDE_CUDA_CHECK(cudaMemcpyAsync(const_cast<std::uint64_t*>(s.options.gate_word), &kReleased,
                                      8, cudaMemcpyHostToDevice, w.readers[k]));
    }
    TIDE_CUDA_CHECK(cudaStreamSynchronize(w.readers[k]));
  }
}

}  // namespace tide::exec
