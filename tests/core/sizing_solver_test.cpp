// Sizing solver (App. G, Eqs. 13-14): the paper's calibration must give its choices.
#include "tide/core/sizing_solver.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "tide/core/error.hpp"

namespace tide {
namespace {

SolverInput paper_calibration() {
  SolverInput in;
  in.bw_nic_gbps = 47.5;
  in.bw_sum_gbps = 99;
  in.bw_land_gbps = 21;
  in.bw_cap_gbps = 90;
  in.t_round_ms = 1.3;
  in.nodes = 8;
  in.gpus_per_node = 8;
  in.shard_bytes = std::int64_t{32} << 20;  // a 32 MiB bf16 gradient shard
  return in;
}

TEST(SizingSolver, PaperEightNodeSystemPicksKFourAndFourSumCtas) {
  const SolverResult r = solve_sizing(paper_calibration());
  EXPECT_EQ(r.sum_ctas, 4);                     // Sec. 6.3: "four sum CTAs"
  EXPECT_EQ(r.round_width, 4);                  // Sec. 6.3: "k = 4"
  EXPECT_EQ(r.landing_ctas, 4);                 // floor(90 / 21): the training configuration's 4
  EXPECT_DOUBLE_EQ(r.level1_rate_factor, 5.0);  // 8 bf16 reads + 1 fp32 write per 4 B
  EXPECT_NEAR(r.sum_ctas_exact, 1.5 * 5 * 47.5 / 99, 1e-12);
  EXPECT_EQ(r.landing_cap_ctas, 4);
  EXPECT_EQ(r.fp32_shard_bytes, std::int64_t{64} << 20);
  EXPECT_NEAR(r.t_nic_ms, 7.0 * (64 << 20) / 47.5e6, 1e-9);
  ASSERT_EQ(r.round_width_steps.size(), 2u);
  EXPECT_EQ(r.round_width_steps[0].round_width, 2);
  EXPECT_EQ(r.round_width_steps[0].rounds, 4);
  EXPECT_TRUE(r.round_width_steps[0].widened);
  EXPECT_EQ(r.round_width_steps[1].rounds, 2);
}

TEST(SizingSolver, RoundsInFlightHideTheRoundWaitsBehindLaterTransfers) {
  // 8 x 8, 32 MiB: k = 4 leaves 2 rounds whose 2.6 ms of waits exceed 10% of t_NIC, so a
  // round's wait (1.3 ms) is hidden behind the next round's transfer (t_NIC / 2): d = 2.
  SolverInput in = paper_calibration();
  SolverResult r = solve_sizing(in);
  EXPECT_EQ(r.rounds, 2);
  EXPECT_NEAR(r.round_transfer_ms, r.t_nic_ms / 2, 1e-12);
  EXPECT_EQ(r.rounds_in_flight, 1 + static_cast<int>(std::ceil(1.3 / (r.t_nic_ms / 2))));
  EXPECT_EQ(r.rounds_in_flight, 2);
  // 128 x 8 with a Llama layer's shard (3,342,336 bytes): 32 rounds of 0.56 ms each, so each
  // wait needs 3 later rounds: d = 1 + ceil(1.3 / 0.5585) = 4.
  in.nodes = 128;
  in.shard_bytes = 3342336;
  r = solve_sizing(in);
  EXPECT_EQ(r.round_width, 4);
  EXPECT_EQ(r.rounds, 32);
  const double t_round = 127.0 * 2 * 3342336 / 47.5e6 / 32;
  EXPECT_NEAR(r.round_transfer_ms, t_round, 1e-9);
  EXPECT_EQ(r.rounds_in_flight, 1 + static_cast<int>(std::ceil(1.3 / t_round)));
  EXPECT_EQ(r.rounds_in_flight, 4);
  // Cheap waits stay lockstep.
  in.t_round_ms = 0.001;
  EXPECT_EQ(solve_sizing(in).rounds_in_flight, 1);
  // Never more rounds in flight than rounds: a huge t_rnd at 8 x 8 caps d at 2.
  in = paper_calibration();
  in.t_round_ms = 500;
  EXPECT_EQ(solve_sizing(in).rounds_in_flight, solve_sizing(in).rounds);
}

TEST(SizingSolver, NetworkRounds) {
  EXPECT_EQ(network_rounds(7, 2, 8), 4);
  EXPECT_EQ(network_rounds(7, 4, 8), 2);
  EXPECT_EQ(network_rounds(63, 4, 8), 16);  // 8 waves, each 2 rounds (last has 7 remote)
  EXPECT_EQ(network_rounds(0, 4, 8), 0);
  EXPECT_EQ(network_rounds(9, 32, 4), 3);  // waves {1..4}, {5..8}, {9, own}
}

TEST(SizingSolver, RoundWidthStaysNarrowWhenWaitsAreCheap) {
  SolverInput in = paper_calibration();
  in.t_round_ms = 0.01;
  EXPECT_EQ(solve_sizing(in).round_width, 2);
  in.nodes = 2;  // one remote contribution: k = min(2, M - 1) = 1
  EXPECT_EQ(solve_sizing(in).round_width, 1);
}

TEST(SizingSolver, LandingTailBound) {
  // A large M makes t_NIC long, so one landing CTA bounds the tail.
  SolverInput in = paper_calibration();
  in.nodes = 64;
  const SolverResult r = solve_sizing(in);
  EXPECT_EQ(r.landing_tail_ctas, 1);
  EXPECT_EQ(r.landing_ctas, 1);
}

// The all-gather's first-order term: S_ag = S b_ag / b_grad, t_AG = (M - 1) S_ag / BW_NIC. An
// fp8 all-gather's is half a bf16 one's; nothing the solver sizes changes with it.
TEST(SizingSolver, AllGatherTermHalvesForOneByteItems) {
  SolverInput in = paper_calibration();  // S = 32 MiB of bf16 gradients, M = 8
  const SolverResult bf16 = solve_sizing(in);
  EXPECT_EQ(bf16.ag_shard_bytes, std::int64_t{32} << 20);  // the default b_ag = 2
  EXPECT_NEAR(bf16.t_ag_nic_ms, 7.0 * (32 << 20) / 47.5e6, 1e-9);
  in.ag_bytes = 1;
  const SolverResult fp8 = solve_sizing(in);
  EXPECT_EQ(fp8.ag_shard_bytes, std::int64_t{16} << 20);
  EXPECT_NEAR(fp8.t_ag_nic_ms, 7.0 * (16 << 20) / 47.5e6, 1e-9);
  EXPECT_DOUBLE_EQ(2 * fp8.t_ag_nic_ms, bf16.t_ag_nic_ms);
  EXPECT_EQ(fp8.sum_ctas, bf16.sum_ctas);
  EXPECT_EQ(fp8.landing_ctas, bf16.landing_ctas);
  EXPECT_EQ(fp8.round_width, bf16.round_width);
  EXPECT_EQ(fp8.rounds_in_flight, bf16.rounds_in_flight);
  EXPECT_DOUBLE_EQ(fp8.t_nic_ms, bf16.t_nic_ms);
  in.grad_bytes = 4;  // S = 32 MiB of fp32 gradients: 8 Mi elements, 8 MiB of fp8
  in.ag_bytes = 1;
  EXPECT_EQ(solve_sizing(in).ag_shard_bytes, std::int64_t{8} << 20);
  in.nodes = 1;  // one node: no rail, no wire time
  EXPECT_EQ(solve_sizing(in).t_ag_nic_ms, 0.0);
  in = paper_calibration();
  in.ag_bytes = 3;
  EXPECT_THROW(solve_sizing(in), InvalidArgument);
}

TEST(SizingSolver, RejectsBadInput) {
  SolverInput in = paper_calibration();
  in.bw_nic_gbps = -1;
  EXPECT_THROW(solve_sizing(in), InvalidArgument);
  in = paper_calibration();
  in.shard_bytes = 0;
  EXPECT_THROW(solve_sizing(in), InvalidArgument);
  in = paper_calibration();
  in.gpus_per_node = 9;
  EXPECT_THROW(solve_sizing(in), InvalidArgument);
  in = paper_calibration();
  in.wave_width = 9;
  EXPECT_THROW(solve_sizing(in), InvalidArgument);
}

}  // namespace
}  // namespace tide
