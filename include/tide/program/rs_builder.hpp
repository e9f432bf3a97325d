// Builds the TIDE-RS program (Sec. 4-5, Alg. 1) of one reduce-scatter call from its plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/core/cta_budgets.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/faults.hpp"
#include "tide/program/program.hpp"

namespace tide::program {

// How a wave lands: kPull (the default, the only form run here) reads the partials through
// peer pointers; kSwitchReduce models multimem (Sec. 4.2), reading inbox block s on all L GPUs
// (stale blocks zeroed, NOTE [stale-block zeroing]; the own spare copied in first).
enum class LandingStyle : std::uint8_t { kPull, kSwitchReduce };

struct RsProgramOptions {
  float alpha = 1.0f;
  bool accumulate = false;
  int sum_ctas = kDefaultSumCtas;  // Level 1 CTA budget
  int landing_ctas = kDefaultLandingCtas;
  LandingStyle landing = LandingStyle::kPull;
  Fault fault = Fault::kNone;  // a reduce-scatter fault to inject on every rank
  // One-node Slot-Reuse (NOTE [one-node TIDE-RS]): the call's gradient area in the arena (the
  // vacated landing slot); -1: RsArenaLayout::gradients.
  std::int64_t gradient_area = -1;
};

// TIDE-RS's areas in each rank's arena and their strides (a step's sized for the largest group).
// One node with the pull landing holds no inbox (NOTE [no inbox on one node] in docs/program.md);
// build_rs_call() refuses a layout without the inbox its plan and landing need.
struct RsArenaLayout {
  std::int64_t staging = 0;  // n_stg slots, each (L - 1) contributions x L rows x chunk
  std::int64_t outbox = 0;   // 2 banks x n_out blocks
  std::int64_t spares = 0;   // 2 banks x n_part own-node spares
  std::int64_t inbox = 0;    // inbox_generations x L blocks
  std::int64_t arena_bytes = 0;
  std::int64_t staging_slot_bytes = 0;  // stride between staging slots
  std::int64_t block_bytes = 0;         // stride between outbox, spare and inbox blocks
  int outbox_blocks = 0;                // outbox blocks per bank
  int spare_blocks = 0;                 // spares per bank
  int inbox_generations = 0;            // n_par, or 0 where nothing uses the inbox
  // One-node Slot-Reuse: the largest group's unsharded gradients after the inbox; -1 where
  // the calls name theirs (RsProgramOptions::gradient_area).
  std::int64_t gradients = -1;
  std::int64_t gradient_bytes = 0;
};

// Whether a call of `plan` landing with `landing` writes or reads its inbox.
bool rs_uses_inbox(const RsPlan& plan, LandingStyle landing);

RsArenaLayout rs_arena_layout(const RsPlan& plan, LandingStyle landing);
// The smallest layout holding every one of `plans` (one topology and options); a gradient
// area for one-node Slot-Reuse plans unless `gradient_area` is false.
RsArenaLayout rs_arena_layout(const std::vector<const RsPlan*>& plans, LandingStyle landing,
                              bool gradient_area = true);

// What a TIDE-RS call shares with earlier calls (Sec. 5.2, App. E): staging slots and their
// cumulative STAGED/FREE counters, outbox and spare banks (e mod 2), inbox generations and
// their INBOX_FREE counters, and their use so far. build_rs_call() advances it.
struct RsShared {
  RsArenaLayout areas;
  int staged = 0;                     // first of n_stg STAGED counters
  int freed = 0;                      // first of L x n_stg FREE counters
  int inbox_free = 0;                 // first of n_par INBOX_FREE counters
  int landings_done = 0;              // +1 from each local GPU when it finished a call's landings
  int calls = 0;                      // reduce-scatter calls before this one (e)
  std::vector<int> net_done_events;   // per earlier call: its NET_DONE event id
  std::vector<int> read_done_events;  // per earlier call: its READ_DONE event id
  std::vector<std::vector<int>> pushed;  // [rank][owner]: staging fills pushed so far
  std::vector<int> fills;                // [rank]: fills of its own staging so far
  std::vector<int> generation_uses;      // [q]: waves that used inbox generation q so far
};

// Fresh shared state for the calls of `plans`, counters numbered from `first_counter`.
RsShared rs_shared_state(const std::vector<const RsPlan*>& plans, int first_counter,
                         LandingStyle landing);

struct RsProgramIds {
  int done_event = 0;       // recorded on each rank's landing stream: the output is final
  int read_done_event = 0;  // recorded on each rank's host stream: gradients may be freed
  int net_done_event = 0;   // recorded on each rank's net stream: its outbox bank was sent
};

// One TIDE-RS call on every rank: gradients G_p (kTensor p, D_p x K_p, the gradient dtype) to
// each rank's packed fp32 shard (kOutput, Eq. 5; read first when accumulating).
Program build_rs_program(const RsPlan& plan, const RsProgramOptions& options,
                         RsProgramIds* ids = nullptr);

// Call e of a step at `placement`, sharing `shared` (advanced past it); counters and events
// are the highest ids used + 1, buffer sizes left empty.
Program build_rs_call(const RsPlan& plan, const RsProgramOptions& options,
                      const CallPlacement& placement, RsShared& shared,
                      RsProgramIds* ids = nullptr);
// Events a call records for later calls: private event ids relative to its event_base.
int rs_call_event_count(const RsPlan& plan);

// Why `fault` cannot show here (empty when it can), e.g. outbox reuse under In-Place.
std::string rs_fault_inapplicable(Fault fault, const RsPlan& plan, const RsProgramOptions& options);

}  // namespace tide::program
