// NOTE [graph wait budget] (src/exec/cuda/graph_wait_budget.hpp) on the CPU: the streams that
// may spin in graph waits at once are counted per device over every runner, a lane's runners
// once (their calls never overlap), and a claim that would pass the limit is refused with a
// reason and records nothing.
#include "graph_wait_budget.hpp"

#include <gtest/gtest.h>

#include <string>

#include "tide/exec/cuda_sequence.hpp"

namespace tide {
namespace {

using exec::sequence_detail::GraphWaitBudget;

TEST(GraphWaitBudget, RunnersWithoutALaneAddUpPerDevice) {
  GraphWaitBudget b(64);
  EXPECT_EQ(b.claim(1, 0, {{0, 48}}), "");
  EXPECT_EQ(b.resident(0), 48);
  const std::string why = b.claim(2, 0, {{0, 48}});
  EXPECT_NE(why.find("96 streams on device 0"), std::string::npos) << why;
  EXPECT_NE(why.find("48 of this sequence, 48 of 1 other lane"), std::string::npos) << why;
  EXPECT_NE(why.find("128 grids"), std::string::npos) << why;
  EXPECT_NE(why.find("at most 64"), std::string::npos) << why;
  EXPECT_NE(why.find("stream path"), std::string::npos) << why;
  EXPECT_NE(why.find("graph_lane"), std::string::npos) << why;
  EXPECT_EQ(b.resident(0), 48) << "a refused claim records nothing";
  EXPECT_EQ(b.claim(3, 0, {{0, 16}}), "") << "exactly the limit fits";
  EXPECT_EQ(b.resident(0), 64);
  EXPECT_EQ(b.claim(4, 0, {{1, 64}}), "") << "another device has its own budget";
  b.release(1);
  EXPECT_EQ(b.resident(0), 16);
  EXPECT_EQ(b.claim(2, 0, {{0, 48}}), "") << "released streams are free again";
}

TEST(GraphWaitBudget, ALaneCountsItsLargestRunner) {
  GraphWaitBudget b(64);
  EXPECT_EQ(b.claim(1, 7, {{0, 48}}), "");
  EXPECT_EQ(b.claim(2, 7, {{0, 40}}), "");
  EXPECT_EQ(b.resident(0), 48);
  EXPECT_EQ(b.claim(3, 7, {{0, 56}}), "");
  EXPECT_EQ(b.resident(0), 56);
  EXPECT_NE(b.claim(4, 8, {{0, 16}}), "") << "56 + 16 > 64";
  EXPECT_EQ(b.claim(4, 8, {{0, 8}}), "");
  EXPECT_EQ(b.resident(0), 64);
  EXPECT_NE(b.claim(5, 0, {{0, 1}}), "") << "a runner without a lane is a lane of its own";
  b.release(3);
  EXPECT_EQ(b.resident(0), 48 + 8);
}

// A claim over two devices is all or nothing.
TEST(GraphWaitBudget, AClaimOverDevicesIsAllOrNothing) {
  GraphWaitBudget b(64);
  EXPECT_EQ(b.claim(1, 0, {{1, 60}}), "");
  const std::string why = b.claim(2, 0, {{0, 8}, {1, 8}});
  EXPECT_NE(why.find("on device 1"), std::string::npos) << why;
  EXPECT_EQ(b.resident(0), 0);
  EXPECT_EQ(b.resident(1), 60);
}

// The runtime's shape: one rank per GPU, 8 streams per runner, 80 groups' all-gather runners
// and the all-gather handoff in lane 1, the reduce-scatter ones in lane 2: 16 in all (counted
// per runner they would be 1,296 and every group past the eighth would lose its graphs).
TEST(GraphWaitBudget, TheRuntimesLanesFitAtOneRankPerGpu) {
  GraphWaitBudget b(exec::CudaSequenceRunner::kMaxGraphWaitStreams);
  std::uint64_t id = 1;
  for (const std::uint64_t lane : {1u, 2u}) {
    EXPECT_EQ(b.claim(id++, lane, {{0, 8}}), "");  // the handoff
    for (int g = 0; g < 80; ++g)
      EXPECT_EQ(b.claim(id++, lane, {{0, 8}}), "") << "group " << g;
  }
  EXPECT_EQ(b.resident(0), 16);
}

}  // namespace
}  // namespace tide
