// One arena per communicator, laid out as the paper bounds it (Sec. 5.4, App. F): what every
// registered group of a communicator shares, and what each keeps.
#pragma once

#include <cstdint>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/call_sequence.hpp"
#include "tide/program/ep_lane.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide::program {

// Every rank's arena holds, in order: (1) a resident shard per group that keeps one; (2) one
// receive stage, the largest group's; (3) the landing slots (groups with one id share one, sized
// by the largest; -1: its own); (4) TIDE-RS's areas (or the lane's inbox and scratch), shared,
// sized by the largest. NOTE [lane handoff] orders shared areas between groups. Every area starts
// on a kArenaAlign boundary. Why: NOTE [communicator arena] in docs/program.md.
inline constexpr std::int64_t kArenaAlign = 4096;

struct ArenaGroup {
  const AgPlan* all_gather = nullptr;
  const RsPlan* reduce_scatter = nullptr;
  int landing_slot = -1;           // groups with one id >= 0 share a slot; -1: a slot of its own
  bool ep_all_gather = false;      // on the expert-parallel lane: no receive stage
  bool ep_reduce_scatter = false;  // on the lane: its inbox instead of TIDE-RS's areas
};

struct LandingSlot {
  int id = -1;  // the groups' slot id (-1: one group's own slot)
  std::int64_t offset = 0;
  std::int64_t bytes = 0;   // the largest unsharded size of its groups
  std::vector<int> groups;  // indices into the ArenaGroup list
};

struct CommunicatorArena {
  std::vector<AgSequenceAreas> all_gather;  // per group: resident, stages, landing (absolute)
  std::vector<int> slot_of;                 // per group: index into `slots`
  std::vector<LandingSlot> slots;
  RsArenaLayout reduce_scatter;  // shared; offsets absolute, arena_bytes = the whole arena
  // Per group on the lane's reduce-scatter (else empty): its inbox and scratch, absolute.
  std::vector<EpRsArenaLayout> ep_reduce_scatter;
  // Bytes by kind (each sum aligned as laid out); they add up to arena_bytes.
  std::int64_t resident_bytes = 0;
  std::int64_t stage_bytes = 0;
  std::int64_t landing_bytes = 0;
  std::int64_t reduce_scatter_bytes = 0;
  std::int64_t arena_bytes = 0;
  // Sec. 5.4's bound for these groups (residents, largest stage, slots, Eq. 10 for the largest
  // shard; one-node: the model's one-node form); the arena stays within it plus kArenaAlign per
  // area. 0 where the closed form does not apply.
  std::int64_t bound_bytes = 0;
  int areas = 0;  // areas laid out (for the alignment allowance)
};

// Throws InvalidArgument for an empty list, a missing plan, or plans of different topologies.
CommunicatorArena communicator_arena(const std::vector<ArenaGroup>& groups);

// The call sequences a communicator runs for group `i` in `arena` (the lane's or TIDE-AG's and
// TIDE-RS's); `rs`, `fault` and `sequence` are for tests and the simulator.
struct GroupSequences {
  CallSequence all_gather;
  CallSequence reduce_scatter;
};
GroupSequences group_sequences(const std::vector<ArenaGroup>& groups,
                               const CommunicatorArena& arena, std::size_t i,
                               const RsProgramOptions& rs = {}, Fault fault = Fault::kNone,
                               const SequenceOptions& sequence = {});

}  // namespace tide::program
