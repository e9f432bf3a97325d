// The CUDA sequence runner's watch (NOTE [CUDA call sequences] 5): completion events of the
// latest calls, for a watchdog thread to find a stalled call and release the waits.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace tide::exec::sequence_detail {

struct Watch {
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::int64_t call = 0;
    Clock::time_point enqueued;
    int slot = 0;  // index into `events`
  };
  std::mutex mutex;                   // guards everything below but `released`
  std::deque<Entry> entries;          // oldest first, at most events.size()
  std::vector<cudaEvent_t> events;    // a ring, on the caller's device
  int next = 0;                       // the ring slot the next call records
  std::vector<cudaStream_t> readers;  // per local rank (Fixed::local_ranks order), non-blocking
  // Pinned host words per local rank, twice `counters` + 1: the target of the reads (the
  // words, then the gate), then the source of release_waits(). Never waited for unbounded.
  std::vector<std::uint64_t*> host_words;
  // Pinned: one word holding 1 (the source of the abort words' release), one per rank (the
  // target of reading the ranks' abort words), then one per rank (their call-tag words).
  std::uint64_t* host_abort = nullptr;
  std::mutex read_mutex;  // one reader of the words at a time (Watcher::unsatisfied_waits)
  // Calls < confirmed are known complete (calls run one after another: a completed call's
  // predecessors completed before it).
  std::int64_t confirmed = 0;
  std::int64_t first_void = -1;        // set by release_waits(): the first call not confirmed
  std::atomic<bool> released = false;  // release_waits() ran: every later call is refused
  std::mutex release_mutex;            // one release at a time

  // Pops the completed entries at the front (under `mutex`), advancing `confirmed`.
  void pop_completed() {
    while (!entries.empty() &&
           cudaEventQuery(events[static_cast<std::size_t>(entries.front().slot)]) == cudaSuccess) {
      confirmed = std::max(confirmed, entries.front().call + 1);
      entries.pop_front();
    }
  }
};

// NOTE [CUDA call sequences] 5: for the scope of the guard this thread's stream-capture mode is
// relaxed, so that its event and stream queries never invalidate a capture that another
// thread runs in the global mode (torch.cuda.graph's default).
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace tide::exec::sequence_detail
