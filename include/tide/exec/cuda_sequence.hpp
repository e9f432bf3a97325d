// The CUDA sequence runner (architecture: exec/cuda): runs a group's open-ended sequence of
// all-gather or reduce-scatter calls (NOTE [call sequences]) on GPUs through a fabric, one
// call per enqueue(), asynchronously on the caller's stream. The GPU half of the runtime
// (NOTE [runtime]); the host executor (host_executor.hpp) is the CPU half.
//
// Use:
//   CudaSequenceRunner ag(sequence, fabric, {region_offset, first_signal_word});
//   for (...) ag.enqueue(bindings /* per rank */, 1.0f, false, stream);  // no host wait
//
// NOTE [CUDA call sequences]
// Paper: Sec. 6 (gradient pointers as kernel parameters, tables uploaded at registration, no
// per-call metadata copy), Sec. 6.2 (host submission), App. E (the credits that cross calls,
// carried here by the wait thresholds).
// 1. Built once per sequence: one non-blocking stream per (local rank, stream name) shared by
//    every call, and per template every op resolved as the CUDA executor resolves it (NOTE
//    [CUDA executor op mapping]): copy descriptors, Level 1 segment tables, kernel
//    arguments, counter words, in the template's legal order (NOTE [legal order]), so the
//    enqueue order is a legal serial order of the whole sequence (NOTE [enqueue order]).
//    kTensor and kOutput are pointer slots, not pointers.
// 2. enqueue(bindings, alpha, accumulate, caller), call e, template e mod P:
//    - the caller stream records the entry event; every stream the template uses waits
//      for it, so the call reads what the caller wrote before it;
//    - the ops are enqueued with the slots filled from this call's bindings and alpha and
//      accumulate patched into kSum and kLand (as the host executor does); Level 1
//      gradient pointers travel as kernel parameters, so nothing is copied host to device;
//    - kWait: cuStreamWaitValue64(GEQ) on base + value, where base is what earlier calls
//      added to that counter (known on the host: every rank issues the same calls); a wait
//      whose threshold is <= 0 is already satisfied and not enqueued;
//    - kSignal, kRailPut's addition: a 1-thread kernel, __threadfence_system() then
//      atomicAdd_system, since the counter may be a peer GPU's word;
//    - events: Q >= max_event_age + 1 slots (Q a multiple of P); call e records in slot
//      e mod Q and a wait of age a uses slot (e - a) mod Q (skipped when e < a). A slot is
//      re-recorded only Q calls later, after every wait that refers to it was enqueued;
//    - every stream used records its done event and the caller stream waits for all of them.
//    No host synchronisation, polling or host barrier anywhere: the host only advances its
//    counter totals and call index.
// 3. Replay (CudaSequenceOptions::replay_graphs): a call whose bindings, alpha and accumulate
//    equal those of the last call of its slot e mod Q is run as a CUDA graph of that slot,
//    captured once (on the second such call). Captured cuStreamWaitValue64 become nodes with
//    their thresholds baked in, which with cumulative counters would be satisfied on every
//    later replay and order nothing; so under capture each wait is added as an explicit
//    batch-mem-op node (cuGraphAddBatchMemOpNode, which waits in the stream front end), and
//    before every launch the runner patches each node's threshold to this call's base +
//    value (cuGraphExecBatchMemOpNodeSetParams). Records become external event-record nodes
//    (so later calls outside the graph can wait for them) and waits on calls outside the
//    graph external event-wait nodes. The graph is launched on the caller stream.
// 4. Caller graphs: enqueue() on a caller stream that is being captured puts the call into
//    the caller's graph the same way (explicit wait nodes, external event nodes) without
//    advancing the runner; take_captured() then hands back what was captured, and before
//    every launch of the instantiated graph the caller passes it to prepare_replay(), which
//    gives the graph's calls the next call indices (they must be congruent mod Q to the
//    captured ones, so templates, banks and event slots match) and patches every wait.
//    A launch without prepare_replay() would wait for stale thresholds: not allowed.
// 5. Watch (fail-stop, Sec. 7.5): every call run on the stream path or as a replay graph
//    records a completion event on the caller stream after its joins, in a ring of
//    kWatchedCalls. stalled() (any thread, e.g. the runtime's watchdog) finds the oldest
//    call whose event has not completed `timeout` after its enqueue and names its unsatisfied
//    waits: the threshold of each is base + value, base being what earlier calls added (a
//    closed form of the period's additions), against the word read on a private stream.
//    release_waits() then writes a huge value into every signal word of the sequence (and
//    the test gate), so that the streams drain instead of hanging after an abort. Calls in a
//    caller's graph are not watched.
// 6. Limits: every rank's signal words and every arena must be load/store reachable (the
//    virtual fabric; messages are not built here); one caller stream per call for all local
//    ranks; calls are issued from one host thread.
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

namespace tide::exec {

// Where a sequence lives on the fabric.
struct CudaSequencePlace {
  std::int64_t region_offset = 0;  // the group's region in every rank's arena
  int first_signal_word = 0;       // the sequence's counter 0 among each rank's signal words
};

// One local rank's pointers for one call.
struct CudaCallBindings {
  std::vector<const void*> tensors;  // kTensor buffers by index (gradients or fp32 masters)
  void* output = nullptr;            // kOutput 0 (the RS shard); may be null where unused
};

struct CudaSequenceOptions {
  bool replay_graphs = true;  // NOTE [CUDA call sequences] 3
  // Fault injection for tests: every stream of rank `gate_rank` waits, at the start of every
  // call, until the device word `gate_word` holds >= 1 (a peer whose signals are late).
  int gate_rank = -1;
  const std::uint64_t* gate_word = nullptr;
};

// The calls captured into a caller's graph (NOTE [CUDA call sequences] 4).
struct CudaCapturedCalls {
  struct Wait {
    void* node = nullptr;    // CUgraphNode of the batch-mem-op wait
    int call = 0;            // which captured call (0-based)
    std::size_t total = 0;   // index into the runner's counter totals (rank * counters + id)
    std::int64_t value = 0;  // the template's relative threshold
    std::uint64_t* word = nullptr;
    void* context = nullptr;  // CUcontext of the waiting rank's device
  };
  std::int64_t first_call = 0;  // the call index the capture started at
  int calls = 0;
  std::vector<Wait> waits;
};

// A call that did not complete within a timeout (NOTE [CUDA call sequences] 5).
struct CudaStalledCall {
  std::int64_t call = 0;
  double seconds = 0;              // since it was enqueued
  std::vector<std::string> waits;  // its unsatisfied waits, one line each (may be empty)
};

class CudaSequenceRunner {
 public:
  static constexpr int kWatchedCalls = 64;

  // `sequence` and `fabric` must outlive the runner. Validates the templates as the CUDA
  // executor does, creates streams, events and tables, and zeroes the sequence's signal
  // words of the local ranks (synchronously). Throws Unsupported where a rank is not load/
  // store reachable, InvalidArgument where the fabric's words or arena are too small.
  CudaSequenceRunner(const program::CallSequence& sequence, fabric::Fabric& fabric,
                     const CudaSequencePlace& place, const CudaSequenceOptions& options = {});
  ~CudaSequenceRunner();
  CudaSequenceRunner(const CudaSequenceRunner&) = delete;
  CudaSequenceRunner& operator=(const CudaSequenceRunner&) = delete;

  // Enqueues the next call on `caller` (NOTE [CUDA call sequences] 2-4). `bindings` is
  // indexed by rank; entries of ranks that are not local are ignored. Returns at once.
  // Should a CUDA call fail part-way, the call is half enqueued and the runner refuses every
  // later call (fail-stop): its counters no longer match what the host expects.
  void enqueue(std::span<const CudaCallBindings> bindings, float alpha, bool accumulate,
               cudaStream_t caller);

  // What calls enqueued under the caller's capture put into its graph; resets the record.
  CudaCapturedCalls take_captured();
  // Gives a launch of `exec` (instantiated from the graph that captured `calls`) the next
  // call indices and patches its waits. Throws InvalidArgument when the next index is not
  // congruent to calls.first_call mod event_slots().
  void prepare_replay(const CudaCapturedCalls& calls, cudaGraphExec_t exec);

  // Thread-safe (NOTE [CUDA call sequences] 5): the oldest watched call still running
  // `timeout` after its enqueue, with its unsatisfied waits; nullopt when there is none.
  // A CUDA error met while looking is reported as a stall naming it.
  std::optional<CudaStalledCall> stalled(std::chrono::milliseconds timeout) const;
  // Thread-safe: whether every watched call has completed.
  bool idle() const;
  // After release_waits(): a watched call is still running (its streams could not drain).
  // The runner's destructor then frees nothing that synchronises; the process must end.
  bool stuck() const;
  // Thread-safe: satisfies every wait of the sequence on the local ranks, so that its streams
  // drain after a fail-stop abort. The outputs of calls still running are garbage after it,
  // and the runner refuses every later call.
  void release_waits();

  std::int64_t calls() const;           // calls enqueued (or replayed) so far
  int event_slots() const;              // Q
  std::int64_t graph_launches() const;  // calls run as the runner's own graphs
  std::int64_t waits_patched() const;   // graph wait nodes patched so far

 private:
  void enqueue_checked(std::span<const CudaCallBindings> bindings, float alpha, bool accumulate,
                       cudaStream_t caller);
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::exec
