// NOTE [slot graph policy] (src/exec/cuda/sequence_slot_policy.hpp) on the CPU: per event slot,
// which calls replay, re-point, capture or take the stream path, over call patterns of fresh
// and unchanged bindings; above all, a slot whose graph cannot take fresh bindings never
// churns captures (the runner once dropped the graph at every fresh call and re-captured it
// at the next unchanged one: 7 captures in 26 calls).
#include "sequence_slot_policy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "slot_policy_model.hpp"

namespace tide {
namespace {

using exec::sequence_detail::capture_run;
using exec::sequence_detail::slot_step;
using exec::sequence_detail::SlotStep;
using exec::sequence_detail::SlotView;
using sequence_testing::run_slot;
using sequence_testing::SlotModel;

TEST(SlotGraphPolicy, Rules) {
  SlotView v;
  EXPECT_EQ(slot_step(v), SlotStep::kStream) << "a slot's first call";
  v.seen = true;
  v.run = 2;
  EXPECT_EQ(slot_step(v), SlotStep::kCapture) << "second visit, unchanged";
  v.run = 1;
  EXPECT_EQ(slot_step(v), SlotStep::kStream) << "second visit, fresh, cannot re-point";
  v.may_repoint = true;
  EXPECT_EQ(slot_step(v), SlotStep::kCapture) << "second visit, fresh, can re-point";
  v.graph = true;
  v.captures = 1;
  EXPECT_EQ(slot_step(v), SlotStep::kRepoint);
  v.graph_same = true;
  EXPECT_EQ(slot_step(v), SlotStep::kReplay);
  v.graph_same = false;
  v.may_repoint = false;
  EXPECT_EQ(slot_step(v), SlotStep::kStream) << "fresh: the graph is kept, not dropped";
  v.run = 3;
  EXPECT_EQ(slot_step(v), SlotStep::kStream);
  v.run = 4;
  EXPECT_EQ(slot_step(v), SlotStep::kCapture) << "new bindings stable for 4 calls";
  v.graph = false;  // dropped after a failed node update
  v.run = 2;
  EXPECT_EQ(slot_step(v), SlotStep::kStream);
  v.run = 4;
  EXPECT_EQ(slot_step(v), SlotStep::kCapture);
  EXPECT_EQ(capture_run(0), 2);
  EXPECT_EQ(capture_run(1), 4);
  EXPECT_EQ(capture_run(2), 8);
  EXPECT_GT(capture_run(40), 1 << 30);
}

// Pairs of equal bindings, each pair new (A A B B C C ...): the pattern that re-captured at
// every pair. One capture; the rest on the stream path.
TEST(SlotGraphPolicy, PairsOfFreshBindingsCaptureOnce) {
  std::vector<int> pattern;
  for (int k = 0; k < 13; ++k)
    pattern.insert(pattern.end(), {k, k});
  const SlotModel m = run_slot(pattern, false);
  EXPECT_EQ(m.captures, 1);
  EXPECT_EQ(m.replays, 0);
  EXPECT_EQ(m.streams, 25);
}

// Fresh bindings every call: never a capture where they cannot be re-pointed; one capture
// and re-points from then on where they can.
TEST(SlotGraphPolicy, FreshBindingsEveryCall) {
  std::vector<int> pattern;
  for (int k = 0; k < 26; ++k)
    pattern.push_back(k);
  const SlotModel fixed = run_slot(pattern, false);
  EXPECT_EQ(fixed.captures, 0);
  EXPECT_EQ(fixed.launches(), 0);
  const SlotModel moving = run_slot(pattern, true);
  EXPECT_EQ(moving.captures, 1);
  EXPECT_EQ(moving.repoints, 24);
  EXPECT_EQ(moving.streams, 1);
}

// Fresh calls between unchanged ones (A A B A C A ...): the graph of A is kept across the
// fresh calls and every A after the capture replays it.
TEST(SlotGraphPolicy, TheGraphSurvivesFreshCalls) {
  std::vector<int> pattern{0, 0};
  for (int k = 1; k <= 12; ++k)
    pattern.insert(pattern.end(), {k, 0});
  const SlotModel m = run_slot(pattern, false);
  EXPECT_EQ(m.captures, 1);
  EXPECT_EQ(m.replays, 12);
  EXPECT_EQ(m.streams, 13);
}

// Warm-up bindings, then other bindings that stay (a caching allocator's steady state): the
// slot re-captures once the new ones came 4 calls in a row, and replays them from then on.
TEST(SlotGraphPolicy, ANewSteadyStateIsCapturedAgain) {
  std::vector<int> pattern{0, 0};
  pattern.insert(pattern.end(), 20, 1);
  const SlotModel m = run_slot(pattern, false);
  EXPECT_EQ(m.captures, 2);
  EXPECT_EQ(m.streams, 1 + 3);
  EXPECT_EQ(m.replays, 20 - 4);
  EXPECT_EQ(m.held, 1);
}

// Any pattern: a slot that cannot re-point captures at most about log2 of its calls.
TEST(SlotGraphPolicy, CapturesGrowLogarithmically) {
  std::mt19937_64 rng(12345);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int> pattern;
    const int n = 1 + static_cast<int>(rng() % 2000);
    int b = 0;
    while (static_cast<int>(pattern.size()) < n) {
      const int len = 1 + static_cast<int>(rng() % (trial % 2 == 0 ? 4 : 40));
      b = static_cast<int>(rng() % 3) == 0 ? b : b + 1;  // sometimes the same run goes on
      pattern.insert(pattern.end(), static_cast<std::size_t>(len), b);
    }
    const SlotModel m = run_slot(pattern, false);
    // Capture k + 1 needs a run of 2^(k+1) calls, so captures c take >= 2^(c+1) - 2 calls.
    EXPECT_LE(m.captures, static_cast<int>(std::log2(static_cast<double>(pattern.size()) + 2)))
        << "trial " << trial << ": " << pattern.size() << " calls";
  }
}

}  // namespace
}  // namespace tide
