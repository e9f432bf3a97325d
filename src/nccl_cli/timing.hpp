// Timing for tide-nccl's probe and bench: CUDA-event times of enqueued work, and the slowest
// rank's time per repeat (a collective is as slow as its slowest rank), summarised as median
// and p10/p90.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "session.hpp"

namespace tide::nccl_cli {

struct Stats {
  double median = 0, p10 = 0, p90 = 0;
};

Stats stats_of(std::vector<double> values);

// Milliseconds between CUDA events recorded on `stream` around what `enqueue` puts there.
double event_ms(cudaStream_t stream, const std::function<void()>& enqueue);

// `warmup` untimed then `repeats` timed calls of `once` (which returns this rank's ms), each
// after a barrier; per repeat the slowest rank's time.
Stats measure(RankSession& session, int warmup, int repeats, const std::function<double()>& once);

}  // namespace tide::nccl_cli
