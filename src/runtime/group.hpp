// A registered group: its plans, its places in the communicator's arena, its call sequences
// and how far each has run on this rank (NOTE [runtime] 2).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/call_sequence.hpp"
#include "tide/program/communicator_arena.hpp"
#include "tide/program/lanes.hpp"
#include "tide/runtime/communicator.hpp"

namespace tide::runtime::detail {

// One collective's sequence on this rank: its templates (this rank's ops and its peers'
// additions to its counters only, NOTE [kept ranks]), its first signal word among the
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

// NOTE [runtime] 11: what the communicator offers its groups for the expert-parallel lane.
struct EpLaneOffer {
  bool ranks_one_per_host = false;  // M x 1 with M >= 2, every rank on a host of its own
  std::string backend_refusal;      // why this backend cannot run the lane ("": it can)
};

struct Group {
  Group(int i, GroupSpec s, GroupLayout l, AgPlan a, RsPlan r)
      : index(i), spec(std::move(s)), layout(std::move(l)), ag(std::move(a)), rs(std::move(r)) {}
  int index = 0;  // its id
  GroupSpec spec;
  GroupLayout layout;
  AgPlan ag;
  RsPlan rs;
  // NOTE [runtime] 11: the collectives that run on the expert-parallel lane (program/ep_lane.hpp)
  bool ep_all_gather = false;
  bool ep_reduce_scatter = false;
  program::AgSequenceAreas ag_areas;  // in the communicator's arena (NOTE [communicator arena])
  int slot = 0;                       // its landing slot: index into the arena's slots
  bool gradients_staged = false;      // NOTE [runtime] 8: its slot holds its gradients
  SequenceState all_gathers;
  SequenceState reduce_scatters;
  GroupInfo info;
  GroupStats stats;
};

// The plans of an agreed group, its lanes (`ep`: NOTE [runtime] 11), and its layout's part of
// info(). Throws Unsupported when its calls cannot be expressed as call sequences (checked on
// an arena of its own).
std::unique_ptr<Group> make_group(int index, const GroupSpec& spec, const Topology& topology,
                                  const RsOptions& rs_options, const EpLaneOffer& ep);

// NOTE [communicator arena]: the arena of every registered group; then each group's call
// sequences in it, their signal words from `first_counter` on (returns the words used), kept
// for `rank`, this process's (NOTE [kept ranks]).
program::CommunicatorArena arena_of(const std::vector<std::unique_ptr<Group>>& groups);
int place_groups(const std::vector<std::unique_ptr<Group>>& groups,
                 const program::CommunicatorArena& arena, int first_counter, int rank);

// The lane handoff's state (NOTE [lane handoff]) for a world of `ranks`, at signal word `word`,
// kept for `rank`.
SequenceState handoff_state(int ranks, int word, int rank);

// NOTE [registration scratch]
// Building a group's call sequences builds every rank's ops (NOTE [kept ranks]): at N = 8 a
// group's build allocates and frees megabytes, and glibc keeps freed pages resident wherever a
// live allocation sits above them, so a process would hold the largest build's peak for good
// (measured: 12-15 MiB of RssAnon at N = 8 after registering the benchmark's wide model, 3 MiB
// of it in use). Registration (after its check build) and the arena's layout (after the
// sequences are placed and kept) hand the heap's free pages back to the system: glibc's
// malloc_trim(0), a no-op elsewhere. Its cost is the pages it releases: 0.01-0.1 ms after a
// registration, about 8 ms for the first one in a Python process after two training steps,
// 20 ms with 10^4 freed tensors interleaved with live ones. What it cannot lower is the build's
// own peak: RSS rises by 16 MiB while the benchmark's wide model registers at N = 8 (every
// rank's ops of 32 calls at once in make_call_sequence), and that still counts in P_before.
void release_free_heap();

// A call's statistics, once it is made (every backend): the count, the bytes of FSDP2's layout
// copies it replaces (GroupStats::copy_bytes_avoided) and of the copies it still makes
// (GroupStats::copy_bytes_made). `shards_given`: the all-gather read shards by pointer.
void count_all_gather(Group& group, bool shards_given);
void count_reduce_scatter(Group& group);

}  // namespace tide::runtime::detail
