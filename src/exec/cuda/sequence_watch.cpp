// The CUDA sequence runner's watch entry points, step 5 of NOTE [CUDA call sequences]
// (docs/executor.md): the stalled call (its waits read by the Watcher, sequence_watcher.cpp),
// whether the runner is idle, the relayed abort, and the release of every wait after an abort
// (the abort words it stores are set up by AbortWords::set_up, sequence_abort_words.cpp).
#include "sequence_watch.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "transport/message.hpp"

namespace tide::exec {

using sequence_detail::completes_in_bound;
using sequence_detail::host_view;
using sequence_detail::RelaxedCaptureMode;
using sequence_detail::Watch;

namespace {

// Far above any threshold a sequence reaches, so that every GEQ wait on the word passes.
constexpr std::uint64_t kReleased = std::uint64_t{1} << 62;

double seconds_since(Watch::Clock::time_point t) {
  return std::chrono::duration<double>(Watch::Clock::now() - t).count();
}

}  // namespace

std::optional<bool> CudaSequenceRunner::relayed_abort() const {
  const RelaxedCaptureMode relaxed;
  const State& s = *state_;
  if (s.aborts.relay_word == nullptr || s.local_ranks.empty()) return false;
  // The host word Watcher::aborted_ranks() uses too.
  std::lock_guard read_lock(s.watcher.watch->read_mutex);
  std::uint64_t* host = s.watcher.watch->host_abort + 1 + 2 * s.ranks;
  *host = 0;
  TIDE_CUDA_CHECK(cudaSetDevice(s.fabric.device_of(s.local_ranks[0])));
  TIDE_CUDA_CHECK(cudaMemcpyAsync(host, s.aborts.relay_word, 8, cudaMemcpyDefault,
                                  s.watcher.watch->readers[0]));
  if (!completes_in_bound(s.watcher.watch->readers[0])) return std::nullopt;
  return *host != 0;
}

std::optional<CudaStalledCall> CudaSequenceRunner::stalled(
    std::chrono::milliseconds timeout) const {
  const RelaxedCaptureMode relaxed;
  const State& s = *state_;
  Watch& w = *s.watcher.watch;
  CudaStalledCall out;
  {
    std::lock_guard lock(w.mutex);
    w.pop_completed();
    if (w.entries.empty()) return std::nullopt;
    const Watch::Entry& e = w.entries.front();
    const cudaError_t q = cudaEventQuery(w.events[static_cast<std::size_t>(e.slot)]);
    out.call = e.call;
    out.seconds = seconds_since(e.enqueued);
    if (q != cudaErrorNotReady && q != cudaSuccess) {
      (void)cudaGetLastError();
      out.waits.push_back(std::string("CUDA error ") + cudaGetErrorName(q) + ": " +
                          cudaGetErrorString(q));
      return out;
    }
    if (q == cudaSuccess || out.seconds * 1000.0 < static_cast<double>(timeout.count()))
      return std::nullopt;
  }
  try {
    out.waits = s.watcher.unsatisfied_waits(out.call);
  } catch (const std::exception& x) {
    out.waits.push_back(std::string("its waits could not be read: ") + x.what());
  }
  try {
    out.call_tags = s.watcher.call_tags();
  } catch (const std::exception&) {
    out.call_tags.clear();  // the waits' lines say why the device could not be read
  }
  return out;
}

bool CudaSequenceRunner::idle() const {
  const RelaxedCaptureMode relaxed;
  Watch& w = *state_->watcher.watch;
  std::lock_guard lock(w.mutex);
  w.pop_completed();
  return w.entries.empty();
}

bool CudaSequenceRunner::stuck() const {
  return state_->watcher.released() && !idle();
}

void CudaSequenceRunner::enqueue_abort_check(cudaStream_t stream) const {
  const State& s = *state_;
  if (s.aborts.peer_check.watched_count == 0) return;
  TIDE_CUDA_CHECK(cudaSetDevice(s.fabric.device_of(s.local_ranks[0])));
  kernels::launch_abort_check(s.aborts.peer_check, stream);
}

bool CudaSequenceRunner::released() const {
  return state_->watcher.released();
}

std::int64_t CudaSequenceRunner::first_void_call() const {
  Watch& w = *state_->watcher.watch;
  std::lock_guard lock(w.mutex);
  return w.first_void;
}

// NOTE [CUDA call sequences] 5. Asynchronous from pinned memory, never waited for unbounded: a
// copy queued behind a held hardware queue completes only if that queue drains (the caller of
// release_waits checks idle()). Each reader stream first writes every local rank's abort word,
// then releases its rank's signal words, so that every counter addition that a released wait
// lets run reads the word as set; the readers stay independent of each other (a reader's
// queue may be held until another reader's release lands).
void CudaSequenceRunner::release_waits() {
  const RelaxedCaptureMode relaxed;
  State& s = *state_;
  Watch& w = *s.watcher.watch;
  std::lock_guard release_lock(w.release_mutex);
  {
    std::lock_guard lock(w.mutex);
    if (w.released.load()) return;
    w.pop_completed();
    w.first_void = w.confirmed;
    w.released.store(true);
  }
  std::vector<std::uint64_t*> aborts;  // the distinct abort words of the local ranks
  for (const int r : s.local_ranks) {
    std::uint64_t* word = s.aborts.words[static_cast<std::size_t>(r)];
    if (std::find(aborts.begin(), aborts.end(), word) == aborts.end()) aborts.push_back(word);
  }
  const std::size_t n = static_cast<std::size_t>(s.counters);
  const CudaSequenceFaultInjection& faults = s.options.fault_injection;
  bool host_gate = false;
  for (std::size_t k = 0; k < s.local_ranks.size(); ++k) {
    const int r = s.local_ranks[k];
    std::uint64_t* host = w.host_words[k] + (n + 1);  // the release half
    std::fill(host, host + n + 1, kReleased);
    TIDE_CUDA_CHECK(cudaSetDevice(s.fabric.device_of(r)));
    for (std::uint64_t* word : aborts)
      TIDE_CUDA_CHECK(cudaMemcpyAsync(word, w.host_abort, 8, cudaMemcpyDefault, w.readers[k]));
    TIDE_CUDA_CHECK(cudaMemcpyAsync(s.fabric.signals(r) + s.place.first_signal_word, host, n * 8,
                                    cudaMemcpyDefault, w.readers[k]));
    if (r == faults.gate_rank && faults.gate_word != nullptr) {
      if (host_view(faults.gate_word) != nullptr) {
        host_gate = true;
      } else {
        TIDE_CUDA_CHECK(cudaMemcpyAsync(const_cast<std::uint64_t*>(faults.gate_word), host + n, 8,
                                        cudaMemcpyDefault, w.readers[k]));
      }
    }
  }
  // The test gate in mapped host memory is opened by a store, through no GPU queue (a release
  // copy may sit behind a queue the gate holds). The gate stands for a peer that is only
  // late: what the gated rank does before its next released wait is valid, and what follows
  // such a wait reads the abort word as set.
  if (host_gate) *host_view(faults.gate_word) = kReleased;
  // The transport's own device waits (a rendezvous transport's) end too, through a word in
  // mapped host memory: no GPU queue (NOTE [rendezvous transport], Release).
  if (!faults.hold_messages_on_release) release_messages();
}

void CudaSequenceRunner::release_messages() {
  if (state_->mapping.transport) state_->mapping.transport->release();
}

}  // namespace tide::exec
