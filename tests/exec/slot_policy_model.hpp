// A host model of one event slot under NOTE [slot graph policy]
// (src/exec/cuda/sequence_slot_policy.hpp): what the runner keeps per slot, driven by the
// bindings of the slot's calls (an id each: equal ids, equal pointers, alpha and accumulate).
// Used by sequence_slot_policy_test.cpp (CPU) and by the GPU cases of cuda_sequence_test.cpp
// that count captures and replays over a call pattern.
#pragma once

#include <vector>

#include "sequence_slot_policy.hpp"

namespace tide::sequence_testing {

struct SlotModel {
  bool may_repoint = false;  // fresh bindings can be patched into the slot's graph
  int last = -1;             // the last call's bindings (-1: no call yet)
  int run = 0;
  int captures = 0;
  int held = -1;  // the bindings the graph holds (-1: no graph)
  int replays = 0, repoints = 0, streams = 0;

  exec::sequence_detail::SlotStep call(int bindings) {
    using exec::sequence_detail::SlotStep;
    exec::sequence_detail::SlotView v;
    v.graph = held >= 0;
    v.graph_same = held == bindings;
    v.seen = last >= 0;
    run = last == bindings ? run + 1 : 1;
    v.run = run;
    v.captures = captures;
    v.may_repoint = may_repoint;
    last = bindings;
    const SlotStep step = exec::sequence_detail::slot_step(v);
    switch (step) {
      case SlotStep::kReplay:
        ++replays;
        break;
      case SlotStep::kRepoint:
        ++repoints;
        held = bindings;
        break;
      case SlotStep::kCapture:
        ++captures;
        held = bindings;
        break;
      case SlotStep::kStream:
        ++streams;
        break;
    }
    return step;
  }
  // Launches of the slot's graph (what CudaSequenceRunner::graph_launches() counts).
  int launches() const { return captures + replays + repoints; }
};

inline SlotModel run_slot(const std::vector<int>& pattern, bool may_repoint) {
  SlotModel m;
  m.may_repoint = may_repoint;
  for (const int b : pattern)
    m.call(b);
  return m;
}

}  // namespace tide::sequence_testing
