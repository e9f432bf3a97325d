// Launcher glue (NOTE [launch]): rank discovery from each launcher's variables, and the
// unique-id rendezvous between two ranks (threads standing in for processes). No GPU.
#include "tide/fabric/launch.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include "tide/core/error.hpp"

namespace tide::fabric {
namespace {

// Unsets every launcher variable for the test's duration and restores nothing (tests only).
void clear_launcher_environment() {
  for (const char* v :
       {"TIDE_RANK", "TIDE_WORLD", "TIDE_LOCAL_RANK", "TIDE_RENDEZVOUS", "RANK", "WORLD_SIZE",
        "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_RESTART_COUNT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"})
    unsetenv(v);
}

TEST(Launch, NoLauncherMeansNoRank) {
  clear_launcher_environment();
  EXPECT_FALSE(launched_rank_from_environment().has_value());
}

TEST(Launch, ReadsTorchrunWithItsDefaultRendezvous) {
  clear_launcher_environment();
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "node7", 1);
  setenv("MASTER_PORT", "29500", 1);
  const auto me = launched_rank_from_environment();
  ASSERT_TRUE(me.has_value());
  EXPECT_EQ(me->launcher, "torchrun");
  EXPECT_EQ(me->rank, 3);
  EXPECT_EQ(me->world, 8);
  EXPECT_EQ(me->local_rank, 1);
  EXPECT_EQ(me->rendezvous, "/tmp/tide-rendezvous-node7-29500-none-0");
  setenv("TIDE_RENDEZVOUS", "/shared/run42", 1);
  EXPECT_EQ(launched_rank_from_environment()->rendezvous, "/shared/run42");
  clear_launcher_environment();
}

TEST(Launch, TideSpawnerWinsOverOpenMpiAndMpich) {
  clear_launcher_environment();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("PMI_RANK", "0", 1);
  setenv("PMI_SIZE", "2", 1);
  EXPECT_EQ(launched_rank_from_environment()->launcher, "openmpi");
  setenv("TIDE_RANK", "0", 1);
  setenv("TIDE_WORLD", "2", 1);
  EXPECT_EQ(launched_rank_from_environment()->launcher, "tide");
  clear_launcher_environment();
  setenv("PMI_RANK", "1", 1);
  setenv("PMI_SIZE", "4", 1);
  const auto me = launched_rank_from_environment();
  EXPECT_EQ(me->launcher, "mpich");
  EXPECT_EQ(me->local_rank, 1);  // no local rank given: the rank
  clear_launcher_environment();
}

TEST(Launch, RejectsValuesThatDoNotParseOrFit) {
  clear_launcher_environment();
  setenv("RANK", "two", 1);
  setenv("WORLD_SIZE", "4", 1);
  EXPECT_THROW(launched_rank_from_environment(), InvalidArgument);
  setenv("RANK", "4", 1);
  EXPECT_THROW(launched_rank_from_environment(), InvalidArgument);
  setenv("RANK", "-1", 1);
  EXPECT_THROW(launched_rank_from_environment(), InvalidArgument);
  clear_launcher_environment();
}

TEST(Launch, UniqueIdTravelsFromRankZeroThroughTheRendezvousDirectory) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tide-launch-test-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  LaunchedRank r0{0, 2, 0, dir.string(), "tide"};
  LaunchedRank r1{1, 2, 1, dir.string(), "tide"};
  const std::vector<std::byte> id{std::byte{7}, std::byte{0}, std::byte{255}, std::byte{42}};
  // Rank 1 starts polling before rank 0 publishes.
  auto peer = std::async(std::launch::async, [&] {
    return exchange_unique_id(r1, {}, std::chrono::milliseconds(5000));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(exchange_unique_id(r0, id, std::chrono::milliseconds(5000)), id);
  EXPECT_EQ(peer.get(), id);
  std::filesystem::remove_all(dir);
}

TEST(Launch, MissingRankZeroTimesOutNamingTheFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tide-launch-none-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  LaunchedRank r1{1, 2, 1, dir.string(), "tide"};
  try {
    exchange_unique_id(r1, {}, std::chrono::milliseconds(100));
    ADD_FAILURE() << "no rank 0 published, yet the exchange returned";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("nccl-unique-id"), std::string::npos) << e.what();
  }
  LaunchedRank lost{1, 2, 1, "", "torchrun"};
  EXPECT_THROW(exchange_unique_id(lost, {}, std::chrono::milliseconds(100)), InvalidArgument);
}

}  // namespace
}  // namespace tide::fabric
