// A registered group's plans, region and call sequences (NOTE [runtime] 2).
#include "group.hpp"

#include <algorithm>

namespace tide::runtime::detail {
namespace {

constexpr std::int64_t kAlign = 4096;
std::int64_t aligned(std::int64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

AgOptions ag_options(const GroupSpec& spec) {
  AgOptions o;
  o.mixed_precision_cast = spec.cast;
  return o;
}

RsOptions rs_options_for(const GroupSpec& spec, RsOptions o) {
  o.mode = spec.mode;
  o.sub_slices = spec.sub_slices;
  return o;
}

SequenceState sequence_state(program::CallSequence sequence, int first_counter) {
  SequenceState s;
  s.counter_base.assign(static_cast<std::size_t>(sequence.counters), 0);
  s.sequence = std::move(sequence);
  s.first_counter = first_counter;
  return s;
}

}  // namespace

void SequenceState::advance(int rank) {
  const program::CallTemplate& t = next();
  const std::size_t first = static_cast<std::size_t>(rank) * counter_base.size();
  for (std::size_t id = 0; id < counter_base.size(); ++id)
    counter_base[id] += t.additions[first + id];
  ++calls;
}

std::unique_ptr<Group> make_group(const GroupSpec& spec, const Topology& topology,
                                  const RsOptions& rs_options, std::int64_t region_offset,
                                  int first_counter) {
  GroupLayout layout(topology, spec.params, spec.ag_dtype, spec.grad_dtype);
  AgPlan ag(layout, ag_options(spec));
  RsPlan rs(layout, rs_options_for(spec, rs_options));
  auto g = std::make_unique<Group>(spec, layout, std::move(ag), std::move(rs));
  g->ag_areas = program::ag_sequence_areas(g->ag);
  program::RsArenaLayout rs_areas = program::rs_arena_layout(g->rs);
  const std::int64_t rs_at = aligned(g->ag_areas.bytes);
  for (std::int64_t* offset : {&rs_areas.staging, &rs_areas.outbox, &rs_areas.spares,
                               &rs_areas.inbox, &rs_areas.arena_bytes})
    *offset += rs_at;
  g->region_offset = region_offset;
  g->region_bytes = aligned(rs_areas.arena_bytes);

  program::CallSequence ag_seq = program::ag_call_sequence(g->ag, g->ag_areas);
  program::CallSequence rs_seq = program::rs_call_sequence(g->rs, {}, rs_areas);
  // Both sequences see the whole region as their arena (offsets are region-relative).
  for (program::CallSequence* s : {&ag_seq, &rs_seq}) {
    for (program::CallTemplate& t : s->templates) {
      for (program::BufferSizes& b : t.program.buffers)
        b.arena_bytes = g->region_bytes;
    }
  }
  const int rs_first = first_counter + ag_seq.counters;
  g->all_gathers = sequence_state(std::move(ag_seq), first_counter);
  g->reduce_scatters = sequence_state(std::move(rs_seq), rs_first);

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
  info.region_bytes = g->region_bytes;
  info.ag_period = g->all_gathers.sequence.period;
  info.rs_period = g->reduce_scatters.sequence.period;
  return g;
}

int sequence_counters(const Group& g) {
  return g.all_gathers.sequence.counters + g.reduce_scatters.sequence.counters;
}

std::int64_t all_gather_copy_bytes(const GroupLayout& layout) {
  // FSDP2 copies the shards into its flat input (S) and the gathered buffer out into the
  // parameters (N S).
  return layout.shard_bytes() + layout.unsharded_bytes();
}

std::int64_t reduce_scatter_copy_bytes(const GroupLayout& layout) {
  // FSDP2's _chunk_cat writes the fp32 packing buffer (Eq. 3).
  return layout.pack_buffer_bytes();
}

}  // namespace tide::runtime::detail
