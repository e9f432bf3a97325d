// The NCCL window fabric's sizing for one program (NOTE [nccl window fabric]): the window a
// program needs is its largest arena rounded to 4 KiB plus its signal words, the same on every
// rank. No GPU.
#include <gtest/gtest.h>

#include "tide/fabric/nccl_window_fabric.hpp"
#include "tide/testing/cases.hpp"

namespace tide::fabric {
namespace {

TEST(NcclWindowFabricSizing, LargestArenaRoundedPlusSignalWords) {
  for (auto [m, l] : {std::pair{1, 2}, std::pair{2, 1}, std::pair{2, 4}}) {
    for (const testing::CollectiveCase& c :
         {testing::ag_case(m, l, 11), testing::rs_case(m, l, 12), testing::step_case(m, l, 13)}) {
      std::int64_t largest = 0;
      for (const program::BufferSizes& b : c.program.buffers)
        largest = std::max(largest, b.arena_bytes);
      const std::int64_t rounded = (largest + 4095) / 4096 * 4096;
      const std::int64_t words = std::max(1, c.program.counters);
      EXPECT_EQ(NcclWindowFabric::required_window_bytes(c.program), rounded + 8 * words) << c.name;
      EXPECT_GT(c.program.counters, 0) << c.name << ": a collective signals";
    }
  }
}

}  // namespace
}  // namespace tide::fabric
