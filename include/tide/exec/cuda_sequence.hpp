// The CUDA sequence runner (architecture: exec/cuda): runs a group's open-ended sequence of
// all-gather or reduce-scatter calls (NOTE [call sequences]) on GPUs through a fabric, one
// call per enqueue(), asynchronously on the caller's stream. The GPU half of the runtime
// (NOTE [runtime]); the host executor (host_executor.hpp) is the CPU half.
//
//   CudaSequenceRunner ag(sequence, fabric, {region_offset, first_signal_word});
//   for (...) ag.enqueue(bindings /* per rank */, 1.0f, false, stream);  // no host wait
//
// Contract. The design, in steps 1-7 that the comments below cite, is NOTE [CUDA call
// sequences] in docs/executor.md.
// - The caller must have no work still writing the sequence's signal words, arena region or
//   abort words when it constructs the runner (1).
// - enqueue() never synchronises, polls or waits on the host (2). A call reads what the caller
//   stream wrote before it and the stream's later work follows the call. Calls of a sequence
//   run one after another, in the same order on every process.
// - A call under the caller's stream capture goes into the caller's graph (4): pass it to
//   prepare_replay() before each launch, launch it in order with the sequence's other calls,
//   and never after the runner is destroyed.
// - Fail-stop (5): after release_waits() every call from first_void_call() on has garbage
//   outputs; the caller must raise and stop the job.
// - Every public member may be called from any thread; the calls' lock is never held while
//   waiting for the device, and the watch (stalled(), idle(), stuck(), release_waits()) never
//   waits for an enqueue.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/program/call_sequence.hpp"
#include "tide/transport/message_transport.hpp"

namespace tide::exec {

// Where a sequence lives on the fabric.
struct CudaSequencePlace {
  std::int64_t region_offset = 0;  // the group's region in every rank's arena
  int first_signal_word = 0;       // the sequence's counter 0 among each rank's signal words
  // Every rank's abort word among its signal words, outside the sequence's counters, shared
  // by a communicator's sequences (step 5); -1: a private word per device (no end-of-call check).
  int abort_word = -1;
  // Call-order tag (step 7): >= 0, a signal word outside the counters shared by one lane's
  // sequences, to which every call first adds `call_tag`; stalled() reads it. -1: no tag.
  int call_tag_word = -1;
  std::uint64_t call_tag = 0;
  // The message lane: a channel set over a fabric with message areas (NOTE [ipc rendezvous
  // transport]), else the NCCL fabric's lane. Sequences sharing a lane must never have calls in
  // flight at once on a device; every process gives a sequence the same lane.
  int message_channels = 0;
  // Step 6: the transports of the lane, the same kinds on every process (the runtime's
  // backend gives them, tide/transport/*.hpp; tests pass their own). Needed where some pair of
  // ranks is not load/store reachable (tide::Unsupported at construction otherwise).
  transport::MessageTransports messages = {};
};

// One local rank's pointers for one call.
struct CudaCallBindings {
  std::vector<const void*> tensors;  // kTensor buffers by index (gradients or fp32 masters)
  void* output = nullptr;            // kOutput 0 (the RS shard); may be null where unused
};

// Fault injection for tests and `tide check-runtime` only; the defaults inject nothing.
struct CudaSequenceFaultInjection {
  // Every stream of `gate_rank` waits at each call's start until `*gate_word` >= 1 (a late peer).
  int gate_rank = -1;
  const std::uint64_t* gate_word = nullptr;
  // release_waits() leaves the transport's device waits to release_messages(), so the released
  // rank's messages keep carrying its abort token (NOTE [abort relay]), as NCCL's sends do.
  bool hold_messages_on_release = false;
};

struct CudaSequenceOptions {
  bool replay_graphs = true;  // slot graphs (step 3)
  // With replay_graphs: calls with fresh bindings replay re-pointed; off: only calls whose
  // bindings equal the slot's last call's.
  bool repoint_graphs = true;
  // Runners given one nonzero lane (new_graph_lane()) promise their calls never run at once on
  // a device, so their graph waits count once (NOTE [graph wait budget]); 0: a lane of its own.
  std::uint64_t graph_lane = 0;
  // Streams per rank a copy op's descriptors are dealt over, 1..16 (NOTE [copy-engine pool]).
  int copy_streams = 1;
  CudaSequenceFaultInjection fault_injection;  // tests only
};

// A lane id no other call of this process returned (NOTE [graph wait budget]).
std::uint64_t new_graph_lane();

// One wait of a batch: `word` >= the counter total `total` (what earlier calls added to it;
// kConstantWaitTotal: none) plus `value`.
struct CudaWaitTerm {
  std::uint64_t* word = nullptr;
  std::size_t total = 0;   // index into the runner's counter totals (rank * counters + id)
  std::int64_t value = 0;  // the template's relative threshold
};
inline constexpr std::size_t kConstantWaitTotal = ~std::size_t{0};

// The calls captured into a caller's graph (NOTE [CUDA call sequences] 4).
struct CudaCapturedCalls {
  std::int64_t first_call = 0;  // the call index the capture started at
  int calls = 0;
};

// A call that did not complete within a timeout (NOTE [CUDA call sequences] 5).
struct CudaStalledCall {
  std::int64_t call = 0;
  double seconds = 0;              // since it was enqueued
  std::vector<std::string> waits;  // its unsatisfied waits, one line each (may be empty)
  // With a call-tag word (CudaSequencePlace::call_tag_word): every rank's tag word, by rank,
  // read after the waits; empty without one or where the read did not complete in bound.
  std::vector<std::uint64_t> call_tags;
};

// What one call enqueues, averaged over the templates (local ranks only).
struct CudaSequenceCounts {
  double ops = 0;           // enqueued ops after fusion (NOTE [CUDA call sequences] 1)
  double copies = 0;        // copy descriptors
  double wait_ops = 0;      // fused kWait: one batch of stream memory operations (stream path)
  double wait_terms = 0;    // the single waits they hold
  double signal_ops = 0;    // fused kSignal: counter-addition kernel launches
  double signal_terms = 0;  // the additions they hold
  double kernels = 0;       // Level 1 sums, landings, casts
  double events = 0;        // event records and waits
};

class CudaSequenceRunner {
 public:
  static constexpr int kWatchedCalls = 64;
  // Resident grids per device (sm_90), and the most streams graph waits may spin on per device
  // (NOTE [graph wait budget]); a runner past it refuses capture (graphs_unavailable()).
  static constexpr int kMaxResidentGrids = 128;
  static constexpr int kMaxGraphWaitStreams = kMaxResidentGrids / 2;
  // The graph-wait streams the runners alive now may spin on `device` (<= kMaxGraphWaitStreams).
  static int graph_wait_streams(int device);

  // `sequence` and `fabric` must outlive the runner. On return the local ranks' signal words
  // are zero and the tables uploaded, for every stream and peer (step 1). Throws Unsupported
  // where a rank is not load/store reachable, InvalidArgument where the fabric's words or arena
  // are too small.
  CudaSequenceRunner(const program::CallSequence& sequence, fabric::Fabric& fabric,
                     const CudaSequencePlace& place, const CudaSequenceOptions& options = {});
  ~CudaSequenceRunner();
  CudaSequenceRunner(const CudaSequenceRunner&) = delete;
  CudaSequenceRunner& operator=(const CudaSequenceRunner&) = delete;

  // Enqueues the next call on `caller` (steps 2-4) and returns at once. `bindings` is indexed
  // by rank; entries of ranks that are not local are ignored. A CUDA failure part-way leaves
  // the runner refusing every later call.
  void enqueue(std::span<const CudaCallBindings> bindings, float alpha, bool accumulate,
               cudaStream_t caller);

  // What calls enqueued under the caller's capture put into its graph; resets the record.
  CudaCapturedCalls take_captured();
  // Before each launch of a graph that captured `calls`: gives the launch the next call
  // indices and advances the host totals. Throws InvalidArgument when the next index is not
  // congruent to calls.first_call mod event_slots().
  void prepare_replay(const CudaCapturedCalls& calls);
  // What prepare_replay checks, without advancing anything.
  void check_replay(const CudaCapturedCalls& calls) const;
  // Orders `caller` after the sequence's previous call (as enqueue() does first), for work
  // the previous call must not overlap, e.g. refilling an input it still reads. Nothing under
  // a capture.
  void order_after_previous(cudaStream_t caller);

  // Thread-safe (step 5): the oldest watched call still running `timeout` after its enqueue,
  // with its unsatisfied waits; nullopt when none. A CUDA error met is reported as a stall.
  std::optional<CudaStalledCall> stalled(std::chrono::milliseconds timeout) const;
  // Thread-safe: whether a message to a local rank carried a nonzero abort token (NOTE [abort
  // relay]); false without messages; nullopt where the bounded read did not complete.
  std::optional<bool> relayed_abort() const;
  // Thread-safe: whether every watched call has completed.
  bool idle() const;
  // After release_waits(): a watched call is still running (its streams could not drain).
  // The runner's destructor then frees nothing that synchronises; the process must end.
  bool stuck() const;
  // Thread-safe, idempotent (step 5): writes the local ranks' abort words, then satisfies
  // every wait of the sequence on them so the streams drain. Outputs of every call from
  // first_void_call() on are garbage; later calls and replays are refused.
  void release_waits();
  // Thread-safe, idempotent: ends the transport's own device waits (NOTE [rail messages]);
  // release_waits() does it too unless the fault injection holds them.
  void release_messages();
  // Thread-safe: whether release_waits() ran.
  bool released() const;
  // Enqueues on `stream` the end-of-call check (step 5): later work runs only while no other
  // process's rank has released its waits, else after this rank's own release. Nothing
  // without published abort words or ranks of other processes. Capturable.
  void enqueue_abort_check(cudaStream_t stream) const;
  // Thread-safe: after release_waits(), the first void call (every later one is too); -1 before.
  std::int64_t first_void_call() const;

  std::int64_t calls() const;  // calls enqueued (or replayed) so far
  int event_slots() const;     // Q
  // Calls run as slot-graph launches, and of those the captures (NOTE [slot graph policy]).
  std::int64_t graph_launches() const;
  std::int64_t graph_captures() const;
  // Messages this process's ranks sent so far (step 6), and their bytes with the abort tokens.
  std::int64_t messages_sent() const;
  std::int64_t message_bytes_sent() const;
  // Caller-pointer nodes patched so far (step 3), and the calls that re-pointed them.
  std::int64_t nodes_repointed() const;
  // Why slot graphs cannot be re-pointed (a 2-D copy of caller memory, or the last capture or
  // node update that failed); empty when they can.
  std::string repoint_failure() const;
  // Why calls cannot run in graphs (empty when they can; steps 3, 6): captures throw
  // Unsupported with it, unless it begins "no slot graphs" (a caller's capture is taken).
  std::string graphs_unavailable() const;
  std::int64_t repointed_launches() const;
  CudaSequenceCounts counts() const;
  // Why messages travel two-sided; empty where one-sided (NOTE [one-sided messages] in
  // docs/executor.md). Fixed at construction, the same on every process.
  std::string one_sided_refusal() const;
  // "two-sided", "one-sided", "ipc-rendezvous", "test-rendezvous" or "test-one-sided"; empty
  // where calls send no messages. Fixed at construction.
  std::string message_path() const;
  // Message sides of the local ranks per call, averaged over the templates; 0: none.
  double message_ops() const;

 private:
  // The one-shot face (NOTE [one-shot programs] in src/exec/cuda/executor.cpp).
  friend class CudaExecutor;
  struct OneShot {};
  CudaSequenceRunner(const program::CallSequence& sequence, fabric::Fabric& fabric,
                     const CudaSequencePlace& place, const CudaSequenceOptions& options, OneShot);
  void set_up();
  void enqueue_checked(std::span<const CudaCallBindings> bindings, float alpha, bool accumulate,
                       cudaStream_t caller);
  void check_replay_locked(const CudaCapturedCalls& calls) const;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::exec
