// The reduce-scatter's defaults when the caller does not say (Sec. 6.3): rounds in flight
// (App. G; sizing_solver.hpp) and the Level 1 staging chunk. Why: docs/core.md, Solver defaults.
// default_rs_pacing(topology, grad_bytes, shard_bytes, round_width, wave_width):
//   1. solve_sizing() on kDefaultMachineRates for M x L, S = shard_bytes (per rank, gradient
//      dtype), W_wave = wave_width (0: L), k_max = round_width; its d and k unchanged.
//   2. d = 1 without network rounds (M = 1) and for an empty shard.
//   3. d changes no placement, wave or generation: the bits are lockstep's for every d.
//   4. The plan's round width stays the caller's.
// default_staging_chunk_elems(layout, options), with R = block_rows(), E_pass columns per
// pass part, vector width v and p = n_stg (L - 1) b_grad (a chunk of C columns stages p R C):
//   5. C is the fewest equal chunks whose staging fits FSDP2's packing buffer B_pack = N S_fp32
//      (Eq. 3): C_pack the largest multiple of v with p R C_pack <= B_pack (at least v),
//      c = ceil(E_pass / C_pack) chunks of C = ceil(E_pass / c) rounded up to v.
//   6. The fewest chunks, not a smaller staging (each chunk is a fill the sum waits for).
//   7. Below v columns a chunk stages p R v bytes (may exceed B_pack for a tiny group). The
//      chunk changes no bit; an explicit staging_chunk_elems > 0 is left alone.
// One-node plans (RsPlan::one_node(), NOTE [one-node TIDE-RS]) size their ring instead:
//   8. Memory: C <= C_mem, the largest multiple of v with
//      p C_mem <= max(kOneNodeStagingNs NS, kOneNodeMinRingBytes), NS = 2 N E_live the
//      group's unsharded bf16 layer, and C >= kOneNodeMinChunk.
//   9. Time: c = max(c_opt, ceil(E_pass / C_mem), 1) chunks, c_opt = round(sqrt(T / t_fill))
//      (at most kMaxOneNodeChunks), T = (L - 1) E_live b_grad / BW_peer, t_fill = (L - 1)
//      fill_us; C = ceil(E_pass / c) rounded up to v. n_stg stays RsOptions'.
// The defaults are pure functions of their arguments: every rank of a group computes the same.
#pragma once

#include <cstdint>
#include <string>

#include "tide/core/layout.hpp"
#include "tide/core/machine_rates.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/core/sizing_solver.hpp"
#include "tide/core/topology.hpp"

namespace tide {

// One node's measured rates (2 x H200, docs/core.md) for contracts 9-10.
struct OneNodeRates {
  double bw_peer_gbps = 391.0;     // BW_peer: copy-engine push to a peer GPU
  double fill_us = 4.0;            // per copy of a fill: enqueue and signal
  double hbm_gbps = 2091.0;        // a full-grid kernel's stream rate (FSDP2's fp32 pack)
  double stock_link_gbps = 279.0;  // NCCL's reduce-scatter over NVLink (architecture.md)
  double stock_launch_us = 60.0;   // an NCCL collective's start
};
inline constexpr OneNodeRates kOneNodeRates{};
inline constexpr double kOneNodeStagingNs = 0.25;  // contract 8: the ring's bound, in NS
inline constexpr int kMaxOneNodeChunks = 64;
inline constexpr std::int64_t kOneNodeMinChunk = 4096;             // columns
inline constexpr double kOneNodeMinRingBytes = 4.0 * 1024 * 1024;  // contract 8's floor

// Contracts 8-9: the one-node ring's chunk in columns (E_live = shard_elems, E_pass =
// pass_elems); what default_staging_chunk_elems and the memory model's one-node form use.
std::int64_t one_node_chunk_columns(int gpus_per_node, std::int64_t shard_elems,
                                    std::int64_t pass_elems, std::int64_t vector_elems,
                                    int staging_slots, int grad_bytes);

// Contract 10: a first-order forecast of one one-node call on kOneNodeRates. TIDE = c t_fill +
// T + the last chunk's sum (E_live / c (L b_grad + 4) bytes at kDefaultSumCtas x BW_sum); stock
// = the fp32 pack (N E_live (b_grad + 4) bytes at hbm_gbps) + NCCL's reduce-scatter ((N - 1)
// E_live 4 bytes at stock_link_gbps) + its launch. Where stock wins, the runtime runs stock.
struct OneNodeForecast {
  double tide_us = 0;
  double stock_us = 0;
  bool tide_wins() const { return tide_us <= stock_us; }
  std::string reason() const;  // empty when TIDE wins
};
// Throws InvalidArgument for a plan that is not one-node.
OneNodeForecast one_node_rs_forecast(const RsPlan& plan);

struct RsPacing {
  int rounds_in_flight = 1;  // d: RsOptions::rounds_in_flight
  int round_width = 1;       // the solver's k (<= k_max); informative, see contract 4
};

// The solver's input for these arguments on kDefaultMachineRates (contract 1).
SolverInput default_solver_input(const Topology& topology, int grad_bytes, std::int64_t shard_bytes,
                                 int round_width = RsOptions{}.round_width, int wave_width = 0);

// See the contract above. Throws InvalidArgument as solve_sizing does (bad item size, wave
// width or round width), or for a negative shard.
RsPacing default_rs_pacing(const Topology& topology, int grad_bytes, std::int64_t shard_bytes,
                           int round_width = RsOptions{}.round_width, int wave_width = 0);

// Contract 5-7. Throws InvalidArgument where RsPlan(layout, options) does.
std::int64_t default_staging_chunk_elems(const GroupLayout& layout, const RsOptions& options);

// `options` with default_rs_pacing's rounds_in_flight for `layout` (S = shard elements x gradient
// bytes) and, where staging_chunk_elems is 0, contract 5's chunk: the runtime's and CLI's default.
RsOptions with_solver_defaults(RsOptions options, const GroupLayout& layout);

// with_solver_defaults under its older name, from before it set the staging chunk (the
// runtime's group_rs_options calls it by this name).
inline RsOptions with_default_rounds_in_flight(RsOptions options, const GroupLayout& layout) {
  return with_solver_defaults(options, layout);
}

}  // namespace tide
