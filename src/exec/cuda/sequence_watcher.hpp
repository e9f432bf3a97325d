// The runner's watch (step 5 of NOTE [CUDA call sequences], docs/executor.md): a completion
// event per call in a ring (Watch, sequence_watch.hpp), and what the watchdog reads of a
// stalled call: the ranks that aborted, the call tags, the waits not satisfied. Implemented in
// sequence_watcher.cpp; the runner's public watch entry points (stalled, release_waits) are in
// sequence_watch.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sequence_abort_words.hpp"
#include "sequence_devices.hpp"
#include "sequence_mapping.hpp"
#include "sequence_watch.hpp"

namespace tide::exec::sequence_detail {

// The host's view of `p` when it is mapped host memory (read and written with no GPU queue),
// else nullptr.
volatile std::uint64_t* host_view(const std::uint64_t* p);
// Whether `s` completed its work within the watchdog's read bound (a stream aliased onto a
// hardware queue that a stalled wait holds cannot run its reads).
bool completes_in_bound(cudaStream_t s);

class Watcher {
 public:
  Watcher(const Fixed& fixed, Devices& devices, const Mapping& mapping, const AbortWords& aborts)
      : fixed_(fixed), devices_(devices), mapping_(mapping), aborts_(aborts) {}

  // At construction, last: the ring's events, the reader streams, the pinned host words.
  void create();
  void destroy() noexcept;
  bool released() const { return watch->released.load(); }
  // Records call e's completion event on `caller`.
  void record(std::int64_t e, cudaStream_t caller);
  // The waits of call e that its counters do not satisfy, one line each, after the aborted
  // ranks' lines; read on the reader streams, bounded.
  std::vector<std::string> unsatisfied_waits(std::int64_t e) const;
  // Every rank's call-tag word (NOTE [CUDA call sequences] 7), bounded; empty where unread.
  std::vector<std::uint64_t> call_tags() const;

  std::unique_ptr<Watch> watch;  // set by create()

 private:
  std::vector<std::string> aborted_ranks() const;
  std::vector<std::int64_t> totals_before(std::int64_t e) const;

  const Fixed& fixed_;
  Devices& devices_;
  const Mapping& mapping_;
  const AbortWords& aborts_;
};

}  // namespace tide::exec::sequence_detail
