// The CUDA sequence runner's watch (NOTE [CUDA call sequences] 5): completion events of the
// latest calls, for a watchdog thread to find a stalled call and release the waits.
#pragma once

#include <cuda_runtime_api.h>

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
  std::mutex mutex;                   // guards everything below
  std::deque<Entry> entries;          // oldest first, at most events.size()
  std::vector<cudaEvent_t> events;    // a ring, on the caller's device
  int next = 0;                       // the ring slot the next call records
  std::vector<cudaStream_t> readers;  // per local rank (State::local_ranks order), non-blocking
  // Pinned host words per local rank, twice `counters` + 1: the target of the reads (the
  // words, then the gate), then the source of release_waits(). Never waited for unbounded.
  std::vector<std::uint64_t*> host_words;
  bool released = false;  // release_waits() ran: every later call is refused
};

}  // namespace tide::exec::sequence_detail
