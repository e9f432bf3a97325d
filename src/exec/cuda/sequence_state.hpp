// The CUDA sequence runner's internal state (NOTE [CUDA call sequences] in docs/executor.md),
// shared by:
//   sequence_runner.cpp  construction: templates resolved to pointer slots, streams, events
//   sequence_enqueue.cpp one call onto the streams (stream path and under capture)
//   sequence_fusion.cpp  the fusion pass over a mapped template (waits, counter additions)
//   sequence_graphs.cpp  the replay graphs (re-pointed) and the caller's captures
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

#include "sequence_watch.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"
#include "tide/kernels/signal/abort_check.hpp"
#include "tide/program/program.hpp"
#include "transport/message.hpp"

namespace tide::exec::sequence_detail {

inline constexpr int kFixed = -1;       // Ptr::slot: resolved at construction
inline constexpr int kOutputSlot = -2;  // Ptr::slot: the call's output
inline constexpr std::size_t kConstantWait = kConstantWaitTotal;  // a wait not on a counter total

// A device address: fixed (arena) or a slot filled per call (a tensor index, the output).
struct Ptr {
  std::byte* fixed = nullptr;
  int slot = kFixed;
  std::int64_t offset = 0;
};

struct Copy {
  Ptr dst, src;
  std::size_t width = 0, rows = 0, dpitch = 0, spitch = 0;
  bool flat = true;
};

// One wait of a (fused) kWait: the counter word, its index into the totals, the template's
// relative threshold (NOTE [CUDA call sequences]).
using WaitTerm = CudaWaitTerm;

// One counter addition of a (fused) kSignal.
struct AddTerm {
  std::uint64_t* word = nullptr;
  std::int64_t value = 0;
};

// One op of a template, resolved at construction.
struct SeqOp {
  program::OpKind kind = program::OpKind::kRelease;
  int rank = 0;
  int stream = -1;  // index into State::streams
  int op = -1;      // index into the template program's ops (profiles name it)
  bool empty = false;
  std::vector<Copy> copies;
  // The copy-engine pool (NOTE [copy-engine pool]): the lane of each copy (0: `stream`, j:
  // pool[j - 1], an index into State::streams), the fork event and one join per pool stream.
  // Empty where the copies stay on `stream`. The events are the State's (pool_events).
  std::vector<int> lane;
  std::vector<int> pool;
  cudaEvent_t fork = nullptr;
  std::vector<cudaEvent_t> joins;
  // Counters: the word, its index into the totals, the template's value (as mapped); after
  // the fusion pass (sequence_fusion.hpp) a kWait enqueues `waits`, a kSignal `adds`.
  std::uint64_t* word = nullptr;
  std::size_t total = 0;
  std::int64_t value = 0;
  std::vector<WaitTerm> waits;
  std::vector<AddTerm> adds;
  // Events: local id and age (NOTE [call sequences]).
  int event = 0;
  int age = 0;
  // kSum: the kernel arguments less gradients, alpha, accumulate; the kTensor index of each
  // kernel gradient slot.
  kernels::Level1SumArgs sum{};
  bool sum_into_output = false;  // the one-node sum: the call's accumulate applies
  std::vector<int> gradient_slots;
  // One-shot programs (NOTE [one-shot programs]): the gradients as fixed pointers instead of
  // slots, and `sum.alpha` / `land.accumulate` the program's own.
  std::vector<const void*> fixed_gradients;
  std::unique_ptr<kernels::Level1SegmentTable> table;
  kernels::Level1Tuning tuning{};
  // kLand (out from `out`), kCast (dst `out`, src `in`), kZero (`out`).
  kernels::LandingArgs land{};
  Ptr out, in;
  std::int64_t elems = 0;
  int ctas = 0;
  std::size_t zero_width = 0, zero_rows = 0, zero_pitch = 0;
  // A side of a message (NOTE [CUDA call sequences] 6, NOTE [rail messages]): the sender's
  // (on `stream`, its transfer on `rail`) or the receiver's (`stream` == `rail`). Kept out of
  // the fusion pass.
  std::shared_ptr<transport::Message> message;
  int rail = -1;
  // Per message part: what it moves; a part of caller memory (slot != kFixed: a staged
  // shard, a gradient) is bound per call, its mapped pointer only a placeholder.
  std::vector<Ptr> message_slots;
};

// The stream name of a rank's rail stream (program stream names are >= 0), and of its first
// copy-pool stream (the j-th is kPoolStreamName - j).
inline constexpr int kRailStreamName = -1;
inline constexpr int kPoolStreamName = -2;

struct Template {
  std::vector<SeqOp> ops;               // local ranks' ops, in the template's legal order
  std::vector<int> streams;             // streams with ops (indices into State::streams)
  std::vector<std::int64_t> additions;  // per (rank, counter), rank-major
  std::vector<int> tensors;             // per rank: kTensor slots the call must bind
  int deferred = 0;  // ops enqueued after a later op (NOTE [enqueue order]; one-shot only)
  // Per call: the local ranks' message sends and their bytes (messages_sent()).
  std::int64_t message_sends = 0;
  std::int64_t message_bytes = 0;
};

// Why a slot whose calls send caller memory as messages does not re-point (NOTE [CUDA call
// sequences] 3).
inline constexpr const char* kMessageNotRepointed =
    "message: a rail message of caller memory (the transport's kernels or NCCL's operations "
    "take its pointer at capture and cannot be re-pointed)";

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

// A template as CudaExecutor::check() can take it: relative wait thresholds <= 0 (credits
// earlier calls already paid, NOTE [call sequences]) are met at once, so they check as 0.
program::Program checkable_template(const program::Program& t);

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

// The device address of `p` for a call's bindings.
std::byte* at(const Ptr& p, const CudaCallBindings& b);
// A 2-D copy's parameters for a call's bindings.
// Whether `m` carries something a call binds (see Repoint).
bool carries_bindings(const SeqOp& m);

}  // namespace tide::exec::sequence_detail

namespace tide::exec {

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
  std::vector<std::uint64_t*> abort_words;
  std::map<int, std::uint64_t*> private_abort;
  const std::uint64_t** check_tables = nullptr;        // device: watched words, then own words
  std::vector<const std::uint64_t*> check_table_host;  // its source (an asynchronous upload)
  kernels::AbortCheck peer_check{};                    // watched_count 0: no check
  // Caller capture (NOTE [CUDA call sequences] 4): the calls captured so far and the shadow
  // cursor and totals they were built with.
  CudaCapturedCalls captured;
  std::vector<std::int64_t> capture_totals;
  unsigned long long capture_id = 0;  // the capture `captured` belongs to
  // Replay graphs, per event slot, and the stream they are captured from.
  std::vector<sequence_detail::SlotGraph> graphs;
  cudaStream_t origin = nullptr;
  std::int64_t graph_launches = 0;  // captures, replays and re-pointed replays
  std::int64_t graph_captures = 0;  // slot graphs captured and instantiated
  std::int64_t messages_sent = 0;   // sender sides enqueued (under `mutex`)
  std::int64_t message_bytes_sent = 0;
  // Graph waits (NOTE [CUDA call sequences] 3): per event slot, a device word counting the
  // slot's calls (on the first local rank's device), and what Q consecutive calls add to
  // each counter (rank * counters + id).
  std::uint64_t* generations = nullptr;
  std::vector<std::int64_t> slot_period_additions;
  std::string no_graph_waits;  // why graphs cannot hold this sequence's waits (empty: they can)
  // Why the runner's own slot graphs are off while a caller's capture is taken (NOTE [CUDA
  // call sequences] 6: a transport whose sides must be captured alike on both ranks).
  std::string no_slot_graphs;
  // NOTE [graph wait budget]: this runner's claim in the process's registry.
  std::uint64_t budget_id = 0;
  bool budget_claimed = false;
  // Calls run one after another (NOTE [CUDA call sequences] 2): each records last_done on its
  // caller stream, and a call on another caller stream first waits for it. The legacy default
  // stream is nullptr, a caller stream like any other: `called` says whether one was seen.
  cudaEvent_t last_done = nullptr;
  cudaStream_t last_caller = nullptr;
  bool called = false;
  // NOTE [CUDA call sequences] 5 (sequence_watch.cpp).
  std::unique_ptr<sequence_detail::Watch> watch;
  std::string repoint_failure;  // NOTE [CUDA call sequences] 3: the last reason
  std::int64_t nodes_repointed = 0;
  std::int64_t repointed_launches = 0;
  // Per device: whether cuStreamBatchMemOp may carry 64-bit waits (else one by one), and the
  // stream that captures a fresh call's kernels for their node parameters.
  std::map<int, bool> batch_waits;
  std::map<int, cudaStream_t> scratch;
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
  // NOTE [abort relay] (docs/executor.md): per local rank its send and receive token words (two
  // words on its device), the relayed-abort word (on the first local rank's device; nullptr
  // without messages), and the verdict a sender's token reads (every word of check_tables).
  std::map<int, std::uint64_t*> tokens;
  std::uint64_t* relay_word = nullptr;
  kernels::AbortCheck verdict{};
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

  // Replay graphs.
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

  // The watch (sequence_watch.cpp).
  void create_watch();
  void destroy_watch() noexcept;
  bool released() const;
  void watch_call(std::int64_t e, cudaStream_t caller);
  const std::uint64_t* abort_of(int rank) const {
    return abort_words[static_cast<std::size_t>(rank)];
  }
  void set_up_abort_words();
  std::vector<std::string> aborted_ranks() const;
  std::vector<std::uint64_t> call_tags() const;
  std::vector<std::int64_t> totals_before(std::int64_t e) const;
  std::vector<std::string> unsatisfied_waits(std::int64_t e) const;
  static void release_repoints(sequence_detail::SlotGraph& g);
};

}  // namespace tide::exec
