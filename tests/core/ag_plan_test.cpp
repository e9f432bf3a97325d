// TIDE-AG plan (Sec. 3.1): Bruck rounds, receive-stage slots, strided scatter merging,
// descriptor counts and pacing, against hand-computed cases and a data-movement simulation.
#include "tide/core/ag_plan.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "test_seed.hpp"
#include "tide/core/error.hpp"
#include "tide/core/plan_validator.hpp"

namespace tide {
namespace {

GroupLayout make_group(int m, int l, std::vector<ParamShape> shapes, DType ag = DType::kBf16) {
  return GroupLayout(Topology(m, l), std::move(shapes), ag, DType::kBf16);
}

TEST(AgPlan, CeilLog2) {
  EXPECT_EQ(ceil_log2(1), 0);
  EXPECT_EQ(ceil_log2(2), 1);
  EXPECT_EQ(ceil_log2(5), 3);
  EXPECT_EQ(ceil_log2(64), 6);
  EXPECT_EQ(ceil_log2(65), 7);
}

TEST(AgPlan, BruckRoundsForFiveNodes) {  // Fig. 5a: M = 5 in 3 rounds
  const GroupLayout g = make_group(5, 2, {{"w", 20, 3}});
  const AgPlan plan(g, {});
  ASSERT_EQ(plan.rounds().size(), 3u);
  const int expected_slots[] = {1, 2, 1};  // c_d = min(2^d, M - 2^d)
  int total = 0;
  for (int d = 0; d < 3; ++d) {
    const AgRound& r = plan.rounds()[static_cast<std::size_t>(d)];
    EXPECT_EQ(r.slot_count, expected_slots[d]);
    EXPECT_EQ(r.first_slot, 1 << d);
    EXPECT_EQ(r.peer_distance, 1 << d);
    EXPECT_EQ(r.paced, d >= 1);
    EXPECT_EQ(r.bytes, r.slot_count * g.shard_bytes());
    total += r.slot_count;
  }
  EXPECT_EQ(total, 4);                                 // sum c_d = M - 1
  EXPECT_EQ(plan.stage_bytes(), 4 * g.shard_bytes());  // (M - 1) S
  EXPECT_EQ(plan.source_node(3, 4), 2);
}

TEST(AgPlan, StageSizeWithCastAndSingleNode) {
  const GroupLayout g = make_group(6, 8, {{"w", 100, 5}}, DType::kBf16);
  AgOptions cast;
  cast.mixed_precision_cast = true;
  EXPECT_EQ(AgPlan(g, {}).stage_bytes(), 5 * g.shard_bytes());
  EXPECT_EQ(AgPlan(g, cast).stage_bytes(), 6 * g.shard_bytes());  // M S with a cast
  EXPECT_EQ(AgPlan(g, cast).stage_slot_offset(0), 0);
  EXPECT_EQ(AgPlan(g, {}).stage_slot_offset(1), 0);
  const GroupLayout single = make_group(1, 8, {{"a", 64, 64}, {"b", 8, 1}, {"c", 3, 3}});
  const AgPlan p1(single, {});
  EXPECT_TRUE(p1.rounds().empty());
  EXPECT_EQ(p1.stage_bytes(), 0);
  // One batched copy of P descriptors per destination: 8 unicast destinations or 1 multicast.
  const AgDescriptorCounts c = p1.descriptor_counts(0);
  EXPECT_EQ(c.per_destination, 3);
  EXPECT_EQ(c.unicast, 24);
  EXPECT_EQ(c.multicast, 3);
}

TEST(AgPlan, LastRoundSplitIntoAtMostFourGroups) {
  const AgPlan plan(make_group(64, 8, {{"w", 512, 8}}), {});
  ASSERT_EQ(plan.rounds().size(), 6u);
  EXPECT_EQ(plan.rounds().back().slot_count, 32);
  std::vector<std::pair<int, int>> groups;
  for (const AgSlotGroup& g : plan.slot_groups())
    groups.emplace_back(g.first_slot, g.slot_count);
  const std::vector<std::pair<int, int>> expected = {{1, 1},  {2, 2},  {4, 4},  {8, 8}, {16, 16},
                                                     {32, 8}, {40, 8}, {48, 8}, {56, 8}};
  EXPECT_EQ(groups, expected);
  // M = 13: the last round has c = 5 slots, too few to split into mergeable parts.
  const AgPlan p13(make_group(13, 8, {{"w", 104, 8}}), {});
  EXPECT_EQ(p13.rounds().back().slot_count, 5);
  EXPECT_EQ(p13.slot_groups().back().slot_count, 5);
}

// Hand count at M = 64, P = 3, node 0 (no wrap): own shard P, rounds 0-1 flat (1 + 2 slots),
// rounds 2-4 one strided copy each, round 5 four strided groups: (1 + 3 + 3 + 4) P = 11 P.
TEST(AgPlan, DescriptorCountIsOrderPLogM) {
  const AgPlan plan(make_group(64, 8, {{"a", 512, 8}, {"b", 512, 1}, {"c", 100, 3}}), {});
  EXPECT_EQ(plan.descriptor_counts(0).per_destination, 33);
  EXPECT_EQ(plan.descriptor_counts(0).flat_multicast, 64 * 3);
  EXPECT_EQ(plan.descriptor_counts(0).flat_unicast, 64 * 3 * 8);
  // A node whose runs wrap back to node 0 splits at most one run per group.
  for (int n = 1; n < 64; ++n) {
    // Each group costs at most min(size, 6) P (two runs of at most 3 flat slots each).
    EXPECT_LE(plan.descriptor_counts(n).per_destination, 3 * (1 + 1 + 2 + 4 + 6 + 6 + 4 * 6));
  }
}

TEST(AgPlan, HeadTailSplit) {
  AgOptions options;
  options.head_bytes = 1000;
  const GroupLayout g = make_group(4, 1, {{"w", 4 * 300, 1}});  // S = 600 bytes
  const AgPlan plan(g, options);
  ASSERT_EQ(plan.rounds().size(), 2u);
  EXPECT_EQ(plan.rounds()[0].head_bytes, 600);  // whole transfer fits the head budget
  EXPECT_EQ(plan.rounds()[0].tail_bytes, 0);
  EXPECT_EQ(plan.rounds()[1].head_bytes, 1000);
  EXPECT_EQ(plan.rounds()[1].tail_bytes, 200);
  EXPECT_EQ(AgOptions{}.head_bytes, 8 << 20);  // 8 MiB of heads by default
}

TEST(AgPlan, RejectsBadOptions) {
  const GroupLayout g = make_group(4, 2, {{"w", 8, 8}});
  AgOptions bad;
  bad.min_strided_run = 1;
  EXPECT_THROW(AgPlan(g, bad), InvalidArgument);
  bad = {};
  bad.head_bytes = -1;
  EXPECT_THROW(AgPlan(g, bad), InvalidArgument);
}

// NOTE [1-byte all-gather items]: an fp8 group's stage, rounds and scatter copies carry half a
// bf16 group's bytes, in the same rounds and descriptors; the cast writes bf16 only.
TEST(AgPlan, OneByteItemsHalveStageRoundsAndCopies) {
  const std::vector<ParamShape> shapes = {{"w", 100, 5}, {"b", 7, 1}, {"m", 33, 3}};
  const AgPlan bf16(make_group(6, 8, shapes, DType::kBf16), {});
  const AgPlan fp8(make_group(6, 8, shapes, DType::kFp8), {});
  EXPECT_EQ(fp8.layout().shard_bytes(), 15 + 1 + 3);  // N = 48: R_p K_p = 3 x 5, 1 x 1, 1 x 3
  EXPECT_EQ(2 * fp8.stage_bytes(), bf16.stage_bytes());
  EXPECT_EQ(fp8.stage_bytes(), 5 * fp8.layout().shard_bytes());
  ASSERT_EQ(fp8.rounds().size(), bf16.rounds().size());
  for (std::size_t d = 0; d < fp8.rounds().size(); ++d)
    EXPECT_EQ(2 * fp8.rounds()[d].bytes, bf16.rounds()[d].bytes) << d;
  const auto a = fp8.scatter_copies(2, 3), b = bf16.scatter_copies(2, 3);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(2 * a[i].width, b[i].width);
    EXPECT_EQ(2 * a[i].dst_offset, b[i].dst_offset);
    EXPECT_EQ(2 * a[i].src_pitch, b[i].src_pitch);
  }
  EXPECT_EQ(fp8.max_descriptor_counts().unicast, bf16.max_descriptor_counts().unicast);
  AgOptions cast;
  cast.mixed_precision_cast = true;
  for (const DType ag : {DType::kFp8, DType::kU8, DType::kFp32}) {
    try {
      AgPlan(make_group(2, 2, shapes, ag), cast);
      FAIL() << dtype_name(ag);
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("give it bf16"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(AgPlan(make_group(2, 2, shapes, DType::kBf16), cast));
}

// Property: simulate Bruck's rounds slot by slot, then every scatter copy of every rank.
// Each node must end with slot i holding node (n + i) mod M, and on every node, the
// scatters of its L GPUs must write every (parameter, rank) shard exactly once at Eq. 2's
// address, reading it from the stage slot (or resident shard) that holds it.
TEST(AgPlan, PropertyEveryShardLandsExactlyOnce) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int trial = 0; trial < 150; ++trial) {
    const int m = static_cast<int>(rng() % 40) + 1;
    const int l = static_cast<int>(rng() % 8) + 1;
    std::vector<ParamShape> shapes(rng() % 6 + 1);
    for (auto& s : shapes) {
      s.rows = static_cast<std::int64_t>(rng() % 50) + 1;
      s.cols = static_cast<std::int64_t>(rng() % 5) + 1;
    }
    AgOptions options;
    options.mixed_precision_cast = rng() % 2;
    const GroupLayout g = make_group(m, l, shapes);
    const AgPlan plan(g, options);
    const Topology& t = g.topology();
    const ValidationResult checked = validate_ag_plan(plan);
    EXPECT_TRUE(checked.accepted) << "M=" << m << " L=" << l << ": " << checked.reason;
    EXPECT_FALSE(ag_plan_fallback_reason(plan).has_value());

    // Bruck: slots[n][i] = which node's shard node n holds in slot i (-1: not yet).
    std::vector<std::vector<int>> slots(static_cast<std::size_t>(m), std::vector<int>(m, -1));
    for (int n = 0; n < m; ++n)
      slots[n][0] = n;
    for (const AgRound& r : plan.rounds()) {
      auto next = slots;
      for (int n = 0; n < m; ++n) {
        const int target = mod(n - r.peer_distance, m);
        for (int i = 0; i < r.slot_count; ++i) {
          ASSERT_NE(slots[n][i], -1) << "node " << n << " forwards a slot it does not have";
          ASSERT_EQ(next[target][r.first_slot + i], -1) << "slot written twice";
          next[target][r.first_slot + i] = slots[n][i];
        }
      }
      slots = std::move(next);
    }
    for (int n = 0; n < m; ++n) {
      for (int i = 0; i < m; ++i)
        ASSERT_EQ(slots[n][i], plan.source_node(n, i));
    }

    for (int n = 0; n < m; ++n) {
      std::map<std::pair<int, int>, int> landed;  // (param, rank) -> times written
      for (int local = 0; local < l; ++local) {
        for (const AgScatterCopy& c : plan.scatter_copies(n, local)) {
          EXPECT_EQ(c.width, g.param(c.param).shard_bytes);
          EXPECT_EQ(c.from_resident, c.first_slot == 0 && !options.mixed_precision_cast);
          for (int h = 0; h < c.height; ++h) {
            const int slot = c.first_slot + h;
            const int rank = t.rank(plan.source_node(n, slot), local);
            EXPECT_EQ(c.dst_offset + h * c.dst_pitch, g.landing_offset(c.param, rank));
            const std::int64_t src = c.src_offset + h * c.src_pitch;
            const std::int64_t slot_base = c.from_resident ? 0 : plan.stage_slot_offset(slot);
            EXPECT_EQ(src, slot_base + g.param(c.param).offset);
            ++landed[{c.param, rank}];
          }
          if (c.height > 1) {
            EXPECT_GE(c.height, options.min_strided_run);
          }
        }
      }
      ASSERT_EQ(landed.size(), static_cast<std::size_t>(g.param_count() * t.world()));
      for (const auto& [key, times] : landed)
        EXPECT_EQ(times, 1);
    }
  }
}

}  // namespace
}  // namespace tide
