// The runtime's watchdog thread (src/runtime/watchdog.hpp, NOTE [runtime] 5) on its own, no GPU
// needed: its checks run on its own thread, concurrently with callers' threads, in the relaxed
// stream-capture mode (NOTE [CUDA call sequences] 6); the first reason fires once and the
// thread ends; destruction joins it.
#include "watchdog.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tide {
namespace {

using runtime::detail::Watchdog;

TEST(Watchdog, ChecksOnItsOwnThreadInTheRelaxedCaptureModeAndFiresOnce) {
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> checks = 0;
  std::atomic<int> fired = 0;
  std::atomic<bool> other_thread = true;
  std::atomic<int> mode_seen = -1;  // the check thread's capture mode (-1: CUDA said no)
  std::mutex reason_mutex;
  std::string reason;
  // Two caller threads change state the check reads, as enqueue() does on the runner.
  std::atomic<long> state = 0;
  {
    Watchdog dog(
        [&]() -> std::optional<std::string> {
          if (std::this_thread::get_id() == caller) other_thread = false;
          if (checks == 0) {
            cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
            if (cudaThreadExchangeStreamCaptureMode(&m) == cudaSuccess) {
              mode_seen = static_cast<int>(m);
              (void)cudaThreadExchangeStreamCaptureMode(&m);  // back
            } else {
              (void)cudaGetLastError();
            }
          }
          const long seen = state.load();
          if (++checks == 20) return "stalled at state " + std::to_string(seen);
          return std::nullopt;
        },
        [&](const std::string& r) {
          std::lock_guard lock(reason_mutex);
          reason = r;
          ++fired;
        },
        std::chrono::milliseconds(1));
    std::vector<std::thread> callers;
    for (int t = 0; t < 2; ++t)
      callers.emplace_back([&] {
        for (int i = 0; i < 20000; ++i)
          state.fetch_add(1);
      });
    for (std::thread& t : callers)
      t.join();
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (fired == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // no second check or fire
  }
  EXPECT_TRUE(other_thread) << "a check ran on the caller's thread";
  EXPECT_EQ(checks, 20) << "the thread checked again after firing";
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(reason.rfind("stalled at state ", 0), 0u) << reason;
  if (mode_seen >= 0) {
    EXPECT_EQ(mode_seen, static_cast<int>(cudaStreamCaptureModeRelaxed))
        << "the watchdog's thread is not in the relaxed capture mode";
  } else {
    std::printf("capture mode not checked: CUDA did not answer here (no driver)\n");
  }
}

TEST(Watchdog, DestructionStopsAThreadThatNeverFires) {
  std::atomic<int> checks = 0;
  const auto start = std::chrono::steady_clock::now();
  {
    Watchdog dog(
        [&]() -> std::optional<std::string> {
          ++checks;
          return std::nullopt;
        },
        [](const std::string&) { FAIL() << "fired without a reason"; },
        std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
  }
  EXPECT_GE(checks, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2))
      << "destruction waited for more than the period";
}

}  // namespace
}  // namespace tide
