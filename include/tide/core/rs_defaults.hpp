// The reduce-scatter's default network pacing: how many rounds TIDE-RS keeps in flight when the
// caller does not say, chosen by the sizing solver (App. G; sizing_solver.hpp) the way it sizes
// CTA budgets, from the library's default machine rates.
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
// The defaults are pure functions of their arguments: every rank of a group computes the same.
#pragma once

#include <cstdint>

#include "tide/core/layout.hpp"
#include "tide/core/machine_rates.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/core/sizing_solver.hpp"
#include "tide/core/topology.hpp"

namespace tide {

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

// `options` with rounds_in_flight replaced by the default for `layout` (its topology, gradient
// dtype and per-rank gradient shard, S = shard elements x gradient item bytes) at the options'
// round and wave width: what the runtime and the CLI use when no rounds in flight are given.
RsOptions with_default_rounds_in_flight(RsOptions options, const GroupLayout& layout);

}  // namespace tide
