// The runner's slot graph step (steps 3 and 6 of NOTE [CUDA call sequences], docs/executor.md;
// NOTE [slot graph policy]): at construction whether calls may wait in graphs and keep slot
// graphs (NOTE [graph wait budget]); per call outside a caller's capture, the slot's graph
// replayed, re-pointed to the call's bindings or captured afresh. The graphs' data is
// SlotGraphs (sequence_slot_graph.hpp); implemented in sequence_slot_graph_runner.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "sequence_devices.hpp"
#include "sequence_enqueue.hpp"
#include "sequence_mapping.hpp"
#include "sequence_slot_graph.hpp"
#include "sequence_watcher.hpp"
#include "tide/exec/cuda_sequence.hpp"

namespace tide::exec::sequence_detail {

class SlotGraphRunner {
 public:
  SlotGraphRunner(Fixed& fixed, Devices& devices, const Mapping& mapping, SlotGraphs& graphs,
                  Enqueue& enqueue, Watcher& watcher)
      : fixed_(fixed),
        devices_(devices),
        mapping_(mapping),
        graphs_(graphs),
        enqueue_(enqueue),
        watcher_(watcher) {}

  // At construction, after the mapping: the graph waits' budget claim, whether slot graphs
  // stay on (clears the options' replay_graphs where not), the slots' generation words.
  void set_up();
  // The slot graph step of call `call` (with `totals` what earlier calls added) outside any
  // capture: true where the call ran as a launch of its slot's graph, false where it must take
  // the stream path.
  bool run(std::int64_t call, const std::vector<std::int64_t>& totals,
           std::span<const CudaCallBindings> bindings, float alpha, bool accumulate,
           cudaStream_t caller);
  // The slot's graphs freed (one still in flight is freed by the driver when it completes).
  static void drop(SlotGraph& g);

 private:
  bool same_as(const SlotBindings& b, std::span<const CudaCallBindings> bindings, float alpha,
               bool accumulate) const;
  void remember(SlotBindings& b, std::span<const CudaCallBindings> bindings, float alpha,
                bool accumulate) const;
  void capture(SlotGraph& g, std::int64_t call, const std::vector<std::int64_t>& totals,
               std::span<const CudaCallBindings> bindings, float alpha, bool accumulate);
  // Fresh bindings into the slot's graph: false (nothing launched, the graph to be dropped)
  // where a node update could not express them.
  bool repoint(SlotGraph& g, std::int64_t call, std::span<const CudaCallBindings> bindings,
               float alpha, bool accumulate);
  bool repoint_kernels(cudaGraphExec_t exec, std::int64_t call,
                       const std::vector<const Repoint*>& nodes,
                       std::span<const CudaCallBindings> bindings, float alpha, bool accumulate);
  static void release_repoints(SlotGraph& g);

  Fixed& fixed_;
  Devices& devices_;
  const Mapping& mapping_;
  SlotGraphs& graphs_;
  Enqueue& enqueue_;
  Watcher& watcher_;
};

}  // namespace tide::exec::sequence_detail
