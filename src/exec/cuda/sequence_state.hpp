// The CUDA sequence runner's internal state (NOTE [CUDA call sequences] in docs/executor.md).
// Its parts sit in their own headers (below); the files:
//   sequence_runner.cpp  construction: checks, streams, events, the parts below set up
//   sequence_mapping.cpp templates resolved to pointer slots, messages and their transport
//   sequence_enqueue.cpp one call onto the streams (stream path and under capture)
//   sequence_waits.cpp   a call's waits (stream memory operations, or wait kernels in graphs)
//   sequence_fusion.cpp  the fusion pass over a mapped template (waits, counter additions)
//   sequence_slot_graph_runner.cpp  the replay graphs: replayed, re-pointed or captured
//   sequence_graphs.cpp  the caller's captures: taken, checked and accounted for
//   sequence_watcher.cpp the watch: completion events, what a stalled call waits for
//   sequence_watch.cpp   the watch's entry points: stalled calls, release
//   sequence_abort_words.cpp  the abort words
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
#include "sequence_slot_graph_runner.hpp"
#include "sequence_watch.hpp"
#include "sequence_watcher.hpp"
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
// data it owns and one job, declared in the order construction and destruction rely on:
// - devices (sequence_devices.hpp, sequence_runner.cpp): contexts, streams, events;
// - mapping (sequence_mapping.hpp, sequence_mapping.cpp): the mapped templates, the transport;
// - aborts (sequence_abort_words.hpp, sequence_abort_words.cpp): the abort words;
// - slot_graphs (sequence_slot_graph.hpp): the slot graphs' and captures' data;
// - enqueue (sequence_enqueue.hpp, sequence_enqueue.cpp, sequence_waits.cpp): calls onto the
//   streams, their order and counts;
// - watcher (sequence_watcher.hpp, sequence_watcher.cpp): the calls' completion events and
//   what a stalled call waits for;
// - graph_runner (sequence_slot_graph_runner.hpp, sequence_slot_graph_runner.cpp): a call's
//   slot graph replayed, re-pointed or captured;
// and the runner's own: the lock, the call cursor and the totals.
struct CudaSequenceRunner::State : sequence_detail::Fixed {
  State(const program::CallSequence& s, fabric::Fabric& f, const CudaSequencePlace& p,
        const CudaSequenceOptions& o)
      : Fixed(s, f, p, o),
        devices(*this),
        mapping(*this, devices),
        enqueue(*this, devices, mapping, slot_graphs, aborts),
        watcher(*this, devices, mapping, aborts),
        graph_runner(*this, devices, mapping, slot_graphs, enqueue, watcher) {}
  ~State();

  sequence_detail::Devices devices;
  sequence_detail::Mapping mapping;
  // NOTE [CUDA call sequences] 5: per rank its abort word (local ranks: the published word or a
  // private device word of its device; other ranks: the published word through the peer
  // mapping where it is load/store reachable, else null: NOTE [abort relay]), the private
  // words per device, and the end-of-call peer check.
  sequence_detail::AbortWords aborts;
  // NOTE [CUDA call sequences] 3-4: the slot graphs, the caller's captures and the graph waits
  // (sequence_slot_graph_runner.cpp, sequence_graphs.cpp, sequence_waits.cpp).
  sequence_detail::SlotGraphs slot_graphs;
  sequence_detail::Enqueue enqueue;
  // NOTE [CUDA call sequences] 5 (sequence_watcher.cpp, sequence_watch.cpp).
  sequence_detail::Watcher watcher;
  sequence_detail::SlotGraphRunner graph_runner;
  // NOTE [CUDA call sequences] 6: guards every member that calls change (enqueue, capture
  // records, replays, graphs, the counts), so that calls may come from several host threads.
  // Never held while waiting for the device; the watch has its own lock.
  mutable std::mutex mutex;
  std::vector<std::int64_t> totals;  // what every call so far added, rank * counters + id
  std::int64_t call = 0;
  bool broken = false;  // a call failed part-way: every later call is refused
};

}  // namespace tide::exec
