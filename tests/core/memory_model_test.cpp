// Memory model (Sec. 5.4, Eqs. 10-12; Sec. 7.4) at the paper's stated points.
#include "tide/core/memory_model.hpp"

#include <gtest/gtest.h>

#include <cmath>

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
  EXPECT_DOUBLE_EQ(m.ring_and_stage_ns, 2.0 + 63.0 / 512.0);
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
        EXPECT_NEAR(r.slot_reuse_staging_ns, (2.0 * k + 4 * n_par + 5) / (2.0 * m), 1e-12);
      }
    }
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
