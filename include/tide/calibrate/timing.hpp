// Timing helpers shared by `tide calibrate` and the interference benchmark: a device buffer,
// a stream, and the median of CUDA-event-timed repeats (docs/cli.md, "tide calibrate":
// medians over repeats after warm-up, inputs rotated over more than the L2).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "tide/cuda/check.hpp"

namespace tide::calibrate {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    TIDE_CUDA_CHECK(cudaMalloc(&p_, bytes));
  }
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  template <typename T = unsigned char>
  T* as() const {
    return static_cast<T*>(p_);
  }
  void* get() const { return p_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

class Stream {
 public:
  explicit Stream(int priority = 0) {
    TIDE_CUDA_CHECK(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority));
  }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  operator cudaStream_t() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Milliseconds of each of `reps` calls of fn(i) on `stream`, each between its own event pair,
// after `warmup` untimed calls.
template <typename F>
std::vector<double> timed_ms(cudaStream_t stream, int warmup, int reps, F&& fn) {
  for (int i = 0; i < warmup; ++i)
    fn(i);
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * reps));
  for (cudaEvent_t& e : ev)
    TIDE_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    TIDE_CUDA_CHECK(cudaEventRecord(ev[static_cast<std::size_t>(2 * i)], stream));
    fn(warmup + i);
    TIDE_CUDA_CHECK(cudaEventRecord(ev[static_cast<std::size_t>(2 * i + 1)], stream));
  }
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> out;
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[static_cast<std::size_t>(2 * i)],
                                         ev[static_cast<std::size_t>(2 * i + 1)]));
    out.push_back(ms);
  }
  for (cudaEvent_t& e : ev)
    cudaEventDestroy(e);
  return out;
}

template <typename F>
double median_ms(cudaStream_t stream, int warmup, int reps, F&& fn) {
  return median(timed_ms(stream, warmup, reps, fn));
}

}  // namespace tide::calibrate
