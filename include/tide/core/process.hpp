// Whether a process of this host runs (NOTE [runtime] 5), this host's name, and TIDE's one
// process launcher (start N children, wait for all, stop the rest past a deadline or failure).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tide {

// This host's name (gethostname); empty where it cannot be read.
std::string host_name();

// False for a pid that is absent, a zombie or dead (read from /proc/<pid>/stat).
bool process_alive(int pid);

// A fork running `body` (no exec: CUDA must not be initialised before) that _Exits with its
// return; with `die_with_parent` SIGKILLed when the parent ends. InvalidArgument if fork fails.
pid_t fork_child(const std::function<int()>& body, bool die_with_parent);

// posix_spawn of `path` with `argv` (argv[0] included) and exactly `env` ("NAME=value");
// std::runtime_error (`what`, then the error) where it cannot start.
pid_t spawn_child(const std::string& path, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env, const std::string& what);

// How run_processes waits.
struct WaitPolicy {
  std::chrono::milliseconds poll{5};
  // Past it, every child still running is killed (SIGKILL).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // This long after the first child that did not exit 0: SIGTERM (on_stop once), 5 s later SIGKILL.
  std::optional<std::chrono::seconds> failure_grace;
  std::function<void(int index, int wait_status)> on_exit;  // each child as it ends
  std::function<void()> on_stop;
};

// One child's end: its wait status (waitpid) and the seconds from the launch to its end.
struct ChildExit {
  int wait_status = -1;
  double seconds = 0;
};

// Starts `count` children by `start(i)` and waits for all under `policy`; where a start throws,
// the started ones are SIGKILLed and the error propagates.
std::vector<ChildExit> run_processes(int count, const std::function<pid_t(int)>& start,
                                     const WaitPolicy& policy);

// A wait status as an exit code: the exit status, or 128 + the signal that ended the child.
int exit_code(int wait_status);

}  // namespace tide
