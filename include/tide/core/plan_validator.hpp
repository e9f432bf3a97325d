// Plan validation (Prop. 4.1, App. D): a TIDE-RS plan is accepted only if it is
//  - complete: each pass's waves split contributors 1..M in increasing order, no wave wider
//    than W_wave, every remote contributor in exactly one round of at most k transfers that
//    stays inside its wave, and the sub-slices of all passes cover the output span once;
//  - owned: for every contributor, local GPUs and sub-slices correspond one to one (every
//    destination element has exactly one Level 1 owner per wave);
//  - collision free: no two contributors of a wave land on one destination GPU at the same
//    inbox offset, for every sub-slice;
//  - stale-block free: when a wave lands, every inbox block of its generation holds either
//    this wave's partial or zeros (NOTE [stale-block zeroing]), and no zeroing touches a
//    block the wave writes;
//  - outbox safe: the outbox block a destination reuses was sent in an earlier round.
// Each property is re-derived by simulation from the plan's tables, not from the proof. A
// TIDE-AG plan (Sec. 3.1) is accepted only if its rounds receive every slot 1..M-1 once, each
// forwards only slots its sender holds, its slot groups tile the rounds in arrival order, and
// every scatter places each (parameter, slot) once at its Eq. 2 landing. Builders check first
// (InvalidArgument); the runtime asks *_plan_fallback_reason() and keeps stock on a reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tide/core/ag_plan.hpp"
#include "tide/core/rs_plan.hpp"

namespace tide {

struct ValidationResult {
  bool accepted = true;
  std::string reason;  // the first violation, one line; empty when accepted
};

ValidationResult validate_rs_plan(const RsPlan& plan);
ValidationResult validate_ag_plan(const AgPlan& plan);

// The first violation (one line), or nothing when accepted. Never throws (the runtime's test).
std::optional<std::string> rs_plan_fallback_reason(const RsPlan& plan) noexcept;
std::optional<std::string> ag_plan_fallback_reason(const AgPlan& plan) noexcept;

// Throw InvalidArgument ("TIDE-RS plan rejected (App. D): <reason>") unless accepted.
void require_valid_plan(const RsPlan& plan);
void require_valid_plan(const AgPlan& plan);

// App. D's exhaustive sweep: every (M, W_wave, k, mode) in the ranges at a fixed L, on a
// one-parameter group filling every sub-slice, on all hardware threads.
struct SweepRanges {
  int min_nodes = 2, max_nodes = 1024;
  int gpus_per_node = 8;
  int min_wave_width = 1, max_wave_width = 8;
  int min_round_width = 1, max_round_width = 32;
  int passes = 1;
  bool both_modes = true;  // In-Place and the memory-efficient Slot-Reuse variant
};

struct SweepResult {
  std::int64_t plans = 0;
  std::int64_t accepted = 0;
  std::int64_t rejected = 0;
  // Accepted plans an independent brute-force collision scan finds faulty. Must be zero.
  std::int64_t violations = 0;
  std::string first_rejection;  // example reason, for the report
  double seconds = 0;
};

SweepResult sweep_plans(const SweepRanges& ranges);

}  // namespace tide
