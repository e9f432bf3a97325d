// The runner's watch, step 5 of NOTE [CUDA call sequences] (docs/executor.md): a completion
// event per call, and what the watchdog reads of a stalled call (the aborted ranks, the call
// tags, the waits its counters do not satisfy), every read bounded.
#include "sequence_watcher.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

namespace tide::exec::sequence_detail {

namespace {

constexpr std::size_t kMaxNamedWaits = 8;
// How long the watchdog waits for its word reads: a stream aliased onto a hardware queue
// that a stalled wait holds cannot run them.
constexpr auto kReadBound = std::chrono::milliseconds(500);

// The runner's totals: rank * counters + id.
std::size_t totals_size(const Fixed& f) {
  return static_cast<std::size_t>(f.ranks) * static_cast<std::size_t>(f.counters);
}

}  // namespace

volatile std::uint64_t* host_view(const std::uint64_t* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  if (a.type != cudaMemoryTypeHost || a.hostPointer == nullptr) return nullptr;
  return static_cast<volatile std::uint64_t*>(a.hostPointer);
}

bool completes_in_bound(cudaStream_t s) {
  const auto deadline = Watch::Clock::now() + kReadBound;
  cudaError_t read = cudaErrorNotReady;
  while ((read = cudaStreamQuery(s)) == cudaErrorNotReady && Watch::Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (read != cudaSuccess && read != cudaErrorNotReady) (void)cudaGetLastError();
  return read == cudaSuccess;
}

void Watcher::create() {
  watch = std::make_unique<Watch>();
  for (const int r : fixed_.local_ranks) {
    devices_.use_device_of(r);
    cudaStream_t s = nullptr;
    TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    watch->readers.push_back(s);
    void* words = nullptr;
    TIDE_CUDA_CHECK(cudaHostAlloc(&words, static_cast<std::size_t>(fixed_.counters + 1) * 16,
                                  cudaHostAllocDefault));
    watch->host_words.push_back(static_cast<std::uint64_t*>(words));
  }
  void* abort = nullptr;
  TIDE_CUDA_CHECK(cudaHostAlloc(&abort, static_cast<std::size_t>(2 * fixed_.ranks + 2) * 8,
                                cudaHostAllocDefault));
  watch->host_abort = static_cast<std::uint64_t*>(abort);
  watch->host_abort[0] = 1;
  devices_.use_device_of(fixed_.local_ranks.empty() ? 0 : fixed_.local_ranks[0]);
  watch->events.assign(static_cast<std::size_t>(CudaSequenceRunner::kWatchedCalls), nullptr);
  for (cudaEvent_t& e : watch->events)
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

void Watcher::destroy() noexcept {
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

// Records call e's completion event on `caller`. The record is made outside the watch's lock:
// a launch may block while the device's queues are full, and the watchdog must still get in.
void Watcher::record(std::int64_t e, cudaStream_t caller) {
  devices_.use_device_of(fixed_.local_ranks.empty() ? 0
                                                    : fixed_.local_ranks[0]);  // the events' device
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

std::vector<std::int64_t> Watcher::totals_before(std::int64_t e) const {
  std::vector<std::int64_t> base(totals_size(fixed_), 0);
  const std::int64_t period = fixed_.sequence.period;
  for (std::int64_t t = 0; t < period; ++t) {
    const std::int64_t times = e / period + (t < e % period ? 1 : 0);
    const std::vector<std::int64_t>& add =
        mapping_.templates[static_cast<std::size_t>(t)].additions;
    for (std::size_t i = 0; i < base.size(); ++i)
      base[i] += times * add[i];
  }
  return base;
}

// The ranks whose published abort word is set, one line each (NOTE [CUDA call sequences] 5);
// read on the first reader stream, bounded. Empty without published words.
std::vector<std::string> Watcher::aborted_ranks() const {
  std::vector<std::string> lines;
  if (fixed_.place.abort_word < 0 || fixed_.local_ranks.empty()) return lines;
  std::uint64_t* host = watch->host_abort + 1;
  std::fill(host, host + fixed_.ranks, std::uint64_t{0});
  TIDE_CUDA_CHECK(cudaSetDevice(fixed_.fabric.device_of(fixed_.local_ranks[0])));
  std::uint64_t* relayed = watch->host_abort + 1 + 2 * fixed_.ranks;
  *relayed = 0;
  for (int r = 0; r < fixed_.ranks; ++r) {
    if (aborts_.words[static_cast<std::size_t>(r)] == nullptr) continue;  // relayed
    TIDE_CUDA_CHECK(cudaMemcpyAsync(host + r, aborts_.words[static_cast<std::size_t>(r)], 8,
                                    cudaMemcpyDefault, watch->readers[0]));
  }
  if (aborts_.relay_word != nullptr) {
    TIDE_CUDA_CHECK(
        cudaMemcpyAsync(relayed, aborts_.relay_word, 8, cudaMemcpyDefault, watch->readers[0]));
  }
  if (!completes_in_bound(watch->readers[0])) {
    lines.emplace_back("the ranks' abort words could not be read (the GPU's queues are held)");
    return lines;
  }
  for (int r = 0; r < fixed_.ranks; ++r) {
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
std::vector<std::uint64_t> Watcher::call_tags() const {
  if (fixed_.place.call_tag_word < 0 || fixed_.local_ranks.empty()) return {};
  std::lock_guard read_lock(watch->read_mutex);
  std::uint64_t* host = watch->host_abort + 1 + fixed_.ranks;
  std::fill(host, host + fixed_.ranks, std::uint64_t{0});
  TIDE_CUDA_CHECK(cudaSetDevice(fixed_.fabric.device_of(fixed_.local_ranks[0])));
  for (int r = 0; r < fixed_.ranks; ++r) {
    const std::uint64_t* words = fixed_.fabric.signals(r);
    if (words == nullptr) return {};  // not load/store reachable: nothing to compare
    TIDE_CUDA_CHECK(cudaMemcpyAsync(host + r, words + fixed_.place.call_tag_word, 8,
                                    cudaMemcpyDefault, watch->readers[0]));
  }
  if (!completes_in_bound(watch->readers[0])) return {};
  return {host, host + fixed_.ranks};
}

std::vector<std::string> Watcher::unsatisfied_waits(std::int64_t e) const {
  // The local ranks' words, read on private streams into pinned memory, with a bound: the
  // caller's streams may be blocked behind the stalled call, and a private stream may share
  // a hardware queue with one of its waits.
  std::lock_guard read_lock(watch->read_mutex);
  std::vector<std::string> lines = aborted_ranks();
  const CudaSequenceFaultInjection& faults = fixed_.options.fault_injection;
  if (faults.gate_word != nullptr && fixed_.fabric.local(faults.gate_rank)) {
    const volatile std::uint64_t* gate = host_view(faults.gate_word);
    if (gate != nullptr && *gate < 1) {
      lines.push_back("rank " + std::to_string(faults.gate_rank) + ": held by the test gate");
    }
  }
  std::vector<std::uint64_t> words(totals_size(fixed_), 0);
  const std::size_t n = static_cast<std::size_t>(fixed_.counters);
  for (std::size_t k = 0; k < fixed_.local_ranks.size(); ++k) {
    const int r = fixed_.local_ranks[k];
    std::uint64_t* host = watch->host_words[k];
    TIDE_CUDA_CHECK(cudaSetDevice(fixed_.fabric.device_of(r)));
    TIDE_CUDA_CHECK(cudaMemcpyAsync(host, fixed_.fabric.signals(r) + fixed_.place.first_signal_word,
                                    n * 8, cudaMemcpyDefault, watch->readers[k]));
    if (!completes_in_bound(watch->readers[k])) {
      lines.push_back("its waits could not be read (rank " + std::to_string(r) +
                      "'s word read did not complete: the GPU's queues are held)");
      return lines;
    }
    std::copy(host, host + n, words.begin() + static_cast<std::ptrdiff_t>(r * fixed_.counters));
  }
  const std::vector<std::int64_t> base = totals_before(e);
  const program::Program& p = fixed_.sequence.for_call(e).program;
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
    if (wait == nullptr || !fixed_.fabric.local(wait->counter.rank)) continue;
    const std::size_t total = static_cast<std::size_t>(wait->counter.rank) * n +
                              static_cast<std::size_t>(wait->counter.id);
    const std::int64_t threshold = base[total] + wait->value;
    const auto holds = static_cast<std::int64_t>(words[total]);
    if (threshold <= 0 || holds >= threshold) continue;
    std::string from;
    bool other_process = false;
    for (const int r : signallers[total]) {
      from += (from.empty() ? " (signalled by rank " : ", ") + std::to_string(r);
      other_process = other_process || !fixed_.fabric.local(r);
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

}  // namespace tide::exec::sequence_detail
