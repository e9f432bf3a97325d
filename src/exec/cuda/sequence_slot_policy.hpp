// What a call of the CUDA sequence runner does with its event slot's graph (NOTE [slot graph
// policy]): plain host logic, no CUDA, so that it is checked on the CPU
// (tests/exec/sequence_slot_policy_test.cpp). The runner (sequence_enqueue.cpp) fills a
// SlotView per call and does what slot_step() says.
//
// NOTE [slot graph policy]
// Part of NOTE [CUDA call sequences] 3. Per event slot the runner keeps: the bindings (caller
// pointers, alpha, accumulate) of the slot's last call, `run` (how many consecutive calls of
// the slot bound exactly those, the current one included), the slot's graph if any with the
// bindings its nodes hold, and how many graphs the slot has captured. A call then:
// 1. replays the graph where its bindings equal the graph's (nothing patched);
// 2. else re-points the graph where fresh bindings can be patched in (repoint_graphs on, every
//    node carrying bindings recorded at capture, no node update refused so far);
// 3. else captures a new graph (replacing the slot's) where
//    - the slot has captured none yet, the call is not the slot's first, and either fresh
//      bindings could be patched into what it captures or the call binds what the slot's
//      previous call bound (the second visit: as before), or
//    - the call's bindings have come `capture_run(captures)` = 2^(captures + 1) times in a row
//      (2, 4, 8, ... consecutive calls of the slot): a slot whose graph cannot take fresh
//      bindings re-captures only for bindings that proved stable, each time waiting twice as
//      long, so that k captures need about 2^(k+1) calls of the slot (7 captures in 26
//      calls, the churn seen when every fresh call dropped the graph, cannot happen);
// 4. else runs on the stream path, and the slot KEEPS its graph: a later call whose bindings
//    equal the graph's replays it (the pointers a caching allocator hands back recur).
// A slot whose graph cannot take fresh bindings thus never drops it for a fresh call. It
// drops it only where a node update failed part-way (its nodes then hold a mix of two calls'
// bindings): that call runs on the stream path and the slot re-points no more (rule 3's
// doubling run then applies). Why a slot cannot re-point: repoint_failure().
#pragma once

#include <climits>

namespace tide::exec::sequence_detail {

enum class SlotStep {
  kReplay,   // launch the slot's graph as it is
  kRepoint,  // patch the call's bindings into the slot's graph, then launch it
  kCapture,  // capture the call into a new graph for the slot (replacing one it holds), launch
  kStream,   // the stream path; the slot keeps whatever graph it holds
};

struct SlotView {
  bool graph = false;        // the slot holds an instantiated graph
  bool graph_same = false;   // the call's bindings equal those the graph's nodes hold
  bool seen = false;         // the slot had a call before this one
  int run = 1;               // consecutive calls of the slot with this call's bindings (>= 1)
  int captures = 0;          // graphs the slot has captured so far
  bool may_repoint = false;  // fresh bindings can be patched into the slot's graph (or, with
                             // no graph, into one captured now)
};

// The run of equal bindings a slot's capture number `captures` + 1 needs (rule 3).
constexpr int capture_run(int captures) {
  return captures >= 29 ? INT_MAX : 2 << captures;
}

constexpr SlotStep slot_step(const SlotView& v) {
  if (v.graph && v.graph_same) return SlotStep::kReplay;
  if (v.graph && v.may_repoint) return SlotStep::kRepoint;
  if (!v.seen) return SlotStep::kStream;
  if (!v.graph && v.captures == 0 && v.may_repoint) return SlotStep::kCapture;
  if (v.run >= capture_run(v.captures)) return SlotStep::kCapture;
  return SlotStep::kStream;
}

}  // namespace tide::exec::sequence_detail
