// The CUDA sequence runner's internal state (NOTE [CUDA call sequences] in docs/executor.md).
// Its parts' types sit in their own headers (sequence_mapping.hpp: a mapped template;
// sequence_slot_graph.hpp: slot graphs and captures; sequence_watch.hpp: the watch); the state
// is shared by:
//   sequence_runner.cpp  construction: checks, streams, events, the parts below set up
//   sequence_mapping.cpp templates resolved to pointer slots, messages and their transport
//   sequence_enqueue.cpp one call onto the streams (stream path and under capture)
//   sequence_waits.cpp   a call's waits (stream memory operations, or wait kernels in graphs)
//   sequence_fusion.cpp  the fusion pass over a mapped template (waits, counter additions)
//   sequence_graphs.cpp  the replay graphs (re-pointed) and the caller's captures
//   sequence_watch.cpp   the watch: stalled calls, release (sequence_abort_words.cpp: its words)
//   sequence_driver.cpp  the driver entry points; sequence_readouts.cpp the public read-outs
//   sequence_copy_pool.cpp  the copy-engine pool (NOTE [copy-engine pool])
//   sequence_profile.cpp the timing events of profiled calls (one-shot programs)
//   executor.cpp         the one-shot facade, CudaExecutor (NOTE [one-shot programs])
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sequence_abort_words.hpp"
#include "sequence_devices.hpp"
#include "sequence_enqueue.hpp"
#include "sequence_mapping.hpp"
#include "sequence_slot_graph.hpp"
#include "sequence_watch.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"
#include "tide/kernels/signal/abort_check.hpp"
#include "tide/program/program.hpp"
#include "transport/message.hpp"

namespace tide::exec::sequence_detail {

// The driver entry points of the stream path's waits (resolved at run time: no libcuda link).
struct GraphDriver {
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  // cuStreamBatchMemOp (v2); null where the driver lacks it (waits then go one by one).
  CUresult (*stream_batch_mem_op)(CUstream, unsigned int, CUstreamBatchMemOpParams*,
                                  unsigned int) = nullptr;
};
const GraphDriver& graph_driver();

}  // namespace tide::exec::sequence_detail

namespace tide::exec {

// The runner's state: what construction fixes (Fixed, its base) and the parts, each with the
// data it owns, declared in the order construction and destruction rely on:
// - devices (sequence_devices.hpp, sequence_runner.cpp): contexts, streams, events;
// - mapping (sequence_mapping.hpp, sequence_mapping.cpp): the mapped templates, the transport;
// - aborts (sequence_abort_words.hpp, sequence_abort_words.cpp): the abort words;
// - slot_graphs (sequence_slot_graph.hpp, sequence_graphs.cpp): slot graphs and captures;
// - enqueue (sequence_enqueue.hpp, sequence_enqueue.cpp, sequence_waits.cpp): calls onto the
//   streams, their order and counts;
// - watch (sequence_watch.hpp, sequence_watch.cpp): stalled calls, release;
// and the runner's own: the lock, the call cursor and the totals.
struct CudaSequenceRunner::State : sequence_detail::Fixed {
  State(const program::CallSequence& s, fabric::Fabric& f, const CudaSequencePlace& p,
        const CudaSequenceOptions& o)
      : Fixed(s, f, p, o),
        devices(*this),
        mapping(*this, devices),
        enqueue(*this, devices, mapping, slot_graphs, aborts) {}
  ~State();

  sequence_detail::Devices devices;
  sequence_detail::Mapping mapping;
  // NOTE [CUDA call sequences] 5: per rank its abort word (local ranks: the published word or a
  // private device word of its device; other ranks: the published word through the peer
  // mapping where it is load/store reachable, else null: NOTE [abort relay]), the private
  // words per device, and the end-of-call peer check.
  sequence_detail::AbortWords aborts;
  // NOTE [CUDA call sequences] 3-4: the slot graphs, the caller's captures and the graph waits
  // (sequence_graphs.cpp, sequence_waits.cpp).
  sequence_detail::SlotGraphs slot_graphs;
  sequence_detail::Enqueue enqueue;
  // NOTE [CUDA call sequences] 5 (sequence_watch.cpp).
  std::unique_ptr<sequence_detail::Watch> watch;
  // NOTE [CUDA call sequences] 6: guards every member that calls change (enqueue, capture
  // records, replays, graphs, the counts), so that calls may come from several host threads.
  // Never held while waiting for the device; the watch has its own lock.
  mutable std::mutex mutex;
  std::vector<std::int64_t> totals;  // what every call so far added, rank * counters + id
  std::int64_t call = 0;
  bool broken = false;  // a call failed part-way: every later call is refused

  // Replay graphs (sequence_graphs.cpp); at construction, the graph waits' budget and words.
  void set_up_graph_waits();
  bool same_as(const sequence_detail::SlotBindings& b, std::span<const CudaCallBindings> bindings,
               float alpha, bool accumulate) const;
  void remember(sequence_detail::SlotBindings& b, std::span<const CudaCallBindings> bindings,
                float alpha, bool accumulate) const;
  // The slot graph step of a call outside any capture (NOTE [slot graph policy]): true where
  // the call ran as a launch of its slot's graph, false where it must take the stream path.
  bool run_slot_graph(std::span<const CudaCallBindings> bindings, float alpha, bool accumulate,
                      cudaStream_t caller);
  void capture_slot(sequence_detail::SlotGraph& g, std::span<const CudaCallBindings> bindings,
                    float alpha, bool accumulate);
  // Fresh bindings into the slot's graph: false (nothing launched, the graph to be dropped)
  // where a node update could not express them.
  bool repoint(sequence_detail::SlotGraph& g, std::span<const CudaCallBindings> bindings,
               float alpha, bool accumulate);
  bool repoint_kernels(cudaGraphExec_t exec,
                       const std::vector<const sequence_detail::Repoint*>& nodes,
                       std::span<const CudaCallBindings> bindings, float alpha, bool accumulate);
  static void drop(sequence_detail::SlotGraph& g);
  static void release_repoints(sequence_detail::SlotGraph& g);

  // The watch (sequence_watch.cpp); its abort words (sequence_abort_words.cpp).
  void create_watch();
  void destroy_watch() noexcept;
  bool released() const;
  void watch_call(std::int64_t e, cudaStream_t caller);
  void set_up_abort_words();
  std::vector<std::string> aborted_ranks() const;
  std::vector<std::uint64_t> call_tags() const;
  std::vector<std::int64_t> totals_before(std::int64_t e) const;
  std::vector<std::string> unsatisfied_waits(std::int64_t e) const;
};

}  // namespace tide::exec
