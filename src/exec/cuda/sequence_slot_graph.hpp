// The runner's slot graphs and captures (steps 3-4 of NOTE [CUDA call sequences],
// docs/executor.md; NOTE [slot graph policy]): what a slot graph holds, the nodes that carry a
// call's bindings, and a capture in progress. Used by sequence_graphs.cpp and
// sequence_enqueue.cpp (which records the nodes while it captures).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

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

}  // namespace tide::exec::sequence_detail
