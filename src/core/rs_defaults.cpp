// The reduce-scatter's default rounds in flight from the sizing solver (App. G). See the header.
#include "tide/core/rs_defaults.hpp"

#include <string>

#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"

namespace tide {

SolverInput default_solver_input(const Topology& topology, int grad_bytes, std::int64_t shard_bytes,
                                 int round_width, int wave_width) {
  SolverInput in;
  in.bw_nic_gbps = kDefaultMachineRates.bw_nic_gbps;
  in.bw_sum_gbps = kDefaultMachineRates.bw_sum_gbps;
  in.bw_land_gbps = kDefaultMachineRates.bw_land_gbps;
  in.bw_cap_gbps = kDefaultMachineRates.bw_cap_gbps;
  in.t_round_ms = kDefaultMachineRates.t_round_ms;
  in.nodes = topology.nodes();
  in.gpus_per_node = topology.gpus_per_node();
  in.shard_bytes = shard_bytes;
  in.grad_bytes = grad_bytes;
  in.wave_width = wave_width;
  in.max_round_width = round_width;
  return in;
}

RsPacing default_rs_pacing(const Topology& topology, int grad_bytes, std::int64_t shard_bytes,
                           int round_width, int wave_width) {
  if (shard_bytes < 0) {
    throw InvalidArgument("shard bytes " + std::to_string(shard_bytes) + " must not be negative");
  }
  RsPacing pacing;
  if (shard_bytes == 0) return pacing;  // contract 2: nothing to send, lockstep
  const SolverResult r = solve_sizing(
      default_solver_input(topology, grad_bytes, shard_bytes, round_width, wave_width));
  pacing.rounds_in_flight = r.rounds_in_flight;
  pacing.round_width = r.round_width;
  return pacing;
}

RsOptions with_default_rounds_in_flight(RsOptions options, const GroupLayout& layout) {
  options.rounds_in_flight =
      default_rs_pacing(layout.topology(), static_cast<int>(item_bytes(layout.grad_dtype())),
                        layout.grad_shard_bytes(), options.round_width, options.wave_width)
          .rounds_in_flight;
  return options;
}

}  // namespace tide
