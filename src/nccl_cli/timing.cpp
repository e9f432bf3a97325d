// Timing for tide-nccl (timing.hpp).
#include "timing.hpp"

#include <algorithm>

#include "tide/cuda/check.hpp"

namespace tide::nccl_cli {

Stats stats_of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
  };
  return {at(0.5), at(0.1), at(0.9)};
}

double event_ms(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaEvent_t a = nullptr, b = nullptr;
  TIDE_CUDA_CHECK(cudaEventCreate(&a));
  TIDE_CUDA_CHECK(cudaEventCreate(&b));
  TIDE_CUDA_CHECK(cudaEventRecord(a, stream));
  enqueue();
  TIDE_CUDA_CHECK(cudaEventRecord(b, stream));
  TIDE_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return ms;
}

Stats measure(RankSession& session, int warmup, int repeats, const std::function<double()>& once) {
  std::vector<double> ms;
  for (int k = 0; k < warmup + repeats; ++k) {
    session.barrier("before a timed repeat");
    const double t = once();
    const double slowest = session.max_over_ranks(t, "the time of a repeat");
    if (k >= warmup) ms.push_back(slowest);
  }
  return stats_of(ms);
}

}  // namespace tide::nccl_cli
