// The first-order sizing solver (App. G, Sec. 6.3): sum and landing CTA budgets and the
// round width k from calibrated rates.
//   t_NIC = (M - 1) S_fp32 / BW_NIC
//   C_sum = ceil(gamma_skew * (L b_grad / 4 + 1) * BW_NIC / BW_sum)                  (Eq. 13)
//   C_mc  = min(floor(BW_cap / BW_land),
//               ceil((S_fp32 / n_part) / (eta_tail * t_NIC * BW_land)))             (Eq. 14)
//   k: from min(2, M - 1, k_max), doubled up to k_max while N_rounds(M - 1, k, W_wave) t_rnd >
//   0.10 t_NIC and doubling cuts rounds. d (ours): where the waits still exceed that budget,
//   d = 1 + ceil(t_rnd / t_round), t_round = t_NIC / N_rounds (capped at N_rounds and
//   kMaxRoundsInFlight); else d = 1.
// The all-gather's term (ours, first order; Sec. 3.1): the same group's per-rank shard in the
// all-gather dtype, S_ag = S b_ag / b_grad, and its wire time t_AG = (M - 1) S_ag / BW_NIC
// (Bruck's rounds move sum_d c_d = M - 1 shards over each rail). A 1-byte (fp8, u8) all-gather
// moves half a bf16 one's bytes, so its term is half (NOTE [1-byte all-gather items]). It
// sizes nothing above; the reduce-scatter's terms keep b_grad.
#pragma once

#include <cstdint>
#include <vector>

namespace tide {

struct SolverInput {
  double bw_nic_gbps = 0;        // sustained per-rail throughput, GB/s (1e9 bytes/s)
  double bw_sum_gbps = 0;        // Level 1 sum rate per CTA (logical read + write bytes)
  double bw_land_gbps = 0;       // landing rate per CTA
  double bw_cap_gbps = 0;        // landing fabric ceiling
  double t_round_ms = 0;         // calibrated per-round wait overhead
  int nodes = 1;                 // M
  int gpus_per_node = 8;         // L
  std::int64_t shard_bytes = 0;  // S: per-rank packed gradient shard in the gradient dtype
  int grad_bytes = 2;            // b_grad
  int ag_bytes = 2;              // b_ag: the all-gather item size (1, 2 or 4)
  int wave_width = 0;            // W_wave; 0 selects L
  int passes = 1;                // n_part
  double gamma_skew = 1.5;
  double eta_tail = 0.05;
  int max_round_width = 4;  // k_max
};

struct RoundWidthStep {
  int round_width = 0;
  int rounds = 0;
  double wait_ms = 0;  // rounds * t_rnd
  bool widened = false;
};

struct SolverResult {
  int sum_ctas = 0;
  int landing_ctas = 0;
  int round_width = 0;
  int rounds_in_flight = 1;  // d (RsOptions::rounds_in_flight)
  // Intermediate terms.
  int rounds = 0;                // N_rounds at the chosen k
  double round_transfer_ms = 0;  // t_round = t_NIC / N_rounds
  std::int64_t fp32_shard_bytes = 0;
  double t_nic_ms = 0;
  double level1_rate_factor = 0;    // L b_grad / 4 + 1
  double sum_ctas_exact = 0;        // before the ceiling
  int landing_cap_ctas = 0;         // floor(BW_cap / BW_land)
  int landing_tail_ctas = 0;        // the tail-bound term
  double round_wait_budget_ms = 0;  // 0.10 t_NIC
  std::vector<RoundWidthStep> round_width_steps;
  std::int64_t ag_shard_bytes = 0;  // S_ag = S b_ag / b_grad
  double t_ag_nic_ms = 0;           // t_AG = (M - 1) S_ag / BW_NIC
};

// N_rounds: network rounds for `remote` remote contributions (contributors 1..remote+1 with
// the own node last) at wave width W and at most k transfers per round.
int network_rounds(int remote, int round_width, int wave_width);

// Throws InvalidArgument for non-positive rates, sizes or counts, a b_grad other than 2 or 4,
// or a b_ag other than 1, 2 or 4.
SolverResult solve_sizing(const SolverInput& in);

}  // namespace tide
