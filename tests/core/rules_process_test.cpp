// The rules the binding exports (tide/core/rules.hpp) and the process launcher
// (tide/core/process.hpp) on the CPU.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "tide/core/process.hpp"
#include "tide/core/rules.hpp"

namespace tide {
namespace {

TEST(Rules, NcclEnvironmentRefusesMulticastAndNoCuMem) {
  EXPECT_EQ(nccl_environment_refusal(nullptr, nullptr), "");
  EXPECT_EQ(nccl_environment_refusal("0", "1"), "");
  EXPECT_EQ(nccl_environment_refusal("1", nullptr).rfind("NCCL_NVLS_ENABLE=1 lets NCCL use", 0),
            0u);
  EXPECT_EQ(nccl_environment_refusal(nullptr, "0").rfind("NCCL_CUMEM_ENABLE=0 turns off", 0), 0u);
  EXPECT_TRUE(nccl_multicast_requested(""));  // set but empty: NCCL's default, not 0
  EXPECT_FALSE(nccl_multicast_requested(nullptr));
  EXPECT_EQ(kNcclFabricMinVersion[0], 2);
  EXPECT_EQ(kNcclFabricMinVersion[1], 28);
  EXPECT_EQ(kMaxParamsPerGroup, 256);
}

TEST(Processes, EveryChildsExitIsReportedInOrder) {
  const std::vector<ChildExit> exits = run_processes(
      3, [](int i) { return fork_child([i] { return i; }, /*die_with_parent=*/true); }, {});
  ASSERT_EQ(exits.size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(exit_code(exits[static_cast<std::size_t>(i)].wait_status), i) << "child " << i;
}

TEST(Processes, AFailureStopsTheOthersAfterTheGrace) {
  WaitPolicy policy;
  policy.failure_grace = std::chrono::seconds(0);
  int stops = 0;
  policy.on_stop = [&] { ++stops; };
  const auto started = std::chrono::steady_clock::now();
  const std::vector<ChildExit> exits = run_processes(
      2,
      [](int i) {
        return fork_child(
            [i] {
              if (i == 0) return 3;
              pause();  // until a signal ends it
              return 0;
            },
            true);
      },
      policy);
  EXPECT_EQ(exit_code(exits[0].wait_status), 3);
  EXPECT_EQ(exit_code(exits[1].wait_status), 128 + SIGTERM);
  EXPECT_EQ(stops, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
}

TEST(Processes, ADeadlineKillsWhatStillRuns) {
  WaitPolicy policy;
  policy.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  const std::vector<ChildExit> exits = run_processes(
      1,
      [](int) {
        return fork_child(
            [] {
              pause();
              return 0;
            },
            true);
      },
      policy);
  EXPECT_TRUE(WIFSIGNALED(exits[0].wait_status));
  EXPECT_EQ(WTERMSIG(exits[0].wait_status), SIGKILL);
}

TEST(Processes, ASpawnThatCannotStartNamesItself) {
  try {
    run_processes(
        1, [](int) { return spawn_child("/nonexistent/tide", {"tide"}, {}, "spawn: rank 0"); }, {});
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("spawn: rank 0: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace tide
