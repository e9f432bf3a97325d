// The reduce-scatter's defaults from the sizing solver (App. G, Sec. 6.3). See the header.
#include "tide/core/rs_defaults.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "tide/core/cta_budgets.hpp"
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

namespace {

// Contract 8-9: the one-node ring's chunk.
std::int64_t one_node_chunk_elems(const RsPlan& plan) {
  const GroupLayout& layout = plan.layout();
  return one_node_chunk_columns(layout.topology().gpus_per_node(), layout.shard_elems(),
                                plan.pass_elems(), plan.options().vector_elems,
                                plan.options().staging_slots,
                                static_cast<int>(item_bytes(layout.grad_dtype())));
}

}  // namespace

std::int64_t one_node_chunk_columns(int gpus_per_node, std::int64_t shard_elems,
                                    std::int64_t pass_elems, std::int64_t vector_elems,
                                    int staging_slots, int grad_bytes) {
  const std::int64_t l = gpus_per_node;
  const std::int64_t pass = pass_elems;
  const std::int64_t vec = vector_elems;
  const std::int64_t b_grad = grad_bytes;
  const std::int64_t per_column = std::int64_t{staging_slots} * (l - 1) * b_grad;
  if (per_column == 0 || pass == 0) return pass;                 // L = 1: nothing is staged
  const double ns = 2.0 * static_cast<double>(shard_elems * l);  // one node: N = L
  const std::int64_t c_mem =
      std::max(kOneNodeMinChunk / vec * vec,
               static_cast<std::int64_t>(std::max(kOneNodeStagingNs * ns, kOneNodeMinRingBytes) /
                                         static_cast<double>(per_column)) /
                   vec * vec);
  const double inbound_us =
      static_cast<double>((l - 1) * shard_elems * b_grad) / (kOneNodeRates.bw_peer_gbps * 1e3);
  const double fill_us = static_cast<double>(l - 1) * kOneNodeRates.fill_us;
  const std::int64_t c_opt =
      std::clamp<std::int64_t>(std::llround(std::sqrt(inbound_us / fill_us)), 1, kMaxOneNodeChunks);
  const std::int64_t chunks = std::max({c_opt, (pass + c_mem - 1) / c_mem, std::int64_t{1}});
  return std::min(pass, ((pass + chunks - 1) / chunks + vec - 1) / vec * vec);
}

std::string OneNodeForecast::reason() const {
  if (tide_wins()) return "";
  return "the one-node TIDE-RS forecast (rs_defaults.hpp contract 10) is " +
         std::to_string(tide_us) + " us against stock FSDP2's " + std::to_string(stock_us) +
         " us: the group keeps stock's collectives";
}

OneNodeForecast one_node_rs_forecast(const RsPlan& plan) {
  if (!plan.one_node()) throw InvalidArgument("one_node_rs_forecast: not a one-node plan");
  const GroupLayout& layout = plan.layout();
  const double l = layout.topology().gpus_per_node();
  const double e = static_cast<double>(layout.shard_elems());
  const double b = static_cast<double>(item_bytes(layout.grad_dtype()));
  const double chunk = static_cast<double>(std::max<std::int64_t>(1, plan.chunk_elems()));
  const double fills = plan.passes() * std::max(1.0, std::ceil(e / plan.passes() / chunk));
  const OneNodeRates& k = kOneNodeRates;
  OneNodeForecast f;
  f.tide_us = fills * (l - 1) * k.fill_us + (l - 1) * e * b / (k.bw_peer_gbps * 1e3) +
              std::min(e, chunk) * (l * b + 4) /
                  (std::min(kDefaultSumCtas * kDefaultMachineRates.bw_sum_gbps, k.hbm_gbps) * 1e3);
  f.stock_us = l * e * (b + 4) / (k.hbm_gbps * 1e3) + (l - 1) * e * 4 / (k.stock_link_gbps * 1e3) +
               k.stock_launch_us;
  return f;
}

std::int64_t default_staging_chunk_elems(const GroupLayout& layout, const RsOptions& options) {
  RsOptions whole = options;
  whole.staging_chunk_elems = 0;  // a whole pass part: E_pass
  const RsPlan plan(layout, whole);
  const std::int64_t pass = plan.pass_elems();
  const std::int64_t vec = options.vector_elems;
  if (plan.one_node()) return one_node_chunk_elems(plan);
  // p R: staging bytes per column, n_stg slots of L - 1 contributions of R rows.
  const std::int64_t per_column = std::int64_t{options.staging_slots} *
                                  (layout.topology().gpus_per_node() - 1) * plan.block_rows() *
                                  static_cast<std::int64_t>(item_bytes(layout.grad_dtype()));
  if (per_column == 0) return pass;  // L = 1: nothing is staged
  const std::int64_t c_pack = std::max(vec, layout.pack_buffer_bytes() / per_column / vec * vec);
  if (c_pack >= pass) return pass;
  const std::int64_t chunks = (pass + c_pack - 1) / c_pack;
  return std::min(c_pack, ((pass + chunks - 1) / chunks + vec - 1) / vec * vec);
}

RsOptions with_solver_defaults(RsOptions options, const GroupLayout& layout) {
  options.rounds_in_flight =
      default_rs_pacing(layout.topology(), static_cast<int>(item_bytes(layout.grad_dtype())),
                        layout.grad_shard_bytes(), options.round_width, options.wave_width)
          .rounds_in_flight;
  if (options.staging_chunk_elems == 0) {
    options.staging_chunk_elems = default_staging_chunk_elems(layout, options);
  }
  return options;
}

}  // namespace tide
