// NOTE [runtime] 5: the watchdog thread.
#include "watchdog.hpp"

#include <cuda_runtime_api.h>

#include <exception>
#include <utility>

namespace tide::runtime::detail {

Watchdog::Watchdog(Check check, Fire fire, std::chrono::milliseconds period)
    : check_(std::move(check)), fire_(std::move(fire)), period_(period) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::loop() {
  // Every CUDA call of this thread (the checks' event and stream queries, the abort's copies)
  // in the relaxed stream-capture mode: a capture that another thread runs in the global mode
  // (torch.cuda.graph's default) is never invalidated by them (NOTE [CUDA call sequences] 6).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    std::optional<std::string> reason;
    try {
      reason = check_();
    } catch (const std::exception& e) {
      reason = std::string("the watchdog's check failed: ") + e.what();
    }
    if (reason) {
      try {
        fire_(*reason);
      } catch (...) {  // nothing can be reported from this thread beyond what fire_ printed
      }
      return;
    }
    lock.lock();
  }
}

}  // namespace tide::runtime::detail
