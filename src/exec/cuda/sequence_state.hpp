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

// Timing events of profiled calls (one-shot programs, CudaRunOptions::profile): per op of
// template 0 (kernels only, else null) and per stream, a pair around it.
struct ProfileEvents {
  bool on = false;  // the next stream-path call records them
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> ops;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> streams;
};

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

// The members below keep the order that construction and destruction rely on; by part:
// - the runner (sequence_runner.cpp): sequence, fabric, place, options, ranks, counters, q,
//   local ranks, contexts, streams, events, setup streams, the lock, call, totals;
// - mapping (sequence_mapping.cpp): templates, template_repointable, transport, has_messages,
//   one_sided, one_sided_refusal, one_shot, pool_events;
// - enqueue (sequence_enqueue.cpp, sequence_waits.cpp): last_done, last_caller, called, memops,
// batch_waits,
//   messages_sent, profile;
// - slot graphs (sequence_graphs.cpp): a part of their own (slot_graphs:
//   sequence_slot_graph.hpp);
// - the watch (sequence_watch.cpp): watch, and its abort words, a part of their own (aborts:
//   sequence_abort_words.hpp).
struct CudaSequenceRunner::State {
  const program::CallSequence& sequence;
  fabric::Fabric& fabric;
  CudaSequencePlace place;
  CudaSequenceOptions options;
  int ranks = 0;
  int counters = 0;
  int q = 1;  // event slots
  std::vector<int> local_ranks;
  std::vector<CUcontext> context;  // per rank (local ones set)
  std::vector<cudaStream_t> streams;
  std::vector<int> stream_rank;
  std::vector<int> stream_name;   // per stream: the program's name index, or kRail/kPoolStreamName
  std::vector<cudaEvent_t> done;  // per stream
  std::map<std::pair<int, int>, int> stream_of;
  cudaEvent_t entry = nullptr;
  std::vector<cudaEvent_t> events;  // (slot * ranks + rank) * events_per_call + id
  std::vector<sequence_detail::Template> templates;
  // Per template: no copy of caller memory is 2-D, so its slot graphs may re-point (NOTE
  // [CUDA call sequences] 3: CUDA updates only 1-D copy nodes); known at construction.
  std::vector<char> template_repointable;
  // NOTE [CUDA call sequences] 6: guards every member that calls change (enqueue, capture
  // records, replays, graphs, the counts below), so that calls may come from several host
  // threads. Never held while waiting for the device; the watch has its own lock.
  mutable std::mutex mutex;
  std::vector<std::int64_t> totals;  // what every call so far added, rank * counters + id
  std::int64_t call = 0;
  bool broken = false;      // a call failed part-way: every later call is refused
  int current_device = -1;  // this thread's, as last set (reset at every entry: threads differ)
  // NOTE [CUDA call sequences] 5: per rank its abort word (local ranks: the published word or a
  // private device word of its device; other ranks: the published word through the peer
  // mapping where it is load/store reachable, else null: NOTE [abort relay]), the private
  // words per device, and the end-of-call peer check.
  sequence_detail::AbortWords aborts;
  // NOTE [CUDA call sequences] 3-4: the slot graphs, the caller's captures and the graph waits
  // (sequence_graphs.cpp, sequence_waits.cpp).
  sequence_detail::SlotGraphs slot_graphs;
  std::int64_t messages_sent = 0;  // sender sides enqueued (under `mutex`)
  std::int64_t message_bytes_sent = 0;
  // Calls run one after another (NOTE [CUDA call sequences] 2): each records last_done on its
  // caller stream, and a call on another caller stream first waits for it. The legacy default
  // stream is nullptr, a caller stream like any other: `called` says whether one was seen.
  cudaEvent_t last_done = nullptr;
  cudaStream_t last_caller = nullptr;
  bool called = false;
  // NOTE [CUDA call sequences] 5 (sequence_watch.cpp).
  std::unique_ptr<sequence_detail::Watch> watch;
  // Per device: whether cuStreamBatchMemOp may carry 64-bit waits (else one by one).
  std::map<int, bool> batch_waits;
  // Construction only (NOTE [CUDA call sequences] 1): per device the private stream that runs
  // the runner's setup work (zeroing, table uploads); synchronised and destroyed at its end.
  std::map<int, cudaStream_t> setup;
  std::vector<CUstreamBatchMemOpParams> memops;  // reused by every wait
  // NOTE [CUDA call sequences] 6: where messages travel, and the 8-byte device word signal
  // messages carry (on the first local rank's device).
  std::shared_ptr<transport::MessageTransport> transport;  // the place's, or null
  bool has_messages = false;
  // NOTE [one-sided messages]: whether this runner's messages travel one-sided, and why not.
  bool one_sided = false;
  std::string one_sided_refusal;
  void choose_one_sided();
  void choose_transport();  // sequence_mapping.cpp, step 1
  transport::MessageRelay relay_of(const transport::Message& m) const;
  // NOTE [one-shot programs] (executor.cpp): kTensor and kOutput regions are the fabric's
  // buffers, kSum and kLand keep the program's alpha and accumulate, and ops no legal order
  // reaches follow in program order.
  bool one_shot = false;
  std::vector<cudaEvent_t> pool_events;  // NOTE [copy-engine pool]: every fork and join
  sequence_detail::ProfileEvents profile;
  // Whether `op` (a put or signal to another rank) travels as a message.
  bool is_message(const program::Op& op) const;

  State(const program::CallSequence& s, fabric::Fabric& f, const CudaSequencePlace& p,
        const CudaSequenceOptions& o)
      : sequence(s), fabric(f), place(p), options(o) {}
  ~State();

  void use_device_of(int rank);
  cudaStream_t setup_stream(int rank);  // the setup stream of rank's device, made current
  int stream(int rank, int name);
  sequence_detail::Ptr resolve(const program::Region& r) const;
  std::uint64_t* word(const program::Counter& c) const;
  void map_templates();  // sequence_mapping.cpp, step 2: every template
  void map_template(const program::CallTemplate& t, sequence_detail::Template& out);
  void map_message(const program::Op& op, std::set<int>& used,
                   std::vector<sequence_detail::SeqOp>& out);
  void map_op(const program::Op& op, int age, sequence_detail::SeqOp& m);
  // NOTE [copy-engine pool] (sequence_copy_pool.cpp): deals the copies of the template's
  // copy ops over the rank's pool streams, adding the pool streams to `used`.
  void map_copy_pool(sequence_detail::Template& t, std::set<int>& used);
  void enqueue_copies(const sequence_detail::SeqOp& m, std::size_t index, const CudaCallBindings& b,
                      cudaStream_t s, sequence_detail::Capture* capture);
  // Profiles (sequence_profile.cpp): the events made once, recorded by the next call.
  void make_profile_events();
  void profile_head(std::size_t stream);
  void profile_tail(std::size_t stream);
  cudaEvent_t event(std::int64_t call, int rank, int id) const;

  // One call, template e mod P, onto the streams (NOTE [CUDA call sequences] 2), with
  // `totals` as what earlier calls added; under capture when `capture` is set.
  void enqueue_call(std::int64_t e, std::span<const CudaCallBindings> bindings, float alpha,
                    bool accumulate, cudaStream_t caller, const std::vector<std::int64_t>& base,
                    sequence_detail::Capture* capture);
  void enqueue_op(const sequence_detail::SeqOp& op, std::size_t index, std::int64_t e,
                  const CudaCallBindings& binding, float alpha, bool accumulate,
                  const std::vector<std::int64_t>& base, sequence_detail::Capture* capture);
  void launch_kernel_op(const sequence_detail::SeqOp& op, const CudaCallBindings& binding,
                        float alpha, bool accumulate, cudaStream_t s);
  void wait_terms(cudaStream_t s, int rank, std::int64_t e,
                  std::span<const sequence_detail::WaitTerm> terms,
                  const std::vector<std::int64_t>& base, sequence_detail::Capture* capture);
  // Orders the next call on `caller` after the previous call where that ran on another
  // stream, and (once the call is enqueued) records where it ran (NOTE [CUDA call sequences] 2).
  void order_after_previous(cudaStream_t caller);
  void mark_done(cudaStream_t caller);
  void record_node(cudaStream_t s, const sequence_detail::SeqOp& op, std::size_t index, int copy,
                   sequence_detail::Capture* capture);
  void advance(std::vector<std::int64_t>& base, std::int64_t e) const;
  // messages_sent() and message_bytes_sent() for call e, however it ran (stream path, a slot
  // graph's launch, a caller graph's launch in prepare_replay).
  void count_messages(std::int64_t e);
  void check_bindings(std::span<const CudaCallBindings> bindings) const;

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

  // The watch (sequence_watch.cpp); its abort words (sequence_abort_words.cpp).
  void create_watch();
  void destroy_watch() noexcept;
  bool released() const;
  void watch_call(std::int64_t e, cudaStream_t caller);
  const std::uint64_t* abort_of(int rank) const {
    return aborts.words[static_cast<std::size_t>(rank)];
  }
  void set_up_abort_words();
  std::vector<std::string> aborted_ranks() const;
  std::vector<std::uint64_t> call_tags() const;
  std::vector<std::int64_t> totals_before(std::int64_t e) const;
  std::vector<std::string> unsatisfied_waits(std::int64_t e) const;
  static void release_repoints(sequence_detail::SlotGraph& g);
};

}  // namespace tide::exec
