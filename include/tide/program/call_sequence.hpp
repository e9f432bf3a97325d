// One group's open-ended sequence of calls of one collective as a few call templates: any
// number of calls after one registration, no host barrier between them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/ag_builder.hpp"
#include "tide/program/legal_order.hpp"
#include "tide/program/program.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide::program {

// Call e of a sequence runs template e mod P (period P, found past a warm-up of calls built by
// the per-call builders). Counters below `first_private_counter` are shared by every call;
// call e's private counters live in slot e mod P. A template's wait thresholds are relative:
// the wait completes once its counter holds what every earlier call added plus `value` (which
// may be <= 0). Template event ids are local plus an age per op: a wait of age a refers to
// call e - a's record (none when e < a). How the period is found and why it is exact: NOTE
// [call sequences] in docs/program.md.
struct CallTemplate {
  // One call on every rank: physical counters, relative thresholds, local events; tensors
  // kTensor 0..P-1, output kOutput 0, the arena the group's region.
  Program program;
  std::vector<int> event_age;           // per op: for kEventWait, how many calls back
  std::vector<std::int64_t> additions;  // per (rank, counter), rank-major: what the call adds
  LegalOrder order;                     // NOTE [legal order], earlier calls taken as done
  // NOTE [kept ranks]: empty while the template holds every rank's ops; after keep_ranks, per
  // op its index among the `built_ops` ops it was built with (the same in every process).
  std::vector<int> op_ids;
  int built_ops = 0;
  int op_id(std::size_t i) const { return op_ids.empty() ? static_cast<int>(i) : op_ids[i]; }
  int op_id_count() const {
    return op_ids.empty() ? static_cast<int>(program.ops.size()) : built_ops;
  }
};

struct CallSequence {
  std::vector<CallTemplate> templates;  // call e runs templates[e % period]
  int period = 0;
  int counters = 0;         // physical counters per rank
  int events_per_call = 0;  // local event ids per call
  int max_event_age = 0;    // the oldest call an event wait refers to
  const CallTemplate& for_call(std::int64_t e) const {
    return templates[static_cast<std::size_t>(e % period)];
  }
};

// Builds call e at `placement`; called for e = 0, 1, 2, ... in order (may keep state).
using CallBuilder = std::function<Program(int call, const CallPlacement& placement)>;

struct SequenceOptions {
  int max_period = 8;  // periods tried: 1 .. max_period
  int warmup = 8;      // calls built before the first template (rounded up to a period)
};

// Finds the period and templates; `sizes`: one call's buffers (arena = the region).
// Unsupported when no period up to max_period fits (the caller falls back).
CallSequence make_call_sequence(const CallBuilder& build, int first_private_counter,
                                const BufferSizes& sizes, const SequenceOptions& options = {});

// A group's all-gather bytes in its region: the resident shard (absent with a cast), two
// receive stages (call a uses a mod 2), the landing (stable for the group's life).
struct AgSequenceAreas {
  std::int64_t resident = 0;
  std::int64_t stage[2] = {0, 0};
  std::int64_t landing = 0;
  std::int64_t bytes = 0;
};
AgSequenceAreas ag_sequence_areas(const AgPlan& plan, std::int64_t at = 0);

// The all-gather calls of one group (Sec. 3.1-3.2); `fault`: an all-gather fault built into
// every call (tests and the simulator).
CallSequence ag_call_sequence(const AgPlan& plan, const AgSequenceAreas& areas,
                              const SequenceOptions& options = {}, Fault fault = Fault::kNone);
// The reduce-scatter calls of one group (Sec. 5.2-5.3): `areas` offsets inside the region.
CallSequence rs_call_sequence(const RsPlan& plan, const RsProgramOptions& rs,
                              const RsArenaLayout& areas, const SequenceOptions& options = {});

// Calls 0 .. calls - 1 as one flat program (absolute thresholds; call e's tensors kTensor
// e * tensors + p, output kOutput e), for the reference executor.
Program expand_calls(const CallSequence& sequence, int calls);

}  // namespace tide::program
