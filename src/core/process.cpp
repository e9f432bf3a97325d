#include "tide/core/process.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "tide/core/error.hpp"

namespace tide {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

bool process_alive(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return false;
  std::string line;
  std::getline(in, line);
  const std::size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

pid_t fork_child(const std::function<int()>& body, bool die_with_parent) {
  const pid_t pid = fork();
  if (pid < 0) throw InvalidArgument("fork failed: " + std::string(std::strerror(errno)));
  if (pid > 0) return pid;
  if (die_with_parent) prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
  int status = 1;
  try {
    status = body();
  } catch (...) {
    status = 1;
  }
  std::_Exit(status);
}

pid_t spawn_child(const std::string& path, const std::vector<std::string>& argv,
                  const std::vector<std::string>& env, const std::string& what) {
  std::vector<std::string> argv_text(argv), env_text(env);
  std::vector<char*> args, envp;
  for (std::string& a : argv_text)
    args.push_back(a.data());
  args.push_back(nullptr);
  for (std::string& e : env_text)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, path.c_str(), nullptr, nullptr, args.data(), envp.data());
  if (rc != 0) throw std::runtime_error(what + ": " + std::strerror(rc));
  return pid;
}

int exit_code(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

std::vector<ChildExit> run_processes(int count, const std::function<pid_t(int)>& start,
                                     const WaitPolicy& policy) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  std::vector<pid_t> pids;
  try {
    for (int i = 0; i < count; ++i)
      pids.push_back(start(i));
  } catch (...) {
    for (pid_t p : pids)
      kill(p, SIGKILL);
    throw;
  }
  std::vector<ChildExit> exits(pids.size());
  std::vector<bool> ended(pids.size(), false);
  std::size_t running = pids.size();
  std::optional<Clock::time_point> first_failure;
  bool terminated = false;
  while (running > 0) {
    int wstatus = 0;
    const pid_t done = waitpid(-1, &wstatus, WNOHANG);
    if (done > 0) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != done) continue;
        exits[i] = {wstatus, std::chrono::duration<double>(Clock::now() - started).count()};
        ended[i] = true;
        --running;
        if (policy.on_exit) policy.on_exit(static_cast<int>(i), wstatus);
        if (exit_code(wstatus) != 0 && !first_failure) first_failure = Clock::now();
      }
      continue;
    }
    if (policy.deadline && Clock::now() > *policy.deadline) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (!ended[i]) kill(pids[i], SIGKILL);
      }
    }
    if (policy.failure_grace && first_failure &&
        Clock::now() - *first_failure > *policy.failure_grace) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (!ended[i]) kill(pids[i], terminated ? SIGKILL : SIGTERM);
      }
      if (!terminated && policy.on_stop) policy.on_stop();
      terminated = true;
      first_failure = Clock::now() - *policy.failure_grace + std::chrono::seconds(5);  // SIGKILL
    }
    std::this_thread::sleep_for(policy.poll);
  }
  return exits;
}

}  // namespace tide
