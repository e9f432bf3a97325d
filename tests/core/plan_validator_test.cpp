// Plan validator (Prop. 4.1, App. D): accepts sound plans, rejects collisions with the
// reason, catches injected faults, and the sweep reproduces the paper's counts.
#include "tide/core/plan_validator.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "tide/core/error.hpp"

namespace tide {
namespace {

RsPlan make_plan(int m, int l, int wave_width, int k = 4, RsMode mode = RsMode::kInPlace) {
  RsOptions o;
  o.wave_width = wave_width;
  o.round_width = k;
  o.mode = mode;
  return RsPlan(GroupLayout(Topology(m, l), {{"w", 64 * m * l, 8}}, DType::kBf16, DType::kBf16), o);
}

TEST(PlanValidator, AcceptsDivisorWaveWidths) {
  for (int m : {1, 2, 7, 9, 20, 65}) {
    for (int w : {1, 2, 4, 8}) {
      const RsPlan plan = make_plan(m, 8, w);
      const ValidationResult r = validate_rs_plan(plan);
      EXPECT_TRUE(r.accepted) << "M=" << m << " W=" << w << ": " << r.reason;
    }
  }
}

TEST(PlanValidator, RejectsTheAppendixDCollision) {
  // App. D: M = 9, L = 8, W_wave = 3: wave 2 holds c in {7, 8, 9}; c = 8 and c = 9 (own)
  // both reduce to 0 mod 8.
  const ValidationResult r = validate_rs_plan(make_plan(9, 8, 3));
  ASSERT_FALSE(r.accepted);
  EXPECT_NE(r.reason.find("contributors 8 and 9"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("does not divide L = 8"), std::string::npos) << r.reason;
  // A non-divisor width whose final wave does not straddle a multiple of L is fine.
  EXPECT_TRUE(validate_rs_plan(make_plan(7, 8, 3)).accepted);
}

// The runtime's non-throwing question and the builders' throwing one give the same reason.
TEST(PlanValidator, FallbackReasonAndRequireNameTheCollision) {
  const RsPlan colliding = make_plan(9, 8, 3);
  const std::optional<std::string> why = rs_plan_fallback_reason(colliding);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, validate_rs_plan(colliding).reason);
  try {
    require_valid_plan(colliding);
    ADD_FAILURE() << "require_valid_plan accepted App. D's colliding plan";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(*why), std::string::npos) << e.what();
  }
  const RsPlan sound = make_plan(9, 8, 4);
  EXPECT_FALSE(rs_plan_fallback_reason(sound).has_value());
  EXPECT_NO_THROW(require_valid_plan(sound));
}

// A broken plan reaches the fallback reason without an exception, however it is broken.
TEST(PlanValidator, FallbackReasonNeverThrows) {
  RsPlan plan = make_plan(20, 8, 8);
  plan.waves_for_fault_injection()[1].first_round = 1000;  // a round outside the table
  const std::optional<std::string> why = rs_plan_fallback_reason(plan);
  ASSERT_TRUE(why.has_value());
  EXPECT_FALSE(why->empty());
}

TEST(PlanValidator, CatchesDroppedStaleBlockZeroing) {
  RsPlan plan = make_plan(20, 8, 8);
  ASSERT_TRUE(validate_rs_plan(plan).accepted);
  plan.waves_for_fault_injection()[2].zeroed_blocks[3] &= 0x7F;  // forget one block
  const ValidationResult r = validate_rs_plan(plan);
  ASSERT_FALSE(r.accepted);
  EXPECT_NE(r.reason.find("stale"), std::string::npos) << r.reason;
}

TEST(PlanValidator, CatchesZeroingOfALandingBlock) {
  RsPlan plan = make_plan(20, 8, 8);
  plan.waves_for_fault_injection()[2].zeroed_blocks[0] |= 0x01;  // GPU 0 writes block 0
  const ValidationResult r = validate_rs_plan(plan);
  ASSERT_FALSE(r.accepted);
  EXPECT_NE(r.reason.find("zeroes an inbox block it writes"), std::string::npos) << r.reason;
}

TEST(PlanValidator, CatchesAContributorInTwoWaves) {
  RsPlan plan = make_plan(20, 8, 8);
  plan.waves_for_fault_injection()[1].first_contributor = 8;  // c = 8 lands twice
  EXPECT_FALSE(validate_rs_plan(plan).accepted);
  RsPlan skipped = make_plan(20, 8, 8);
  skipped.waves_for_fault_injection()[1].first_contributor = 10;  // c = 9 never lands
  EXPECT_FALSE(validate_rs_plan(skipped).accepted);
}

TEST(PlanValidator, SweepSmallRangeCountsAndNoViolations) {
  SweepRanges ranges;
  ranges.min_nodes = 2;
  ranges.max_nodes = 64;
  ranges.max_round_width = 4;
  const SweepResult r = sweep_plans(ranges);
  EXPECT_EQ(r.plans, 63 * 8 * 4 * 2);
  EXPECT_EQ(r.accepted + r.rejected, r.plans);
  EXPECT_EQ(r.violations, 0);
  // Brute force over (M, W): collision iff a remote contributor of the final wave is a
  // multiple of L (App. D), which can only happen for W not dividing 8.
  std::int64_t colliding = 0;
  for (int m = 2; m <= 64; ++m) {
    for (int w = 1; w <= 8; ++w) {
      const int first_of_last_wave = ((m + w - 1) / w - 1) * w + 1;
      bool collides = false;
      for (int c = first_of_last_wave; c < m; ++c)
        collides |= c % 8 == 0;
      colliding += collides;
    }
  }
  EXPECT_EQ(r.rejected, colliding * 4 * 2);
}

// App. D's exhaustive regression: M in [2, 1024], W_wave in [1, 8], k in [1, 32], both
// modes, L = 8: 458,304 accepted and 65,472 rejected base plans, zero violations.
TEST(PlanValidator, ExhaustiveSweepReproducesAppendixD) {
  const SweepResult r = sweep_plans(SweepRanges{});
  EXPECT_EQ(r.plans, 523776);
  EXPECT_EQ(r.accepted, 458304);
  EXPECT_EQ(r.rejected, 65472);
  EXPECT_EQ(r.violations, 0);
}

TEST(PlanValidator, PassCountsTwoToFourOnEligiblePlans) {
  for (int passes : {2, 3, 4}) {
    SweepRanges ranges;
    ranges.max_nodes = 128;
    ranges.max_round_width = 8;
    ranges.passes = passes;
    const SweepResult r = sweep_plans(ranges);
    EXPECT_EQ(r.violations, 0) << "n_part = " << passes;
    EXPECT_GT(r.accepted, 0);
  }
}

TEST(PlanValidator, SweepRejectsBadRanges) {
  SweepRanges bad;
  bad.max_wave_width = 9;
  EXPECT_THROW(sweep_plans(bad), InvalidArgument);
  bad = {};
  bad.gpus_per_node = 9;
  bad.max_wave_width = 9;
  EXPECT_THROW(sweep_plans(bad), InvalidArgument);
  bad = {};
  bad.min_nodes = 5;
  bad.max_nodes = 4;
  EXPECT_THROW(sweep_plans(bad), InvalidArgument);
}

}  // namespace
}  // namespace tide
