// The reduce-scatter's default rounds in flight (rs_defaults.hpp): the sizing solver's choice on
// App. G's rates, lockstep on one host, and what the runtime and the CLI take for a group.
#include "tide/core/rs_defaults.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

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
    // Only d changes.
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

TEST(RsDefaults, RejectsBadInput) {
  EXPECT_THROW(default_rs_pacing(Topology(8, 8), 2, -1), InvalidArgument);
  EXPECT_THROW(default_rs_pacing(Topology(8, 8), 3, 4096), InvalidArgument);
  EXPECT_THROW(default_rs_pacing(Topology(8, 8), 2, 4096, 0), InvalidArgument);
  EXPECT_THROW(default_rs_pacing(Topology(8, 8), 2, 4096, 4, 9), InvalidArgument);
}

}  // namespace
}  // namespace tide
