// Memory model (Sec. 5.4, Eqs. 9-12; Sec. 7.4) at the paper's stated points, and its schedule
// terms (n_out, n_par) against the plan's. tests/program/arena_model_test.cpp checks the model
// against the runtime's arena.
#include "tide/core/memory_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tide/core/error.hpp"
#include "tide/core/rs_plan.hpp"

namespace tide {
namespace {

MemoryModelInput at(int m, int n_par, int k, int l = 8) {
  MemoryModelInput in;
  in.nodes = m;
  in.gpus_per_node = l;
  in.inbox_generations = n_par;
  in.round_width = k;
  return in;
}

double round2(double x) {
  return std::round(x * 100) / 100;
}

TEST(MemoryModel, PaperPointM64) {
  // Sec. 5.4: at M = 64, n_par = 2, k = 4: 0.594 NS and 0.164 NS of staging; per-layer
  // backward 3.72 NS (In-Place) and 2.29 NS (Slot-Reuse) against FSDP2's 4 NS.
  const MemoryModel m = evaluate_memory_model(at(64, 2, 4));
  EXPECT_DOUBLE_EQ(m.in_place_staging_blocks, 2 * 64 + 8 * 2 + 8);
  EXPECT_DOUBLE_EQ(m.slot_reuse_staging_blocks, 4 * 4 + 8 * 2 + 10);
  EXPECT_DOUBLE_EQ(m.in_place_staging_ns, 0.59375);
  EXPECT_DOUBLE_EQ(m.slot_reuse_staging_ns, 0.1640625);
  EXPECT_DOUBLE_EQ(m.ring_and_stage_ns, 2.0 + 1.0 / 8);  // (2 + 1/L) NS
  EXPECT_DOUBLE_EQ(round2(m.in_place_total_ns), 3.72);
  EXPECT_DOUBLE_EQ(round2(m.slot_reuse_total_ns), 2.29);
  EXPECT_DOUBLE_EQ(m.fsdp2_total_ns, 4.0);
  EXPECT_DOUBLE_EQ(m.fsdp2_pack_ns, 2.0);
}

TEST(MemoryModel, ClosedFormsEq11AndEq12AtL8) {
  for (int m : {2, 3, 8, 16, 64, 1000}) {
    for (int n_par : {1, 2}) {
      for (int k : {1, 2, 4, 8}) {
        const MemoryModel r = evaluate_memory_model(at(m, n_par, k));
        EXPECT_NEAR(r.in_place_staging_ns, 0.5 + (2.0 * n_par + 2) / m, 1e-12);
        // Eq. 12 is Eq. 10 with n_out = 2k: two full rounds back to back, which waves of 8
        // contributors give from M = 2 W_wave + 1 on for every k <= 8.
        if (m > 16) {
          EXPECT_EQ(r.slot_reuse_outbox, 2 * k);
          EXPECT_NEAR(r.slot_reuse_staging_ns, (2.0 * k + 4 * n_par + 5) / (2.0 * m), 1e-12);
        }
      }
    }
  }
}

// Eq. 9 and the inbox generations from the schedule, against the plan's own tables
// (RsPlan::outbox_depth() and generations(), computed from its waves and rounds).
TEST(MemoryModel, ScheduleTermsAreThePlans) {
  for (int l = 1; l <= 8; ++l) {
    for (int m = 1; m <= 20; ++m) {
      const GroupLayout g(Topology(m, l), {{"w", 37, 5}}, DType::kBf16, DType::kBf16);
      for (int w = 1; w <= l; ++w) {
        for (int k = 1; k <= 5; ++k) {
          for (int passes = 1; passes <= 3; ++passes) {
            const MemorySchedule s = memory_schedule(m, l, k, w, passes);
            for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
              RsOptions o;
              o.mode = mode;
              o.wave_width = w;
              o.round_width = k;
              o.passes = passes;
              const RsPlan plan(g, o);
              SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(l) + " W " + std::to_string(w) +
                           " k " + std::to_string(k) + " passes " + std::to_string(passes) + " " +
                           std::string(mode_name(mode)));
              EXPECT_EQ(mode == RsMode::kInPlace ? s.in_place_outbox : s.slot_reuse_outbox,
                        plan.outbox_depth());
              EXPECT_EQ(s.waves, static_cast<int>(plan.waves().size()));
              EXPECT_EQ(s.rounds, static_cast<int>(plan.rounds().size()));
              // The plan's generations are the switch-reduce landing's; the pull landing
              // lays out none on one node (NOTE [no inbox on one node]).
              EXPECT_EQ(s.inbox_generations, m == 1 ? 0 : plan.generations());
            }
          }
        }
      }
    }
  }
}

// No network rounds on one node: n_out = 0 (Eq. 9 with no rounds) and no inbox, so both modes
// hold the same areas, (n_stg L b_grad / 4 + 2) S_fp32.
TEST(MemoryModel, OneNodeHasNoOutboxAndNoInbox) {
  for (int l : {1, 2, 4, 8}) {
    MemoryModelInput in;
    in.nodes = 1;
    in.gpus_per_node = l;
    const MemoryModel m = evaluate_memory_model(in);
    EXPECT_EQ(m.in_place_outbox, 0);
    EXPECT_EQ(m.slot_reuse_outbox, 0);
    EXPECT_EQ(m.inbox_generations, 0);
    const double blocks = 2.0 * l * 2 / 4 + 2;
    EXPECT_DOUBLE_EQ(m.in_place_staging_blocks, blocks);
    EXPECT_DOUBLE_EQ(m.slot_reuse_staging_blocks, blocks);
    const double ns = 2.0 + 1.0 / l + blocks * 2.0 / l;
    EXPECT_DOUBLE_EQ(m.slot_reuse_total_ns, ns);
    EXPECT_DOUBLE_EQ(m.in_place_total_ns, ns + 1);  // + the previous layer's gradients
  }
}

TEST(MemoryModel, BytesFromShardSize) {
  MemoryModelInput in = at(8, 1, 4);
  in.shard_bytes = std::int64_t{32} << 20;
  const MemoryModel m = evaluate_memory_model(in);
  ASSERT_TRUE(m.ns_bytes.has_value());
  EXPECT_EQ(*m.ns_bytes, 64 * (std::int64_t{32} << 20));
}

TEST(MemoryModel, BufferScalingFixedOutput) {
  const auto rows = buffer_scaling({1, 2, 8, 64}, 8, 4, 8, 2);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].inbox_generations, 0);           // no inbox on one node
  EXPECT_DOUBLE_EQ(rows[0].in_place_blocks, 8 + 2);  // staging and spares only
  EXPECT_DOUBLE_EQ(rows[0].slot_reuse_blocks, 8 + 2);
  EXPECT_DOUBLE_EQ(rows[3].fsdp2_blocks, 512);  // one fp32 block per GPU
  EXPECT_EQ(rows[1].inbox_generations, 1);
  EXPECT_EQ(rows[3].inbox_generations, 2);
  EXPECT_DOUBLE_EQ(rows[2].in_place_blocks, 2 * 8 + 8 + 8);        // 2M + 8 n_par + 8
  EXPECT_DOUBLE_EQ(rows[3].slot_reuse_blocks, 4 * 4 + 16 + 10);    // flat in M
  EXPECT_DOUBLE_EQ(rows[1].slot_reuse_blocks, 8 + 8 + 2 * 1 + 2);  // n_out capped at M - 1
}

// The exact accounting of a concrete plan stays within Eq. 10's bound (up to the vector
// alignment of E_sub), for both modes.
TEST(MemoryModel, ConcretePlanWithinEq10) {
  for (int m : {2, 5, 8, 17, 64}) {
    const GroupLayout g(Topology(m, 8), {{"w", 8192, 1000}, {"b", 8192, 1}}, DType::kBf16,
                        DType::kBf16);
    for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
      RsOptions o;
      o.mode = mode;
      const RsPlan plan(g, o);
      const double s_fp32 = static_cast<double>(g.fp32_shard_bytes());
      const double slack = 8.0 * o.vector_elems * 4;  // alignment of one block
      const double blocks = 4.0 * 2 + 8.0 * plan.generations() + 2.0 * plan.outbox_depth() + 2;
      EXPECT_LE(static_cast<double>(plan.memory().total()), blocks * (s_fp32 + slack))
          << "M = " << m << " mode " << mode_name(mode);
    }
  }
}

TEST(MemoryModel, RejectsBadInput) {
  EXPECT_THROW(evaluate_memory_model(at(0, 2, 4)), InvalidArgument);
  EXPECT_THROW(evaluate_memory_model(at(4, 3, 4)), InvalidArgument);
  EXPECT_THROW(evaluate_memory_model(at(4, 2, 0)), InvalidArgument);
  EXPECT_THROW(evaluate_memory_model(at(4, 2, 4, 9)), InvalidArgument);
  MemoryModelInput bad = at(4, 2, 4);
  bad.shard_bytes = -5;
  EXPECT_THROW(evaluate_memory_model(bad), InvalidArgument);
}

}  // namespace
}  // namespace tide
