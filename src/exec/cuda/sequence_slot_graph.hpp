// The runner's slot graphs and captures (steps 3-4 of NOTE [CUDA call sequences],
// docs/executor.md; NOTE [slot graph policy]): what a slot graph holds, the nodes that carry a
// call's bindings, and a capture in progress. Used by sequence_slot_graph_runner.cpp (the slot
// graph step), sequence_graphs.cpp (a caller's capture) and sequence_enqueue.cpp (which records
// the nodes while it captures).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tide/exec/cuda_sequence.hpp"

namespace tide::exec::sequence_detail {

// A node of a slot graph that carries what a call binds: caller pointers (a kTensor or
// kOutput slot), alpha (kSum) or accumulate (kLand) (NOTE [CUDA call sequences] 3).
struct Repoint {
  cudaGraphNode_t node = nullptr;
  std::size_t op = 0;         // index into the template's ops
  int copy = -1;              // the copy of a kCopy; -1: the op's kernel or memset
  cudaMemsetParams memset{};  // a kZero's node as captured (its dst is replaced)
};

// A call being captured (NOTE [CUDA call sequences] 3-4): where the graph starts and, for the
// runner's own slot graphs, where to record the nodes that carry caller pointers.
struct Capture {
  std::int64_t first_call = 0;               // earlier calls are outside the graph
  std::vector<Repoint>* repoints = nullptr;  // null: not recorded
  bool repointable = true;  // every such node was found (one node per copy / launch)
};

// What a call binds on the local ranks (NOTE [slot graph policy]).
struct SlotBindings {
  bool set = false;  // the fields hold a call's
  std::vector<std::vector<const void*>> tensors;
  std::vector<void*> outputs;
  float alpha = 1.0f;
  bool accumulate = false;
};

// A replay graph of one event slot (NOTE [CUDA call sequences] 3, NOTE [slot graph policy]).
struct SlotGraph {
  SlotBindings last;  // the slot's last call's bindings
  int run = 0;        // consecutive calls of the slot that bound `last` (the last one included)
  int captures = 0;   // graphs captured for the slot so far
  SlotBindings held;  // what the graph's nodes hold (set while `exec` is)
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<Repoint> repoints;
  bool repointable = false;     // every node carrying bindings is in `repoints`
  bool repoint_failed = false;  // a node update failed once: not tried again for this slot
};

// The runner's slot graphs and what goes with them (NOTE [CUDA call sequences] 3-4).
struct SlotGraphs {
  // Caller capture (step 4): the calls captured so far and the shadow cursor and totals they
  // were built with.
  CudaCapturedCalls captured;
  std::vector<std::int64_t> capture_totals;
  unsigned long long capture_id = 0;  // the capture `captured` belongs to
  // Replay graphs, per event slot, and the stream they are captured from.
  std::vector<SlotGraph> graphs;
  cudaStream_t origin = nullptr;
  std::int64_t graph_launches = 0;  // captures, replays and re-pointed replays
  std::int64_t graph_captures = 0;  // slot graphs captured and instantiated
  // Graph waits (step 3): per event slot, a device word counting the slot's calls (on the
  // first local rank's device), and what Q consecutive calls add to each counter (rank *
  // counters + id).
  std::uint64_t* generations = nullptr;
  std::vector<std::int64_t> slot_period_additions;
  std::string no_graph_waits;  // why graphs cannot hold this sequence's waits (empty: they can)
  // Why the runner's own slot graphs are off while a caller's capture is taken (step 6: a
  // transport whose sides must be captured alike on both ranks).
  std::string no_slot_graphs;
  // NOTE [graph wait budget]: this runner's claim in the process's registry.
  std::uint64_t budget_id = 0;
  bool budget_claimed = false;
  std::string repoint_failure;  // step 3: the last reason
  std::int64_t nodes_repointed = 0;
  std::int64_t repointed_launches = 0;
  // Per device: the stream that captures a fresh call's kernels for their node parameters.
  std::map<int, cudaStream_t> scratch;
};

}  // namespace tide::exec::sequence_detail
