// The first-order sizing solver (App. G). See the header for the equations.
#include "tide/core/sizing_solver.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "tide/core/error.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/core/topology.hpp"

namespace tide {
namespace {

void require_positive(double value, const char* what) {
  if (!(value > 0) || !std::isfinite(value)) {
    throw InvalidArgument(std::string(what) + " = " + std::to_string(value) +
                          " must be a positive number");
  }
}

}  // namespace

int network_rounds(int remote, int round_width, int wave_width) {
  int rounds = 0;
  const int contributors = remote + 1;  // the own node closes the last wave
  for (int first = 1; first <= contributors; first += wave_width) {
    const int last_remote = std::min(first + wave_width - 1, remote);
    const int in_wave = std::max(0, last_remote - first + 1);
    rounds += (in_wave + round_width - 1) / round_width;
  }
  return rounds;
}

SolverResult solve_sizing(const SolverInput& in) {
  const Topology topo(in.nodes, in.gpus_per_node);
  require_positive(in.bw_nic_gbps, "--bw-nic");
  require_positive(in.bw_sum_gbps, "--bw-sum");
  require_positive(in.bw_land_gbps, "--bw-land");
  require_positive(in.bw_cap_gbps, "--bw-cap");
  require_positive(in.t_round_ms, "--t-round");
  require_positive(static_cast<double>(in.shard_bytes), "--shard-bytes");
  require_positive(in.gamma_skew, "gamma_skew");
  require_positive(in.eta_tail, "eta_tail");
  if (in.grad_bytes != 2 && in.grad_bytes != 4) {
    throw InvalidArgument("gradient item size must be 2 (bf16) or 4 (fp32)");
  }
  if (in.ag_bytes != 1 && in.ag_bytes != 2 && in.ag_bytes != 4) {
    throw InvalidArgument("all-gather item size must be 1 (fp8, u8), 2 (bf16) or 4 (fp32)");
  }

  const int l = topo.gpus_per_node();
  const int wave_width = in.wave_width == 0 ? l : in.wave_width;
  if (wave_width < 1 || wave_width > l) {
    throw InvalidArgument("wave width " + std::to_string(wave_width) +
                          " is outside 1..L = " + std::to_string(l));
  }
  if (in.passes < 1) throw InvalidArgument("passes must be at least 1");
  if (in.max_round_width < 1) throw InvalidArgument("k_max must be at least 1");

  SolverResult r;
  const int m = topo.nodes();
  r.fp32_shard_bytes = in.shard_bytes * 4 / in.grad_bytes;
  const double bytes_per_ms = in.bw_nic_gbps * 1e6;  // GB/s -> bytes per ms
  r.t_nic_ms = (m - 1) * static_cast<double>(r.fp32_shard_bytes) / bytes_per_ms;
  // The all-gather's term (see the header): the same elements in the all-gather dtype.
  r.ag_shard_bytes = in.shard_bytes * in.ag_bytes / in.grad_bytes;
  r.t_ag_nic_ms = (m - 1) * static_cast<double>(r.ag_shard_bytes) / bytes_per_ms;

  // Eq. 13: Level 1 must process (L b_grad / 4 + 1) logical bytes per byte on the rail.
  r.level1_rate_factor = l * in.grad_bytes / 4.0 + 1.0;
  r.sum_ctas_exact = in.gamma_skew * r.level1_rate_factor * in.bw_nic_gbps / in.bw_sum_gbps;
  r.sum_ctas = static_cast<int>(std::ceil(r.sum_ctas_exact - 1e-12));

  // Eq. 14: enough landing CTAs to bound the last wave's tail, never past the fabric.
  r.landing_cap_ctas = std::max(1, static_cast<int>(std::floor(in.bw_cap_gbps / in.bw_land_gbps)));
  if (m > 1) {
    const double tail_bytes = static_cast<double>(r.fp32_shard_bytes) / in.passes;
    const double tail_budget_bytes = in.eta_tail * r.t_nic_ms * in.bw_land_gbps * 1e6;
    r.landing_tail_ctas = static_cast<int>(std::ceil(tail_bytes / tail_budget_bytes - 1e-12));
    r.landing_ctas = std::min(r.landing_cap_ctas, std::max(1, r.landing_tail_ctas));
  } else {
    // A single node has no rail to hide behind: land at the fabric's rate.
    r.landing_tail_ctas = r.landing_cap_ctas;
    r.landing_ctas = r.landing_cap_ctas;
  }

  // Round width: widen while per-round waits exceed 10% of the wire time and widening helps.
  r.round_wait_budget_ms = 0.10 * r.t_nic_ms;
  int k = std::max(1, std::min({2, m - 1, in.max_round_width}));  // never past k_max
  while (true) {
    RoundWidthStep step;
    step.round_width = k;
    step.rounds = network_rounds(m - 1, k, wave_width);
    step.wait_ms = step.rounds * in.t_round_ms;
    const int wider = std::min(2 * k, in.max_round_width);
    step.widened = wider > k && step.wait_ms > r.round_wait_budget_ms &&
                   network_rounds(m - 1, wider, wave_width) < step.rounds;
    r.round_width_steps.push_back(step);
    if (!step.widened) break;
    k = wider;
  }
  r.round_width = k;

  // Rounds in flight: hide each round's wait behind the transfers of the next d - 1 rounds
  // when lockstep rounds would spend more than the budget waiting.
  r.rounds = network_rounds(m - 1, k, wave_width);
  r.rounds_in_flight = 1;
  if (r.rounds > 1 && r.rounds * in.t_round_ms > r.round_wait_budget_ms) {
    r.round_transfer_ms = r.t_nic_ms / r.rounds;
    const double hide = std::ceil(in.t_round_ms / r.round_transfer_ms - 1e-12);
    r.rounds_in_flight = static_cast<int>(std::min<double>(
        {1.0 + hide, static_cast<double>(r.rounds), static_cast<double>(kMaxRoundsInFlight)}));
  } else if (r.rounds > 0) {
    r.round_transfer_ms = r.t_nic_ms / r.rounds;
  }
  return r;
}

}  // namespace tide
