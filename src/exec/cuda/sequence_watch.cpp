// The CUDA sequence runner, step 5 of NOTE [CUDA call sequences]: completion events per call,
// the stalled call and its unsatisfied waits, and the release of every wait after an abort
// (the abort words it stores are set up in sequence_abort_words.cpp).
#include "sequence_watch.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "transport/message.hpp"

namespace tide::exec {

using sequence_detail::RelaxedCaptureMode;
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

// Whether `s` completed its work within kReadBound.
bool completes_in_bound(cudaStream_t s) {
  const auto deadline = Watch::Clock::now() + kReadBound;
  cudaError_t read = cudaErrorNotReady;
  while ((read = cudaStreamQuery(s)) == cudaErrorNotReady && Watch::Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (read != cudaSuccess && read != cudaErrorNotReady) (void)cudaGetLastError();
  return read == cudaSuccess;
}

}  // namespace

void CudaSequenceRunner::State::create_watch() {
  watch = std::make_unique<Watch>();
  for (const int r : local_ranks) {
    devices.use_device_of(r);
    cudaStream_t s = nullptr;
    TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    watch->readers.push_back(s);
    void* words = nullptr;
    TIDE_CUDA_CHECK(
        cudaHostAlloc(&words, static_cast<std::size_t>(counters + 1) * 16, cudaHostAllocDefault));
    watch->host_words.push_back(static_cast<std::uint64_t*>(words));
  }
  void* abort = nullptr;
  TIDE_CUDA_CHECK(
      cudaHostAlloc(&abort, static_cast<std::size_t>(2 * ranks + 2) * 8, cudaHostAllocDefault));
  watch->host_abort = static_cast<std::uint64_t*>(abort);
  watch->host_abort[0] = 1;
  devices.use_device_of(local_ranks.empty() ? 0 : local_ranks[0]);
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
  if (watch->host_abort != nullptr) (void)cudaFreeHost(watch->host_abort);
  watch.reset();
}

bool CudaSequenceRunner::State::released() const {
  return watch->released.load();
}

// Records call e's completion event on `caller`. The record is made outside the watch's lock:
// a launch may block while the device's queues are full, and the watchdog must still get in.
void CudaSequenceRunner::State::watch_call(std::int64_t e, cudaStream_t caller) {
  devices.use_device_of(local_ranks.empty() ? 0 : local_ranks[0]);  // the events' device
  int slot = 0;
  {
    std::lock_guard lock(watch->mutex);
    watch->pop_completed();
    if (watch->entries.size() == watch->events.size()) watch->entries.pop_front();  // unseen
    slot = watch->next;
    watch->next = (watch->next + 1) % static_cast<int>(watch->events.size());
  }
  // Only this (enqueueing) thread touches the slot until its entry is pushed.
  TIDE_CUDA_CHECK(cudaEventRecord(watch->events[static_cast<std::size_t>(slot)], caller));
  std::lock_guard lock(watch->mutex);
  watch->entries.push_back({e, Watch::Clock::now(), slot});
}

std::vector<std::int64_t> CudaSequenceRunner::State::totals_before(std::int64_t e) const {
  std::vector<std::int64_t> base(totals.size(), 0);
  const std::int64_t period = sequence.period;
  for (std::int64_t t = 0; t < period; ++t) {
    const std::int64_t times = e / period + (t < e % period ? 1 : 0);
    const std::vector<std::int64_t>& add = mapping.templates[static_cast<std::size_t>(t)].additions;
    for (std::size_t i = 0; i < base.size(); ++i)
      base[i] += times * add[i];
  }
  return base;
}

// The ranks whose published abort word is set, one line each (NOTE [CUDA call sequences] 5);
// read on the first reader stream, bounded. Empty without published words.
std::vector<std::string> CudaSequenceRunner::State::aborted_ranks() const {
  std::vector<std::string> lines;
  if (place.abort_word < 0 || local_ranks.empty()) return lines;
  std::uint64_t* host = watch->host_abort + 1;
  std::fill(host, host + ranks, std::uint64_t{0});
  TIDE_CUDA_CHECK(cudaSetDevice(fabric.device_of(local_ranks[0])));
  std::uint64_t* relayed = watch->host_abort + 1 + 2 * ranks;
  *relayed = 0;
  for (int r = 0; r < ranks; ++r) {
    if (aborts.words[static_cast<std::size_t>(r)] == nullptr) continue;  // relayed
    TIDE_CUDA_CHECK(cudaMemcpyAsync(host + r, aborts.words[static_cast<std::size_t>(r)], 8,
                                    cudaMemcpyDefault, watch->readers[0]));
  }
  if (aborts.relay_word != nullptr) {
    TIDE_CUDA_CHECK(
        cudaMemcpyAsync(relayed, aborts.relay_word, 8, cudaMemcpyDefault, watch->readers[0]));
  }
  if (!completes_in_bound(watch->readers[0])) {
    lines.emplace_back("the ranks' abort words could not be read (the GPU's queues are held)");
    return lines;
  }
  for (int r = 0; r < ranks; ++r) {
    if (host[r] == 0) continue;
    lines.push_back("rank " + std::to_string(r) +
                    " aborted (its waits were released: what it signals after that is void, so "
                    "no call that waits for it completes)");
  }
  if (*relayed != 0) {  // NOTE [abort relay]
    lines.emplace_back(
        "a rank whose abort word this process cannot read aborted: a message carried its abort "
        "token (its data counted for nothing, so no call that waits for it completes)");
  }
  return lines;
}

// Every rank's call-tag word (NOTE [CUDA call sequences] 7), read on the first reader stream,
// bounded; empty without a tag word or where the read did not complete.
std::vector<std::uint64_t> CudaSequenceRunner::State::call_tags() const {
  if (place.call_tag_word < 0 || local_ranks.empty()) return {};
  std::lock_guard read_lock(watch->read_mutex);
  std::uint64_t* host = watch->host_abort + 1 + ranks;
  std::fill(host, host + ranks, std::uint64_t{0});
  TIDE_CUDA_CHECK(cudaSetDevice(fabric.device_of(local_ranks[0])));
  for (int r = 0; r < ranks; ++r) {
    const std::uint64_t* words = fabric.signals(r);
    if (words == nullptr) return {};  // not load/store reachable: nothing to compare
    TIDE_CUDA_CHECK(cudaMemcpyAsync(host + r, words + place.call_tag_word, 8, cudaMemcpyDefault,
                                    watch->readers[0]));
  }
  if (!completes_in_bound(watch->readers[0])) return {};
  return {host, host + ranks};
}

std::vector<std::string> CudaSequenceRunner::State::unsatisfied_waits(std::int64_t e) const {
  // The local ranks' words, read on private streams into pinned memory, with a bound: the
  // caller's streams may be blocked behind the stalled call, and a private stream may share
  // a hardware queue with one of its waits.
  std::lock_guard read_lock(watch->read_mutex);
  std::vector<std::string> lines = aborted_ranks();
  const CudaSequenceFaultInjection& faults = options.fault_injection;
  if (faults.gate_word != nullptr && fabric.local(faults.gate_rank)) {
    const volatile std::uint64_t* gate = host_view(faults.gate_word);
    if (gate != nullptr && *gate < 1) {
      lines.push_back("rank " + std::to_string(faults.gate_rank) + ": held by the test gate");
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
    if (!completes_in_bound(watch->readers[k])) {
      lines.push_back("its waits could not be read (rank " + std::to_string(r) +
                      "'s word read did not complete: the GPU's queues are held)");
      return lines;
    }
    std::copy(host, host + n, words.begin() + static_cast<std::ptrdiff_t>(r * counters));
  }
  const std::vector<std::int64_t> base = totals_before(e);
  const program::Program& p = sequence.for_call(e).program;
  // Who adds to each counter: the ranks a wait waits for.
  std::map<std::size_t, std::set<int>> signallers;
  for (const program::Op& op : p.ops) {
    if (const auto add = program::addition_of(op)) {
      signallers[static_cast<std::size_t>(add->counter.rank) * n +
                 static_cast<std::size_t>(add->counter.id)]
          .insert(op.rank);
    }
  }
  // Waits for another process's rank first: a wait for a local rank is often held only
  // because that rank waits for another process.
  std::vector<std::string> remote, local;
  for (const program::Op& op : p.ops) {
    const auto* wait = op.get_if<program::WaitOp>();
    if (wait == nullptr || !fabric.local(wait->counter.rank)) continue;
    const std::size_t total = static_cast<std::size_t>(wait->counter.rank) * n +
                              static_cast<std::size_t>(wait->counter.id);
    const std::int64_t threshold = base[total] + wait->value;
    const auto holds = static_cast<std::int64_t>(words[total]);
    if (threshold <= 0 || holds >= threshold) continue;
    std::string from;
    bool other_process = false;
    for (const int r : signallers[total]) {
      from += (from.empty() ? " (signalled by rank " : ", ") + std::to_string(r);
      other_process = other_process || !fabric.local(r);
    }
    if (!from.empty()) from += ")";
    (other_process ? remote : local)
        .push_back("rank " + std::to_string(op.rank) + " stream '" +
                   p.stream_names[static_cast<std::size_t>(op.stream)] + "' waits ('" + op.label +
                   "') for counter " + std::to_string(wait->counter.id) +
                   " >= " + std::to_string(threshold) + ", holds " + std::to_string(holds) + from);
  }
  std::size_t unnamed = 0;
  for (std::vector<std::string>* group : {&remote, &local}) {
    for (std::string& line : *group) {
      if (lines.size() >= kMaxNamedWaits) {
        ++unnamed;
      } else {
        lines.push_back(std::move(line));
      }
    }
  }
  if (unnamed > 0) lines.push_back("and " + std::to_string(unnamed) + " more waits");
  return lines;
}

std::optional<bool> CudaSequenceRunner::relayed_abort() const {
  const RelaxedCaptureMode relaxed;
  const State& s = *state_;
  if (s.aborts.relay_word == nullptr || s.local_ranks.empty()) return false;
  std::lock_guard read_lock(s.watch->read_mutex);  // the host word aborted_ranks() uses too
  std::uint64_t* host = s.watch->host_abort + 1 + 2 * s.ranks;
  *host = 0;
  TIDE_CUDA_CHECK(cudaSetDevice(s.fabric.device_of(s.local_ranks[0])));
  TIDE_CUDA_CHECK(
      cudaMemcpyAsync(host, s.aborts.relay_word, 8, cudaMemcpyDefault, s.watch->readers[0]));
  if (!completes_in_bound(s.watch->readers[0])) return std::nullopt;
  return *host != 0;
}

std::optional<CudaStalledCall> CudaSequenceRunner::stalled(
    std::chrono::milliseconds timeout) const {
  const RelaxedCaptureMode relaxed;
  const State& s = *state_;
  Watch& w = *s.watch;
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
    out.waits = s.unsatisfied_waits(out.call);
  } catch (const std::exception& x) {
    out.waits.push_back(std::string("its waits could not be read: ") + x.what());
  }
  try {
    out.call_tags = s.call_tags();
  } catch (const std::exception&) {
    out.call_tags.clear();  // the waits' lines say why the device could not be read
  }
  return out;
}

bool CudaSequenceRunner::idle() const {
  const RelaxedCaptureMode relaxed;
  Watch& w = *state_->watch;
  std::lock_guard lock(w.mutex);
  w.pop_completed();
  return w.entries.empty();
}

bool CudaSequenceRunner::stuck() const {
  return state_->released() && !idle();
}

void CudaSequenceRunner::enqueue_abort_check(cudaStream_t stream) const {
  const State& s = *state_;
  if (s.aborts.peer_check.watched_count == 0) return;
  TIDE_CUDA_CHECK(cudaSetDevice(s.fabric.device_of(s.local_ranks[0])));
  kernels::launch_abort_check(s.aborts.peer_check, stream);
}

bool CudaSequenceRunner::released() const {
  return state_->released();
}

std::int64_t CudaSequenceRunner::first_void_call() const {
  Watch& w = *state_->watch;
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
  Watch& w = *s.watch;
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
