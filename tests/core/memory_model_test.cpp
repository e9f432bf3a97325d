// Memory model (Sec. 5.4, Eqs. 9-12; Sec. 7.4) at the paper's stated points, and its schedule
// terms (n_out, n_par) against the plan's. tests/program/arena_model_test.cpp checks the model
// against the runtime's arena.
#include "tide/core/memory_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "../support/test_seed.hpp"
#include "tide/core/error.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/rs_defaults.hpp"
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

// No network rounds on one node: n_out = 0 (Eq. 9 with no rounds) and no inbox. The multi-node
// layout at M = 1 (RsOptions::one_node off) holds the same areas in both modes,
// (n_stg L b_grad / 4 + 2) S_fp32, on top of the slots and the stage.
TEST(MemoryModel, OneNodeMultiNodeLayoutHasNoOutboxAndNoInbox) {
  for (int l : {1, 2, 4, 8}) {
    MemoryModelInput in;
    in.nodes = 1;
    in.gpus_per_node = l;
    in.one_node = false;
    const MemoryModel m = evaluate_memory_model(in);
    EXPECT_FALSE(m.one_node);
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

// The one-node form (the runtime's layout at M = 1) without a shard size: the ring's bound,
// kOneNodeStagingNs NS, on top of the two ring slots; nothing else.
TEST(MemoryModel, OneNodeFormWithoutShardIsTheRingBound) {
  for (int l : {1, 2, 4, 8}) {
    MemoryModelInput in;
    in.nodes = 1;
    in.gpus_per_node = l;
    const MemoryModel m = evaluate_memory_model(in);
    EXPECT_TRUE(m.one_node);
    EXPECT_EQ(m.in_place_outbox, 0);
    EXPECT_EQ(m.slot_reuse_outbox, 0);
    EXPECT_EQ(m.inbox_generations, 0);
    EXPECT_FALSE(m.staging_ring_bytes.has_value());
    const double ring = l == 1 ? 0.0 : kOneNodeStagingNs;  // L = 1 stages nothing
    EXPECT_DOUBLE_EQ(m.in_place_staging_ns, ring);
    EXPECT_DOUBLE_EQ(m.slot_reuse_staging_ns, ring);
    EXPECT_DOUBLE_EQ(m.in_place_staging_blocks, ring * l / 2);  // an S_fp32 block is 2 / L NS
    EXPECT_DOUBLE_EQ(m.ring_and_stage_ns, 2.0);
    EXPECT_DOUBLE_EQ(m.slot_reuse_total_ns, 2.0 + ring);
    EXPECT_DOUBLE_EQ(m.in_place_total_ns, 3.0 + ring);
    EXPECT_DOUBLE_EQ(m.fsdp2_total_ns, 4.0);
  }
}

// With a shard size the one-node ring is the one RsPlan lays out at the solver's defaults, byte
// for byte, on random groups, gradient dtypes, passes and slot counts.
TEST(MemoryModel, OneNodeRingIsThePlans) {
  const tide::testing::TestSeed seed;
  std::cout << "MemoryModel.OneNodeRingIsThePlans seed " << seed.value() << "\n";
  std::mt19937_64 rng = seed.engine();
  std::uniform_int_distribution<std::int64_t> rows(1, 20000);
  std::uniform_int_distribution<std::int64_t> cols(1, 5000);
  for (int trial = 0; trial < 400; ++trial) {
    const int l = 1 + static_cast<int>(rng() % 8);
    std::vector<ParamShape> params;
    const int count = 1 + static_cast<int>(rng() % 5);
    for (int p = 0; p < count; ++p)
      params.push_back({"p" + std::to_string(p), rows(rng), rng() % 4 == 0 ? 1 : cols(rng)});
    const DType grad = rng() % 3 == 0 ? DType::kFp32 : DType::kBf16;
    const GroupLayout layout(Topology(1, l), params, DType::kBf16, grad);
    RsOptions o;
    o.one_node = true;
    o.mode = rng() % 2 == 0 ? RsMode::kInPlace : RsMode::kSlotReuse;
    o.passes = 1 + static_cast<int>(rng() % 3);
    o.staging_slots = 1 + static_cast<int>(rng() % 3);
    const RsPlan plan(layout, with_solver_defaults(o, layout));
    MemoryModelInput in;
    in.nodes = 1;
    in.gpus_per_node = l;
    in.passes = o.passes;
    in.staging_slots = o.staging_slots;
    in.grad_bytes = static_cast<int>(item_bytes(grad));
    in.shard_bytes = layout.shard_bytes();  // bf16: S
    const MemoryModel m = evaluate_memory_model(in);
    SCOPED_TRACE("L " + std::to_string(l) + " E " + std::to_string(layout.shard_elems()) +
                 " passes " + std::to_string(o.passes) + " n_stg " +
                 std::to_string(o.staging_slots));
    ASSERT_TRUE(m.staging_ring_bytes.has_value());
    EXPECT_EQ(*m.staging_ring_bytes, plan.memory().staging_bytes);
    EXPECT_EQ(plan.memory().total(), plan.memory().staging_bytes) << "the ring is all";
    const double ns = static_cast<double>(layout.shard_bytes() * l);
    EXPECT_DOUBLE_EQ(m.slot_reuse_total_ns, 2.0 + static_cast<double>(*m.staging_ring_bytes) / ns);
    EXPECT_DOUBLE_EQ(m.in_place_total_ns, m.slot_reuse_total_ns + 1.0);
    // Contract 8: within 0.25 NS, or the ring's floor of kOneNodeMinRingBytes, where the floor
    // of kOneNodeMinChunk columns does not bind.
    const std::int64_t per_column = std::int64_t{o.staging_slots} * (l - 1) * item_bytes(grad);
    const double bound = std::max(kOneNodeStagingNs * ns, kOneNodeMinRingBytes);
    if (static_cast<double>(per_column) * kOneNodeMinChunk <= bound) {
      EXPECT_LE(static_cast<double>(*m.staging_ring_bytes), bound);
    }
  }
}

// The one-node goal for a Llama-3.1-8B decoder layer at L = 2, 4 and 8 (the runtime's defaults):
// one layer's backward holds at most 3.5 NS In-Place and 2.5 NS Slot-Reuse, against stock
// FSDP2's 4 NS.
TEST(MemoryModel, OneNodeGoalOnLlamaLayer) {
  const std::vector<ParamShape> layer = {
      {"q", 4096, 4096},     {"k", 1024, 4096},     {"v", 1024, 4096},
      {"o", 4096, 4096},     {"gate", 14336, 4096}, {"up", 14336, 4096},
      {"down", 4096, 14336}, {"in_norm", 4096, 1},  {"post_norm", 4096, 1}};
  for (int l : {2, 4, 8}) {
    MemoryModelInput in;
    in.nodes = 1;
    in.gpus_per_node = l;
    in.shard_bytes = GroupLayout(Topology(1, l), layer, DType::kBf16, DType::kBf16).shard_bytes();
    const MemoryModel m = evaluate_memory_model(in);
    SCOPED_TRACE("L = " + std::to_string(l));
    EXPECT_TRUE(m.one_node);
    EXPECT_LE(m.in_place_total_ns, 3.5);
    EXPECT_LE(m.slot_reuse_total_ns, 2.5);
    EXPECT_LT(m.slot_reuse_total_ns, m.in_place_total_ns);
    EXPECT_DOUBLE_EQ(m.fsdp2_total_ns, 4.0);
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
  // The Sec. 7.4 comparison is the multi-node layout's at every M.
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
