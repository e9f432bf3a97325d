// Forked ranks for the ipc tests: the parent never touches CUDA (no context may exist before
// fork); each rank runs in a child process and leaves a one-line report in a scratch folder,
// which the parent reads back once every child has ended.
//
//   std::vector<std::string> reports = run_forked_ranks(3, "ipc-fabric", [&](int rank,
//       const std::filesystem::path& dir) { ...; return std::string("ok"); });
//
// A rank's report is its body's answer, "skip: why" where it threw tide::Unsupported, the
// message of any other exception, or "no report (the process died)".
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "tide/core/error.hpp"

namespace tide::testing {

using ForkedRankBody = std::function<std::string(int rank, const std::filesystem::path& dir)>;

inline std::vector<std::string> run_forked_ranks(int world, const std::string& name,
                                                 const ForkedRankBody& body) {
  std::string pattern = "/tmp/tide-" + name + "-XXXXXX";
  const std::filesystem::path dir(mkdtemp(pattern.data()));
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      std::string report;
      try {
        report = body(rank, dir);
      } catch (const Unsupported& e) {
        report = std::string("skip: ") + e.what();
      } catch (const std::exception& e) {
        report = e.what();
      }
      std::ofstream(dir / ("report." + std::to_string(rank))) << report;
      std::_Exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids)
    waitpid(pid, nullptr, 0);
  std::vector<std::string> reports;
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream in(dir / ("report." + std::to_string(rank)));
    std::stringstream s;
    s << in.rdbuf();
    reports.push_back(s.str().empty() ? "no report (the process died)" : s.str());
  }
  std::filesystem::remove_all(dir);
  return reports;
}

}  // namespace tide::testing
