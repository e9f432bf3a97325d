// A registered group: its plans, its place in the communicator arena, its call sequences (NOTE
// [runtime] 2).
#include "group.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>

#include "tide/program/ep_lane.hpp"
#include "tide/program/kept_ranks.hpp"

namespace tide::runtime::detail {
namespace {

AgOptions ag_options(const GroupSpec& spec) {
  AgOptions o;
  o.mixed_precision_cast = spec.cast;
  o.staged_shards = spec.staged_shards && !spec.cast;
  return o;
}

RsOptions rs_options_for(const GroupSpec& spec, RsOptions o) {
  o.mode = spec.mode;
  o.sub_slices = spec.sub_slices;
  return o;
}

// NOTE [kept ranks]: of the sequence built for every rank, this process keeps `rank`'s ops.
SequenceState sequence_state(program::CallSequence sequence, int first_counter, int rank) {
  const int ranks[] = {rank};
  program::keep_ranks(sequence, ranks);
  SequenceState s;
  s.counter_base.assign(static_cast<std::size_t>(sequence.counters), 0);
  s.sequence = std::move(sequence);
  s.first_counter = first_counter;
  return s;
}

program::ArenaGroup arena_group(const Group& g, int landing_slot) {
  program::ArenaGroup a{&g.ag, &g.rs, landing_slot};
  a.ep_all_gather = g.ep_all_gather;
  a.ep_reduce_scatter = g.ep_reduce_scatter;
  return a;
}

// NOTE [runtime] 11: which collectives of `g` run on the expert-parallel lane, and why not.
void choose_lanes(Group& g, const EpLaneOffer& ep) {
  GroupInfo& info = g.info;
  info.all_gather_lane = "tide-ag";
  info.reduce_scatter_lane = "tide-rs";
  if (!ep.ranks_one_per_host) {
    info.lane_reason =
        "TIDE-AG and TIDE-RS: the group has several ranks on a host (the expert-parallel lane "
        "serves groups of one rank per host, such as FSDP beside a TP that spans each host)";
    return;
  }
  std::string why = ep.backend_refusal;
  if (why.empty()) why = program::ep_lane_inapplicable(g.layout);
  if (!why.empty()) {
    info.lane_reason = "not on the expert-parallel lane: " + why;
    return;
  }
  g.ep_all_gather = true;
  info.all_gather_lane = "ep";
  if (std::string rs_why = program::ep_rs_inapplicable(g.layout); !rs_why.empty()) {
    info.lane_reason = "reduce-scatter on TIDE-RS, not the expert-parallel lane: " + rs_why;
    return;
  }
  g.ep_reduce_scatter = true;
  info.reduce_scatter_lane = "ep";
  info.lane_reason = "the expert-parallel lane: the group has one rank per host";
}

}  // namespace

void SequenceState::advance(int rank) {
  const program::CallTemplate& t = next();
  const std::size_t first = static_cast<std::size_t>(rank) * counter_base.size();
  for (std::size_t id = 0; id < counter_base.size(); ++id)
    counter_base[id] += t.additions[first + id];
  ++calls;
}

std::unique_ptr<Group> make_group(int index, const GroupSpec& spec, const Topology& topology,
                                  const RsOptions& rs_options, const EpLaneOffer& ep) {
  GroupLayout layout(topology, spec.params, spec.ag_dtype, spec.grad_dtype);
  AgPlan ag(layout, ag_options(spec));
  RsPlan rs(layout, rs_options_for(spec, rs_options));
  auto g = std::make_unique<Group>(index, spec, layout, std::move(ag), std::move(rs));
  choose_lanes(*g, ep);
  // Registration refuses what cannot run: the sequences on an arena of the group's own
  // (place_groups builds them again in the communicator's arena).
  const std::vector<program::ArenaGroup> alone = {arena_group(*g, -1)};
  (void)program::group_sequences(alone, program::communicator_arena(alone), 0);

  GroupInfo& info = g->info;
  info.name = spec.name;
  info.shard_elems = layout.shard_elems();
  const std::int64_t ag_item = item_bytes(spec.ag_dtype);
  for (int p = 0; p < layout.param_count(); ++p) {
    const ParamLayout& pl = layout.param(p);
    info.rows_per_rank.push_back(pl.rows_per_rank);
    info.shard_offsets.push_back(pl.offset / ag_item);
    info.out_offsets.push_back(pl.out_offset);
    info.landing_offsets.push_back(layout.landing_offset(p, 0));
  }
  info.landing_bytes = layout.unsharded_bytes();
  info.landing_slot_id = spec.landing_slot;
  return g;
}

program::CommunicatorArena arena_of(const std::vector<std::unique_ptr<Group>>& groups) {
  std::vector<program::ArenaGroup> list;
  for (const auto& g : groups)
    list.push_back(arena_group(*g, g->spec.landing_slot));
  return program::communicator_arena(list);
}

int place_groups(const std::vector<std::unique_ptr<Group>>& groups,
                 const program::CommunicatorArena& arena, int first_counter, int rank) {
  std::vector<program::ArenaGroup> list;
  for (const auto& g : groups)
    list.push_back(arena_group(*g, g->spec.landing_slot));
  int counter = first_counter;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    Group& g = *groups[i];
    g.ag_areas = arena.all_gather[i];
    g.slot = arena.slot_of[i];
    auto [ag_seq, rs_seq] = program::group_sequences(list, arena, i);
    const int rs_first = counter + ag_seq.counters;
    g.all_gathers = sequence_state(std::move(ag_seq), counter, rank);
    g.reduce_scatters = sequence_state(std::move(rs_seq), rs_first, rank);
    counter = rs_first + g.reduce_scatters.sequence.counters;
    g.info.landing_slot = g.slot;
    g.info.ag_period = g.all_gathers.sequence.period;
    g.info.rs_period = g.reduce_scatters.sequence.period;
  }
  return counter - first_counter;
}

SequenceState handoff_state(int ranks, int word, int rank) {
  return sequence_state(program::handoff_sequence(ranks), word, rank);
}

void release_free_heap() {
#if defined(__GLIBC__)
  (void)malloc_trim(0);
#endif
}

void count_all_gather(Group& g, bool shards_given) {
  ++g.stats.all_gathers;
  // FSDP2 copies the gathered buffer out into the parameters (N S): never made here.
  g.stats.copy_bytes_avoided += g.layout.unsharded_bytes();
  if (shards_given) {
    // The shards cast or copied into stage slot 0 (or into the resident shard): S bytes.
    g.stats.copy_bytes_made += g.layout.shard_bytes();
  } else {
    // The caller keeps the shard in TIDE's resident shard: FSDP2's copy-in is not needed.
    g.stats.copy_bytes_avoided += g.layout.shard_bytes();
  }
}

void count_reduce_scatter(Group& g) {
  ++g.stats.reduce_scatters;
  // FSDP2's _chunk_cat writes the fp32 packing buffer (Eq. 3).
  g.stats.copy_bytes_avoided += g.layout.pack_buffer_bytes();
}

}  // namespace tide::runtime::detail
