// A registered group: its plans, its region of the arena, its call sequences and how far each
// has run on this rank (NOTE [runtime] 2).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/call_sequence.hpp"
#include "tide/runtime/communicator.hpp"

namespace tide::runtime::detail {

// One collective's sequence on this rank: its templates, its first signal word among the
// communicator's, what earlier calls added to each of this rank's words, and the calls made.
struct SequenceState {
  program::CallSequence sequence;
  int first_counter = 0;
  std::vector<std::int64_t> counter_base;  // per counter id of the sequence, this rank's
  std::int64_t calls = 0;

  const program::CallTemplate& next() const { return sequence.for_call(calls); }
  // After a call of `next()` on `rank`: advance the bases and the call count.
  void advance(int rank);
};

struct Group {
  Group(GroupSpec s, GroupLayout l, AgPlan a, RsPlan r)
      : spec(std::move(s)), layout(std::move(l)), ag(std::move(a)), rs(std::move(r)) {}
  GroupSpec spec;
  GroupLayout layout;
  AgPlan ag;
  RsPlan rs;
  program::AgSequenceAreas ag_areas;  // offsets inside the region
  std::int64_t region_offset = 0;     // in the arena
  std::int64_t region_bytes = 0;
  SequenceState all_gathers;
  SequenceState reduce_scatters;
  GroupInfo info;
  GroupStats stats;
};

// Plans, areas and call sequences of an agreed group. `region_offset` and `first_counter`
// place it in the communicator's arena and signal words. Throws Unsupported when its calls
// cannot be expressed as a call sequence.
std::unique_ptr<Group> make_group(const GroupSpec& spec, const Topology& topology,
                                  const RsOptions& rs_options, std::int64_t region_offset,
                                  int first_counter);

// The signal words a group's two sequences use.
int sequence_counters(const Group& group);

// The bytes of FSDP2's layout copies that a call replaces (GroupStats::copy_bytes_avoided).
std::int64_t all_gather_copy_bytes(const GroupLayout& layout);
std::int64_t reduce_scatter_copy_bytes(const GroupLayout& layout);

}  // namespace tide::runtime::detail
