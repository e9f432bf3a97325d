// A watchdog thread (NOTE [runtime] 5): every `period` it asks `check` whether a call has
// stalled; the first reason it gets goes to `fire`, once, and the thread ends. The caller's
// thread never polls. Destruction stops and joins the thread. The thread's CUDA calls run in
// the relaxed stream-capture mode (a capture elsewhere in the process is never invalidated
// by its queries). Built with CUDA only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace tide::runtime::detail {

class Watchdog {
 public:
  using Check = std::function<std::optional<std::string>()>;
  using Fire = std::function<void(const std::string& reason)>;

  Watchdog(Check check, Fire fire, std::chrono::milliseconds period);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void loop();

  Check check_;
  Fire fire_;
  std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tide::runtime::detail
