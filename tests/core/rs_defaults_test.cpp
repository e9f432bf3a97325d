// The reduce-scatter's defaults (rs_defaults.hpp): rounds in flight, the sizing solver's choice
// on App. G's rates, lockstep on one host; the staging chunk, its n_stg slots within one fp32
// block and below FSDP2's fp32 packing buffer; and what the runtime and the CLI take for a group.
#include "tide/core/rs_defaults.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "test_seed.hpp"
#include "tide/core/error.hpp"
#include "tide/core/models.hpp"

namespace tide {
namespace {

constexpr int kL = 8;

// App. G's calibration written out (not read from kDefaultMachineRates): the defaults must be it.
SolverInput app_g_input(int m, int l, std::int64_t shard_bytes, int grad_bytes) {
  SolverInput in;
  in.bw_nic_gbps = 47.5;
  in.bw_sum_gbps = 99;
  in.bw_land_gbps = 21;
  in.bw_cap_gbps = 90;
  in.t_round_ms = 1.3;
  in.nodes = m;
  in.gpus_per_node = l;
  in.shard_bytes = shard_bytes;
  in.grad_bytes = grad_bytes;
  return in;
}

// One Llama-3.1-70B decoder layer at M x L: its layout (bf16 gradients).
GroupLayout llama70b_layer(int m, int l = kL) {
  return GroupLayout(Topology(m, l), find_model_group("llama3.1-70b").params, DType::kBf16,
                     DType::kBf16);
}

TEST(RsDefaults, MachineRatesAreAppGsCalibration) {
  EXPECT_EQ(kDefaultMachineRates.bw_nic_gbps, 47.5);
  EXPECT_EQ(kDefaultMachineRates.bw_sum_gbps, 99.0);
  EXPECT_EQ(kDefaultMachineRates.bw_land_gbps, 21.0);
  EXPECT_EQ(kDefaultMachineRates.bw_cap_gbps, 90.0);
  EXPECT_EQ(kDefaultMachineRates.t_round_ms, 1.3);
}

TEST(RsDefaults, EqualsTheSolversChoice) {
  int deeper = 0;  // topologies where the solver leaves lockstep: the test must see some
  for (int m : {1, 2, 8, 16, 64}) {
    const std::int64_t llama = llama70b_layer(m).grad_shard_bytes();
    for (std::int64_t shard :
         {llama, std::int64_t{32} << 20, std::int64_t{1} << 20, std::int64_t{4096}}) {
      for (int grad_bytes : {2, 4}) {
        const std::string what = std::to_string(m) + " x 8, S = " + std::to_string(shard) +
                                 " bytes, b_grad = " + std::to_string(grad_bytes);
        const SolverResult want = solve_sizing(app_g_input(m, kL, shard, grad_bytes));
        const RsPacing got = default_rs_pacing(Topology(m, kL), grad_bytes, shard);
        EXPECT_EQ(got.rounds_in_flight, want.rounds_in_flight) << what;
        EXPECT_EQ(got.round_width, want.round_width) << what;
        EXPECT_GE(got.rounds_in_flight, 1) << what;
        EXPECT_LE(got.rounds_in_flight, kMaxRoundsInFlight) << what;
        if (got.rounds_in_flight > 1) {
          ++deeper;
          // Contract 4: d > 1 only after widening as far as it cuts rounds, so the plan's
          // k = 4 (RsOptions' default) has the rounds the solver sized d for.
          EXPECT_EQ(network_rounds(m - 1, got.round_width, kL),
                    network_rounds(m - 1, RsOptions{}.round_width, kL))
              << what;
        }
      }
    }
  }
  EXPECT_GT(deeper, 0);
}

TEST(RsDefaults, OneHostIsLockstep) {
  // M = 1: no network rounds, so nothing on one host changes.
  for (int l : {1, 2, 4, 8}) {
    for (std::int64_t shard :
         {std::int64_t{0}, std::int64_t{2}, std::int64_t{4096}, std::int64_t{1} << 30}) {
      for (int grad_bytes : {2, 4}) {
        EXPECT_EQ(default_rs_pacing(Topology(1, l), grad_bytes, shard).rounds_in_flight, 1)
            << "1 x " << l << ", S = " << shard;
      }
    }
    const GroupLayout layout = llama70b_layer(1, l);
    EXPECT_EQ(with_default_rounds_in_flight(RsOptions{}, layout).rounds_in_flight, 1);
  }
}

TEST(RsDefaults, Llama70bLayerChoices) {
  // The solver's d for one Llama-3.1-70B layer's shard at M x 8 (the k = 4 rounds: 1, 1, 2, 4,
  // 16 at M = 1, 2, 8, 16, 64; bench/results/simulate/scaling.md).
  struct Want {
    int m, d;
  };
  for (const Want w : {Want{1, 1}, Want{2, 1}, Want{8, 2}, Want{16, 2}, Want{64, 4}}) {
    const GroupLayout layout = llama70b_layer(w.m);
    const RsOptions o = with_default_rounds_in_flight(RsOptions{}, layout);
    EXPECT_EQ(o.rounds_in_flight, w.d) << w.m << " x 8";
    EXPECT_EQ(o.rounds_in_flight,
              solve_sizing(app_g_input(w.m, kL, layout.grad_shard_bytes(), 2)).rounds_in_flight);
    // Only d and the staging chunk change.
    EXPECT_EQ(o.staging_chunk_elems, default_staging_chunk_elems(layout, RsOptions{}));
    EXPECT_EQ(o.round_width, RsOptions{}.round_width);
    EXPECT_EQ(o.mode, RsOptions{}.mode);
    EXPECT_EQ(o.sub_slices, RsOptions{}.sub_slices);
  }
}

TEST(RsDefaults, FollowsTheOptionsRoundAndWaveWidth) {
  // k_max is the plan's round width, W_wave its wave width.
  const GroupLayout layout = llama70b_layer(64);
  RsOptions o;
  o.round_width = 2;
  o.wave_width = 4;
  SolverInput in = app_g_input(64, kL, layout.grad_shard_bytes(), 2);
  in.max_round_width = 2;
  in.wave_width = 4;
  const SolverResult want = solve_sizing(in);
  EXPECT_EQ(want.round_width, 2);
  EXPECT_EQ(with_default_rounds_in_flight(o, layout).rounds_in_flight, want.rounds_in_flight);
  // k = 1: the solver starts no wider than k_max.
  in.max_round_width = 1;
  EXPECT_EQ(solve_sizing(in).round_width, 1);
  o.round_width = 1;
  EXPECT_EQ(with_default_rounds_in_flight(o, layout).rounds_in_flight,
            solve_sizing(in).rounds_in_flight);
}

// Contract 5: n_stg (L - 1) R C b_grad <= R E_pass 4 with C the largest such multiple of v.
std::int64_t staging_bytes_at(const GroupLayout& layout, RsOptions o, std::int64_t chunk) {
  o.staging_chunk_elems = chunk;
  return RsPlan(layout, o).memory().staging_bytes;
}

TEST(RsDefaults, StagingChunkLlama70bLayer) {
  // One Llama-3.1-70B layer at M x 8, n_stg = 2. bf16 gradients: a whole part stages
  // 2 x 7 x E_pass x 2 bytes, 7 fp32 blocks, under B_pack = 8 M blocks: one chunk, as before.
  // fp32 gradients: 14 blocks, above B_pack at M = 1 (8 blocks): two chunks of E_pass / 2,
  // 7 blocks; one from M = 2 on (16 blocks).
  for (int m : {1, 2, 8, 64}) {
    for (DType grad : {DType::kBf16, DType::kFp32}) {
      const GroupLayout layout(Topology(m, kL), find_model_group("llama3.1-70b").params, grad,
                               grad);
      const std::string what =
          std::to_string(m) + " x 8, b_grad " + std::to_string(item_bytes(grad));
      const RsOptions o = with_solver_defaults(RsOptions{}, layout);
      const RsPlan plan(layout, o);
      const std::int64_t pass = plan.pass_elems();
      const std::int64_t whole = staging_bytes_at(layout, o, pass);
      EXPECT_EQ(whole, 14 * pass * static_cast<std::int64_t>(item_bytes(grad))) << what;
      const bool split = grad == DType::kFp32 && m == 1;
      EXPECT_EQ(plan.chunk_elems(), split ? (pass / 2 + 3) / 4 * 4 : pass) << what;
      EXPECT_LE(plan.memory().staging_bytes, layout.pack_buffer_bytes()) << what;
      EXPECT_EQ(whole > layout.pack_buffer_bytes(), split) << what;
    }
  }
}

TEST(RsDefaults, StagingChunkKeepsAnExplicitOne) {
  const GroupLayout layout(Topology(1, kL), find_model_group("llama3.1-70b").params, DType::kFp32,
                           DType::kFp32);
  RsOptions o;
  o.staging_chunk_elems = 4096;
  EXPECT_EQ(with_solver_defaults(o, layout).staging_chunk_elems, 4096);
  EXPECT_LT(with_solver_defaults(RsOptions{}, layout).staging_chunk_elems,
            RsPlan(layout, RsOptions{}).pass_elems());
}

// For random groups, topologies and plan options from a printed seed: the default chunk follows
// contract 5 exactly (written out below), stages at most FSDP2's fp32 packing buffer
// B_pack = N S_fp32 (Eq. 3) for every group of at least 4 n_stg L v elements per rank, never
// more than the whole part, and in the fewest chunks that fit: one fewer would not.
TEST(RsDefaults, StagingChunkWithinFsdp2sPackingBuffer) {
  const testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  int against_pack = 0, chunked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int m = std::vector<int>{1, 1, 1, 2, 3, 4, 8}[static_cast<std::size_t>(pick(0, 6))];
    const int l = static_cast<int>(pick(1, 8));
    std::vector<ParamShape> params;
    const int count = static_cast<int>(pick(1, 24));
    const std::int64_t scale = std::int64_t{1} << pick(0, 10);  // tiny to Llama-wide rows
    for (int p = 0; p < count; ++p) {
      params.push_back({"p" + std::to_string(p), pick(1, 64 * scale), pick(1, 4 * scale)});
    }
    const DType grad = pick(0, 2) ? DType::kFp32 : DType::kBf16;
    const GroupLayout layout(Topology(m, l), params, grad, grad);
    RsOptions o;
    o.mode = pick(0, 1) ? RsMode::kInPlace : RsMode::kSlotReuse;
    o.sub_slices = static_cast<RsSubSlices>(pick(0, static_cast<int>(kLastSubSlices)));
    o.passes = static_cast<int>(pick(1, 3));
    o.staging_slots = static_cast<int>(pick(1, 4));
    o.wave_width = static_cast<int>(pick(0, l));
    const std::string what =
        std::to_string(m) + " x " + std::to_string(l) + ", " + std::to_string(count) +
        " params, E_live " + std::to_string(layout.shard_elems()) + ", b_grad " +
        std::to_string(item_bytes(grad)) + ", " + std::string(sub_slices_name(o.sub_slices)) +
        ", n_part " + std::to_string(o.passes) + ", n_stg " + std::to_string(o.staging_slots);
    const RsOptions d = with_solver_defaults(o, layout);
    const RsPlan plan(layout, d);
    const std::int64_t chunk = plan.chunk_elems();
    const std::int64_t pass = plan.pass_elems();
    const std::int64_t v = o.vector_elems;
    const std::int64_t per_column = std::int64_t{o.staging_slots} * (l - 1) * plan.block_rows() *
                                    static_cast<std::int64_t>(item_bytes(grad));
    ASSERT_EQ(d.staging_chunk_elems, default_staging_chunk_elems(layout, o)) << what;
    ASSERT_EQ(with_default_rounds_in_flight(o, layout).staging_chunk_elems, chunk) << what;
    // Contract 5, written out.
    std::int64_t want = pass;
    if (per_column > 0) {
      const std::int64_t c_pack = std::max(v, layout.pack_buffer_bytes() / per_column / v * v);
      if (c_pack < pass) {
        const std::int64_t c = (pass + c_pack - 1) / c_pack;
        want = std::min(c_pack, ((pass + c - 1) / c + v - 1) / v * v);
      }
    }
    ASSERT_EQ(chunk, want) << what;
    const RsMemory mem = plan.memory();
    EXPECT_EQ(mem.staging_bytes, per_column * chunk) << what;
    EXPECT_LE(mem.staging_bytes, staging_bytes_at(layout, d, pass)) << what;
    const std::int64_t chunks = (pass + chunk - 1) / chunk;
    if (chunks > 1) {  // the fewest: one chunk fewer would stage more than B_pack
      ++chunked;
      const std::int64_t wider = ((pass + chunks - 2) / (chunks - 1) + v - 1) / v * v;
      EXPECT_GT(per_column * std::min(wider, pass), layout.pack_buffer_bytes()) << what;
    }
    if (layout.shard_elems() >= 4 * o.staging_slots * l * v) {
      ++against_pack;
      EXPECT_LE(mem.staging_bytes, layout.pack_buffer_bytes()) << what;
    }
  }
  // The draw must exercise both: groups held to B_pack, and split parts.
  EXPECT_GT(against_pack, 100);
  EXPECT_GT(chunked, 20);
}

TEST(RsDefaults, RejectsBadInput) {
  EXPECT_THROW(default_rs_pacing(Topology(8, 8), 2, -1), InvalidArgument);
  EXPECT_THROW(default_rs_pacing(Topology(8, 8), 3, 4096), InvalidArgument);
  EXPECT_THROW(default_rs_pacing(Topology(8, 8), 2, 4096, 0), InvalidArgument);
  EXPECT_THROW(default_rs_pacing(Topology(8, 8), 2, 4096, 4, 9), InvalidArgument);
}

}  // namespace
}  // namespace tide
