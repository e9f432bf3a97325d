// NOTE [communicator arena]: the layout of one communicator's arena and its Sec. 5.4 bound.
#include "tide/program/communicator_arena.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "tide/core/error.hpp"
#include "tide/core/memory_model.hpp"
#include "tide/program/memory_mode.hpp"

namespace tide::program {
namespace {

std::int64_t aligned(std::int64_t x) {
  return (x + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
}

// TIDE-RS's areas as the memory model bounds them, in bytes (NOTE [memory model terms], with
// the n_out and n_par each plan's schedule lays out, the pull landing); empty where the closed
// form does not apply (the memory model's limits). Each RS area is sized by the largest of the
// plans, so is the bound. Multi-node (Eq. 10): the most blocks of any plan times the largest
// fp32 shard. One node (the model's one-node form): the ring, the most slots of any plan times
// the largest slot that the form gives any plan for its own group.
std::optional<std::int64_t> staging_bound(const std::vector<ArenaGroup>& groups) {
  if (groups.empty()) return std::nullopt;
  std::int64_t fp32_shard = 0, ring_slot = 0;
  int ring_slots = 0;
  bool one_node = false;
  double blocks = 0;
  for (const ArenaGroup& g : groups) {
    const RsPlan& plan = *g.reduce_scatter;
    const Topology& topo = plan.layout().topology();
    fp32_shard = std::max(fp32_shard, plan.layout().fp32_shard_bytes());
    MemoryModelInput in;
    in.nodes = topo.nodes();
    in.gpus_per_node = topo.gpus_per_node();
    in.round_width = plan.round_width();
    in.wave_width = plan.wave_width();
    in.passes = plan.passes();
    in.staging_slots = plan.options().staging_slots;
    in.grad_bytes = static_cast<int>(item_bytes(plan.layout().grad_dtype()));
    in.one_node = plan.one_node();
    if (plan.one_node()) in.shard_bytes = plan.layout().shard_elems() * 2;  // bf16 S
    try {
      const MemoryModel m = evaluate_memory_model(in);
      if (m.one_node) {
        one_node = true;
        ring_slots = std::max(ring_slots, in.staging_slots);
        ring_slot = std::max(ring_slot, m.staging_ring_bytes.value_or(0) / in.staging_slots);
        continue;
      }
      blocks = std::max(blocks, memory_mode(plan).staging_blocks(m));
    } catch (const InvalidArgument&) {
      return std::nullopt;
    }
  }
  const std::int64_t multi_node =
      static_cast<std::int64_t>(blocks * static_cast<double>(fp32_shard));
  return one_node ? std::max(multi_node, std::int64_t{ring_slots} * ring_slot) : multi_node;
}

}  // namespace

CommunicatorArena communicator_arena(const std::vector<ArenaGroup>& groups) {
  if (groups.empty()) throw InvalidArgument("communicator arena: no groups");
  for (const ArenaGroup& g : groups) {
    if (g.all_gather == nullptr || g.reduce_scatter == nullptr) {
      throw InvalidArgument("communicator arena: a group without its plans");
    }
    if (!(g.all_gather->layout().topology() == groups.front().all_gather->layout().topology())) {
      throw InvalidArgument("communicator arena: groups of different topologies");
    }
  }
  CommunicatorArena a;
  a.all_gather.resize(groups.size());
  std::int64_t at = 0;
  // 1. residents
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const AgPlan& plan = *groups[g].all_gather;
    a.all_gather[g].resident = at;
    if (!plan.options().shard_in_stage()) {
      at += aligned(plan.layout().shard_bytes());
      ++a.areas;
    }
  }
  a.resident_bytes = at;
  // 2. the shared receive stage (none for the expert-parallel lane)
  std::int64_t stage = 0;
  for (const ArenaGroup& g : groups) {
    if (!g.ep_all_gather) stage = std::max(stage, aligned(g.all_gather->stage_bytes()));
  }
  const std::int64_t stage_at = at;
  at += stage;
  a.stage_bytes = stage;
  a.areas += 1;
  // 3. landing slots, in order of first use by a group
  std::map<int, int> slot_index;  // slot id -> index into a.slots
  a.slot_of.resize(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const int id = groups[g].landing_slot;
    int index = -1;
    if (id >= 0) {
      if (auto it = slot_index.find(id); it != slot_index.end()) index = it->second;
    }
    if (index < 0) {
      index = static_cast<int>(a.slots.size());
      a.slots.push_back(LandingSlot{id, 0, 0, {}});
      if (id >= 0) slot_index[id] = index;
    }
    LandingSlot& slot = a.slots[static_cast<std::size_t>(index)];
    slot.bytes = std::max(slot.bytes, groups[g].all_gather->layout().unsharded_bytes());
    slot.groups.push_back(static_cast<int>(g));
    a.slot_of[g] = index;
  }
  const std::int64_t landings_at = at;
  for (LandingSlot& slot : a.slots) {
    slot.offset = at;
    at += aligned(slot.bytes);
    ++a.areas;
  }
  a.landing_bytes = at - landings_at;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    AgSequenceAreas& areas = a.all_gather[g];
    areas.stage[0] = stage_at;
    areas.stage[1] = stage_at;  // one stage: the lane handoff orders its users
    areas.landing = a.slots[static_cast<std::size_t>(a.slot_of[g])].offset;
  }
  // 4. TIDE-RS's areas, or the lane's inbox where that is larger
  std::vector<const RsPlan*> rs_plans;
  std::vector<ArenaGroup> general;
  for (const ArenaGroup& g : groups) {
    if (g.ep_reduce_scatter) continue;
    rs_plans.push_back(g.reduce_scatter);
    general.push_back(g);
  }
  if (!rs_plans.empty()) {
    // The runtime's landing; a one-node Slot-Reuse call's gradient area is its group's landing
    // slot (NOTE [one-node TIDE-RS], Sec. 5.3), not an area of its own.
    a.reduce_scatter = rs_arena_layout(rs_plans, LandingStyle::kPull, /*gradient_area=*/false);
  }
  for (std::int64_t* offset : {&a.reduce_scatter.staging, &a.reduce_scatter.outbox,
                               &a.reduce_scatter.spares, &a.reduce_scatter.inbox})
    *offset += at;
  a.ep_reduce_scatter.resize(groups.size());
  std::int64_t rs_bytes = a.reduce_scatter.arena_bytes, ep_bytes = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (!groups[g].ep_reduce_scatter) continue;
    EpRsProgramOptions lane;
    lane.fold_always = true;  // as ep_rs_call_sequence builds it
    a.ep_reduce_scatter[g] =
        ep_rs_arena_layout(groups[g].reduce_scatter->layout(), lane);  // relative to `at`
    ep_bytes = std::max(ep_bytes, a.ep_reduce_scatter[g].arena_bytes);
  }
  rs_bytes = std::max(rs_bytes, ep_bytes);
  a.reduce_scatter_bytes = aligned(rs_bytes);
  a.areas += 1;
  const std::int64_t rs_at = at;
  at += a.reduce_scatter_bytes;
  a.arena_bytes = at;
  a.reduce_scatter.arena_bytes = at;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].ep_reduce_scatter) {
      a.ep_reduce_scatter[g] = ep_rs_arena_layout_at(a.ep_reduce_scatter[g], rs_at, at);
    }
  }
  for (AgSequenceAreas& areas : a.all_gather)
    areas.bytes = at;

  // The Sec. 5.4 bound for these groups (App. F: the lane's groups add no stage, and their
  // inbox is its own closed form).
  std::int64_t residents = 0, stage_bound = 0, slots_bound = 0;
  for (const ArenaGroup& g : groups) {
    if (!g.all_gather->options().shard_in_stage())
      residents += g.all_gather->layout().shard_bytes();
    if (!g.ep_all_gather) stage_bound = std::max(stage_bound, g.all_gather->stage_bytes());
  }
  for (const LandingSlot& slot : a.slots)
    slots_bound += slot.bytes;
  std::optional<std::int64_t> staging;  // empty: no closed form applies
  if (general.empty()) {
    if (ep_bytes > 0) staging = ep_bytes;
  } else if (const std::optional<std::int64_t> bound = staging_bound(general)) {
    staging = std::max(*bound, ep_bytes);
  }
  a.bound_bytes = staging ? residents + stage_bound + slots_bound + *staging : 0;
  return a;
}

GroupSequences group_sequences(const std::vector<ArenaGroup>& groups,
                               const CommunicatorArena& arena, std::size_t i,
                               const RsProgramOptions& rs, Fault fault,
                               const SequenceOptions& sequence) {
  const ArenaGroup& g = groups.at(i);
  const AgSequenceAreas& areas = arena.all_gather.at(i);
  const std::string_view collective =
      fault == Fault::kNone ? std::string_view() : fault_info(fault).collective;
  const bool ag_fault = collective == "all-gather" || fault == Fault::kAgNoStageCredit;
  RsProgramOptions rs_options = rs;
  if (collective == "reduce-scatter" || fault == Fault::kRsBankReuse) rs_options.fault = fault;
  GroupSequences out;
  out.all_gather =
      g.ep_all_gather
          ? ep_ag_call_sequence(*g.all_gather,
                                EpAgArenaLayout{areas.resident, areas.landing, areas.bytes},
                                sequence)
          : ag_call_sequence(*g.all_gather, areas, sequence, ag_fault ? fault : Fault::kNone);
  out.reduce_scatter =
      g.ep_reduce_scatter
          ? ep_rs_call_sequence(g.reduce_scatter->layout(), arena.ep_reduce_scatter.at(i), sequence)
          : rs_call_sequence(*g.reduce_scatter, rs_options, arena.reduce_scatter, sequence);
  return out;
}

}  // namespace tide::program
