// The reduce-scatter's defaults that the sizing solver picks when the caller does not say (Sec.
// 6.3: "a calibrated first-order model picks ... round width k, chunk size, ..."): how many
// network rounds TIDE-RS keeps in flight (App. G; sizing_solver.hpp), from the library's
// default machine rates, and how large a Level 1 staging chunk is.
//
// Contract of default_rs_pacing(topology, grad_bytes, shard_bytes, round_width, wave_width):
//   1. It is solve_sizing() on kDefaultMachineRates (App. G's calibration of the evaluation
//      platform, BW_NIC = 47.5 GB/s, BW_sum = 99 GB/s/CTA, BW_land = 21 GB/s/CTA, BW_cap =
//      90 GB/s, t_rnd = 1.3 ms) for M x L, S = shard_bytes (per rank, in the gradient dtype
//      of grad_bytes = 2 or 4), W_wave = wave_width (0: L) and k_max = round_width; it returns
//      the solver's rounds in flight d and round width k unchanged.
//   2. d = 1 (lockstep) whenever there are no network rounds, in particular at M = 1 (one
//      host), and for an empty shard (no solver call).
//   3. Rounds in flight are ours, not the paper's (App. G sizes k, not d; see the solver's
//      header for the rule d = 1 + ceil(t_rnd / t_round)). d changes only when a round's sends
//      start, never placement, waves or inbox generations, so App. D's guarantees and the
//      outputs' bits are those of lockstep rounds for every d.
//   4. The plan's round width stays the caller's (RsOptions' k = 4 = k_max unless given): the
//      solver only picks d > 1 after widening k as far as widening cuts rounds, so its k then
//      gives as many rounds as k_max does.
//
// Contract of default_staging_chunk_elems(layout, options): the Level 1 staging chunk
// (RsOptions::staging_chunk_elems; Sec. 4.1: "staging is processed and reused in chunks").
// With R = block_rows() rows, E_pass columns per pass part (the RsPlan of `options` with a
// whole-part chunk), b_grad the gradient item size, v the vector width, N = M L and
// p = n_stg (L - 1) b_grad, a chunk of C columns stages p R C bytes in all (n_stg slots of
// L - 1 contributions). A whole part stages Eq. 10's n_stg (L b_grad / 4) S_fp32: 7 S_fp32
// at L = 8 with bf16 and n_stg = 2, under FSDP2's fp32 packing buffer B_pack = N S_fp32
// (Eq. 3), but 14 S_fp32 with fp32 gradients, above it on one node (B_pack = 8 S_fp32).
//   5. C is the fewest equal chunks whose staging fits B_pack: with C_pack the largest
//      multiple of v such that p R C_pack <= B_pack (at least v), c = ceil(E_pass / C_pack)
//      chunks of C = ceil(E_pass / c) rounded up to v (<= C_pack); c = 1 gives C = E_pass.
//      TIDE-RS then never stages more than FSDP2 packs for the group. L = 8: bf16 stays one
//      chunk at every M; fp32 takes two at M = 1 and one from M = 2 on.
//   6. The fewest chunks, not a smaller staging: each chunk is a fill that the owner's sum
//      waits for, with n_stg slots in flight, and the reference executor's cost model prices
//      one Llama-3.1-70B layer (bf16, L = 8) at 9.9, 9.7, 12.2, 13.3 and 15.0 ms for 1, 2,
//      3, 4 and 7 chunks at M = 1 (9.3, 9.6, 10.1, 10.6, 14.2 ms at M = 8; `tide simulate
//      reduce-scatter --timing-only --jitter 0 --chunk-bytes ...`): staging one fp32 block
//      (7 chunks) would cost half a reduce-scatter again.
//   7. A part of fewer than v columns per chunk stages p R v bytes (the plan rounds to v),
//      which can exceed B_pack for a tiny group. The chunk changes no bit (invariant 2: the
//      element-to-owner map and the order of the sums do not depend on it), and an explicit
//      staging_chunk_elems > 0 is left alone.
//
// One-node plans (RsPlan::one_node(), NOTE [one-node TIDE-RS]) size their ring instead by
// contract 8-9, from kOneNodeRates:
//   8. Memory: the ring (n_stg slots of L - 1 chunks of C columns, p = n_stg (L - 1) b_grad
//      bytes per column) holds at most kOneNodeStagingNs of the group's unsharded bf16 layer NS
//      = 2 N E_live, or kOneNodeMinRingBytes where that is more: C <= C_mem, the largest
//      multiple of v with p C_mem <= max(kOneNodeStagingNs NS, kOneNodeMinRingBytes), and at
//      least kOneNodeMinChunk columns. The floor keeps small groups (NS under 16 MiB) from being
//      cut into fills whose fixed costs exceed stock's whole call; the arena sizes the ring
//      for the largest group, so the floor adds memory only to a model whose every group is
//      that small, and the ring never grows with the model's depth.
//   9. Time: a fill costs a fixed t_fill = (L - 1) fill_us (the L - 1 copies' enqueue and
//      their signals) on top of its bytes, and the first fill and the last sum are exposed, so
//      c chunks cost about T / c + c t_fill with T = (L - 1) E_live b_grad / BW_peer the
//      owner's inbound bytes: c_opt = round(sqrt(T / t_fill)), at most kMaxOneNodeChunks.
//      The chunk count is max(c_opt, ceil(E_pass / C_mem), 1); C = ceil(E_pass / c) rounded up
//      to v. n_stg stays RsOptions' (2: one fill lands while the previous one is summed; the
//      sum's rate, 16 CTAs x BW_sum, is above BW_peer's share of it).
//
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

// Rates of one node's copy engines (architecture.md, 2 x H200: push 391 GB/s, about 4 us of
// host time per copy) for contract 9.
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

// Contract 8-9 as arithmetic, for a one-node plan of L GPUs: the ring's chunk in columns for a
// group of shard_elems (E_live) columns per rank and pass_elems (E_pass) per pass part, at
// vector width v, n_stg slots and gradient item size b_grad. What default_staging_chunk_elems
// gives a one-node plan, and what the memory model's one-node form (memory_model.hpp) sizes
// the ring with.
std::int64_t one_node_chunk_columns(int gpus_per_node, std::int64_t shard_elems,
                                    std::int64_t pass_elems, std::int64_t vector_elems,
                                    int staging_slots, int grad_bytes);

// Contract 10: where TIDE-RS would lose on one node. A first-order forecast of one call on
// kOneNodeRates: TIDE = c t_fill + T + the last chunk's sum (E_live / c (L b_grad + 4) bytes at
// kDefaultSumCtas x BW_sum), stock FSDP2 = the fp32 pack (N E_live (b_grad + 4) bytes at
// hbm_gbps) + NCCL's reduce-scatter ((N - 1) E_live 4 bytes at stock_link_gbps) + its launch.
// The runtime runs a group whose forecast favours stock with stock's collectives, and says why.
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

// `options` with the solver's defaults for `layout`: rounds_in_flight replaced by the default
// for its topology, gradient dtype and per-rank gradient shard (S = shard elements x gradient
// item bytes) at the options' round and wave width, and, where staging_chunk_elems is 0, the
// default staging chunk (contract 5). What the runtime and the CLI use when no rounds in flight
// are given.
RsOptions with_solver_defaults(RsOptions options, const GroupLayout& layout);

// with_solver_defaults under its older name, from before it set the staging chunk (the
// runtime's group_rs_options calls it by this name).
inline RsOptions with_default_rounds_in_flight(RsOptions options, const GroupLayout& layout) {
  return with_solver_defaults(options, layout);
}

}  // namespace tide
