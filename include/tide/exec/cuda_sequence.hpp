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
//    kTensor and kOutput are pointer slots, not pointers. Then a fusion pass
//    (sequence_fusion.hpp) over each template's ops: ops that enqueue nothing dropped, a
//    kRailPut split into its copies and its addition, and per stream
//    - a run of consecutive waits (no op of that stream between) one wait op, at the place
//      of the last (a wait moved later still follows every signal it needs), one term per
//      counter (the highest threshold), at most 255 terms (cuStreamBatchMemOp takes fewer
//      than 256 operations; the driver reports no attribute for it; in a graph one wait op
//      is one wait kernel per 32 terms);
//    - a run of consecutive counter additions one op, at the place of the first (an addition
//      moved earlier still follows every op of its stream it guards), additions to one word
//      summed, at most 32 per op (kernel parameters).
//    Ops of other streams keep their places, so the order stays legal. At 8 x 8 (the
//    benchmark's Llama-3.1-70B layer) this takes AG from 960 waits / 1,728 additions per
//    call to 640 wait ops / 704 addition launches, RS from 4,992 / 10,496 to 4,800 / 4,736:
//    most RS waits are ring-slot credits between a stream's copies.
//    Setup contract: the construction's device work (zeroing the sequence's signal words and
//    the local abort words, the slots' generation words, uploading the Level 1 segment
//    tables and the abort check's tables) is enqueued on a private non-blocking stream per
//    device, and the constructor ends with cudaStreamSynchronize of those streams, not with
//    cudaDeviceSynchronize, and puts nothing on the legacy default stream. So a runner built
//    while other runners' calls or the caller's compute run (a group registered mid-step)
//    neither waits for them nor holds them, and its setup is complete before its first call
//    (or a peer's signal, ordered by the caller after construction) can touch it. The caller
//    keeps its side: no work of its own may still write the sequence's signal words, arena
//    region or abort words when it constructs the runner. (The runner does not synchronise
//    for the caller either: a caller that relied on construction completing its own earlier
//    asynchronous work must synchronise that itself.)
// 2. enqueue(bindings, alpha, accumulate, caller), call e, template e mod P, on the stream
//    path (the first visit of each event slot, calls with graphs off, and calls a node
//    update cannot express):
//    - the caller stream records the entry event; every stream the template uses waits
//      for it, so the call reads what the caller wrote before it;
//    - the ops are enqueued with the slots filled from this call's bindings and alpha and
//      accumulate patched into kSum and kLand (as the host executor does); Level 1
//      gradient pointers travel as kernel parameters, so nothing is copied host to device;
//    - a wait op: its terms' thresholds base + value, where base is what earlier calls
//      added to that counter (known on the host: every rank issues the same calls); terms
//      whose threshold is <= 0 are already satisfied and dropped; the rest go as ONE
//      cuStreamBatchMemOp of WAIT_VALUE_64 (GEQ) operations, or one cuStreamWaitValue64
//      each where the device lacks 64-bit stream memory operations in batches
//      (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, or no cuStreamBatchMemOp);
//    - an addition op: ONE 1-thread kernel that, per word in order, runs
//      __threadfence_system() then atomicAdd_system (the counter may be a peer GPU's word);
//    - events: Q >= max_event_age + 1 slots (Q a multiple of P); call e records in slot
//      e mod Q and a wait of age a uses slot (e - a) mod Q (skipped when e < a). A slot is
//      re-recorded only Q calls later, after every wait that refers to it was enqueued;
//    - every stream used records its done event and the caller stream waits for all of them;
//    - calls of a sequence run one after another: a call on a caller stream other than the
//      previous call's first waits for that call (the graph paths rely on it: a replayed
//      call's nodes do not queue behind the previous call's on the runner's streams).
//    No host synchronisation, polling or host barrier anywhere: the host only advances its
//    counter totals and call index.
// 3. Slot graphs (CudaSequenceOptions::replay_graphs, on by default): on the second visit of
//    event slot j = e mod Q the call is captured once into that slot's graph and launched on
//    the caller stream; every later call of the slot launches it, as it is or re-pointed.
//    Where fresh bindings cannot be re-pointed, the slot keeps its graph for calls that bind
//    what it holds and re-captures only for bindings that recur 2, 4, 8, ... calls in a row
//    (NOTE [slot graph policy] in src/exec/cuda/sequence_slot_policy.hpp); graph_captures()
//    counts the captures, graph_launches() captures and replays. Waits in a graph cannot
//    keep host-computed thresholds: a captured cuStreamWaitValue64 keeps the threshold it was
//    captured with (with cumulative counters every later replay's wait is met and orders
//    nothing), and explicit batch-mem-op nodes, though they can be re-targeted, cost
//    1.3-2.3 us each to launch plus a patch per launch (bench/results/runtime/
//    primitives_*.json). So a graph's thresholds follow the call on the device:
//    - every call of slot j first adds 1 to the slot's generation word G_j (a counter-add
//      kernel on the caller stream, before the entry event), so call e sees G_j = e/Q + 1;
//    - a wait op becomes a 1-warp wait kernel (generation_wait.hpp); each term waits for
//      word >= first + step * G_j, where step is what Q consecutive calls add to the counter
//      (Q is a multiple of P, so the same for every Q calls) and first makes it the host
//      threshold base + value of the captured call;
//    - calls run one after another (step 2), so no call adds to G_j while an earlier call of
//      the slot still reads it;
//    - at most one kernel per stream spins at a time, and what it waits for may be a kernel;
//      a device runs at most 128 grids at once (sm_90), so the runners whose calls may
//      overlap on a device keep at most kMaxGraphWaitStreams streams there between them
//      (NOTE [graph wait budget]: a process-wide registry per device; runners of one lane,
//      CudaSequenceOptions::graph_lane, count once); a runner that would exceed it (many
//      virtual ranks on one GPU: 8 per rank, 8 x 8 is 512; or too many overlapping runners)
//      runs on the stream path and refuses capture (graphs_unavailable() says why);
//    - wait kernels prefer the largest shared-memory carveout, so that a resident spinner is
//      less likely to keep an SM in a configuration that a Level 1 sum's CTA (~207 KB) cannot
//      share (a preference: the driver decides);
//    - a term met by every call of the slot (step 0, threshold <= 0) is dropped.
//    A replay therefore patches nothing: its host cost is the graph launch (one rank at
//    8 x 8: 0.024-0.040 ms, bench/results/runtime/README.md). Records become external
//    event-record nodes (so later calls outside the graph can wait for them) and waits on
//    calls outside the graph external event-wait nodes. Fresh bindings
//    (CudaSequenceOptions::repoint_graphs, on by default): the capture records which nodes
//    carry what a call binds (copies that read or write a kTensor or kOutput slot, kSum for
//    its gradients and alpha, kLand for its output and accumulate, kCast and kZero on a
//    slot), and a call whose bindings, alpha or accumulate differ from the slot's last
//    call re-points only those of the ranks whose bindings changed: copies with
//    cudaGraphExecMemcpyNodeSetParams(1D), memsets with cudaGraphExecMemsetNodeSetParams,
//    kernels with the parameters their launcher computes for the new bindings (the launches
//    captured on a scratch stream, each node's parameters set into the slot graph with
//    cudaGraphExecKernelNodeSetParams, which may change the kernel instance), then launches.
//    A template that copies caller memory in 2-D (known at construction), a capture where some
//    such op did not become exactly one node of the expected type, or a node update the
//    driver refuses (the graph then goes: its nodes hold two calls' bindings), sends the
//    slot's calls with fresh bindings to the stream path (it still replays unchanged ones,
//    NOTE [slot graph policy]), and repoint_failure() says why. On
//    the H200 (driver 580, CUDA 13.0) this is every TIDE-RS slot whose copies read gradients
//    in 2-D (strided rows): CUDA updates only 1-D copy nodes, and a 2-D copy captured as its
//    own child graph is refused as well (cudaErrorGraphExecUpdateFailure), so fresh TIDE-RS
//    calls run on the stream path; TIDE-AG's slots re-point (bench/results/runtime/README.md).
//    Messages (step 6) go into the slot graph with the call: the rail streams join the capture
//    through the entry event and leave it through their done events, as every runner stream
//    does, and a message's sides become the transport's nodes (kernels, or NCCL's) and the
//    copies that pack or unpack a strided part. Those nodes take a part of caller memory (a
//    gradient, a staged shard) as a parameter fixed at capture, which the runner does not
//    re-point (NCCL's nodes cannot be; the rendezvous kernels would need the transport's
//    launch parameters): a template whose messages move caller memory is not re-pointable,
//    like a 2-D copy of caller memory (its fresh calls take the stream path, its unchanged
//    ones replay, repoint_failure() says why). Replays need no host numbering: the
//    rendezvous transports number each message on the device (NOTE [rendezvous transport],
//    NOTE [ipc rendezvous transport]).
// 4. Caller graphs: enqueue() on a caller stream that is being captured puts the call into
//    the caller's graph the same way (generation bump, wait kernels, external event nodes)
//    without advancing the runner; take_captured() then hands back what was captured, and
//    before every launch of the instantiated graph the caller passes it to prepare_replay(),
//    which gives the graph's calls the next call indices (they must be congruent mod Q to the
//    captured ones, so templates, banks and event slots match) and advances the host totals
//    that later calls outside the graph wait with. The runner cannot order a launch it does
//    not make: the caller launches the graph on a stream ordered after the sequence's earlier
//    calls, and makes the sequence's later calls on a stream ordered after the launch (one
//    stream for both does it). A capture abandoned before take_captured() is forgotten when
//    the next one begins; a call that fails under capture leaves the runner usable (nothing
//    reached the device). The graph holds the runner's generation words and events: it
//    must not be launched after the runner is destroyed.
// 5. Watch (fail-stop, Sec. 7.5): every call run on the stream path or as a replay graph
//    records a completion event on the caller stream after its joins, in a ring of
//    kWatchedCalls. stalled() (any thread, e.g. the runtime's watchdog) finds the oldest
//    call whose event has not completed `timeout` after its enqueue and names its unsatisfied
//    waits: the threshold of each is base + value, base being what earlier calls added (a
//    closed form of the period's additions), against the word read on a private stream, and
//    the ranks that signal it; with published abort words, the ranks that aborted first.
//    release_waits() then writes a huge value into every signal word of the sequence (and
//    the test gate), so that the streams drain instead of hanging after an abort. Calls in a
//    caller's graph are not watched. No garbage after a release (the contract):
//    - Abort words. Every local rank has one (CudaSequencePlace::abort_word: a signal word
//      of its own that its peers can read, one per rank for every sequence of a
//      communicator; or, without one, a private device word). release_waits() writes it
//      (nonzero) before it releases any signal word: each reader stream writes every local
//      rank's abort word before its release copy (the readers stay independent: one may be
//      held until another's release lands).
//    - (a) A released rank never signals as if its data were valid: every counter addition
//      (kSignal, kRailPut) is a kernel that adds nothing once its rank's abort word is set.
//      A wait that passed only because of the release was met by a value written after the
//      abort word, and every addition after it in stream (or event) order reads the word as
//      set. Additions whose waits were all met by real signals may or may not count: their
//      data are valid either way. Cost: one load of a local word per addition kernel.
//    - (b) So a peer that waits for a released rank never completes that call: its waits
//      for the released rank's later signals are never met, its own watchdog times the call
//      out, and stalled() names the waits with the rank that signals them ("signalled by rank
//      0") and, with published words, the aborted rank. With published abort words a call
//      also ends with a 1-warp check on the caller stream (abort_check.hpp; only where some
//      rank is another process's): while every other process's abort word is 0 it returns
//      at once; where one is set, it holds the call until this rank's own release. This
//      covers data a released rank's copies overwrite after the release (a copy waiting for
//      a released credit runs early and may overwrite a buffer the peer still reads: copy
//      engines cannot be made conditional): the check reads the words after every read of
//      the call's data, and such a copy runs only after the word is written.
//    - (c) Void calls: first_void_call() is the first call whose completion had not been
//      observed when the waits were released (calls run one after another, so every call
//      before it completed on real signals). Every call from it on (in flight, enqueued, or
//      in a caller's graph launched since) has garbage outputs; enqueue() and
//      prepare_replay() refuse from then on. The runtime must raise rather than return
//      those calls' outputs as valid, and stop the job: work the caller enqueued after a
//      void call (e.g. an optimizer step) still runs once the streams drain.
//    - Ranks whose abort words this process cannot load (other hosts; other emulated hosts,
//      which take the same path on one GPU): their abort state travels with their messages,
//      an 8-byte token after each message's data that its receiver's addition reads, and the
//      check watches a relayed-abort word that a nonzero token sets (NOTE [abort relay] in
//      src/exec/cuda/messages.hpp, with the soundness argument). The runner loads the abort
//      words of addressable ranks only.
//    Not covered: data a released rank's early copies overwrite in a peer's buffer after the
//    peer's call completed (an all-gather's landing slot the peer's compute still reads);
//    the peer's next call then holds (its check, or its waits), so its job stops too, but
//    the compute between the two calls read it. The runtime may put the same check before it
//    releases a landing slot (enqueue_abort_check()).
// 6. Messages and limits. A kRailPut or kSignal from rank s to rank d that the fabric says s
//    cannot store to (Fabric::load_store false) travels as a two-sided message (NOTE [rail
//    messages] in src/exec/cuda/messages.hpp, the component the CUDA executor uses too): at
//    the op's place in the template's legal order, the sender's side on s's op stream and its
//    rail stream (a runner stream per rank, like any other: it waits for the entry event and
//    the caller waits for its done event), the receiver's side, then d's counter addition, on
//    d's rail stream, each side built by the process that holds its rank. Every rank's sends
//    and receives are enqueued on its one rail stream in that one order, which is the same
//    order on every process (every process maps the same templates in the same legal order
//    and issues the same calls), so two-sided operations cannot cross. The bytes travel
//    through a MessageTransport: Fabric::send/recv; over a fabric with message areas (the
//    ipc fabric over emulated hosts) the ipc rendezvous transport (NOTE [ipc rendezvous
//    transport]: processes on one GPU, NCCL's two-sided semantics); or in tests
//    (CudaSequenceTestMessages) the rendezvous transport (NOTE [rendezvous transport]), whose
//    send waits on the device for its receive. release_waits() releases the rendezvous
//    transports' device waits too. No flush follows an arrival (NOTE [rail messages],
//    Arrival and flush). Graphs (steps 3-4; MessageTransport::capture_refusal and
//    per_process_refusal in messages.hpp): the rendezvous transports number their messages on
//    the device, so calls with messages replay in slot graphs and in a caller's graph, and one
//    process's replays mix with its partner's stream-path calls. NCCL's sends and receives
//    are capturable, but NCCL needs a send and its receive both captured or both not, and
//    each process decides its slot graphs from its own bindings: over FabricTransport the
//    slot graphs are off (graphs_unavailable() says why) and a caller's capture, which the
//    caller makes on every rank alike, is taken. A transport that cannot be captured at all
//    would turn graphs off and make a capture throw Unsupported with its reason. A message
//    part of caller memory (a staged
//    shard, a gradient) is bound per call (SeqOp::message_slots); a message's destinations
//    must be on its counter's rank. Measured on one
//    H200 with the rendezvous transports (one process; processes over ipc with emulated
//    hosts); the NCCL rail path is built and staged (scripts/device/multigpu.sh), not yet run.
//    Every other rank's signal words and arena that an op addresses directly must be load/
//    store reachable; one caller stream per call for all local ranks. Threads: every public member
//    may be called from any thread (FSDP2 calls from its main thread and from autograd's; the
//    watchdog polls from its own). Calls are serialised by one lock and take the next call index in
//    the order they take it (ranks of several processes must agree on that order: their callers
//    order them); the lock is never held while waiting for the device. The watch (stalled(),
//    idle(), stuck(), release_waits()) has its own lock, never waits for an enqueue (a launch can
//    block while the device's queues are full), and runs its CUDA calls in the relaxed stream-
//    capture mode, so that its queries never invalidate a capture that another thread runs
//    in the global mode (torch.cuda.graph's default).
// 7. Call-order tags: a call that never completes because a peer issued another call in its
//    place (FSDP2 ranks that ran their groups in different orders) looks, from its waits,
//    like a stalled peer. Where the place names a call-tag word, every call's first op on the
//    caller stream (after the generation bump, before the fault gate) adds the place's
//    call_tag to each local rank's tag word, a word peers read; graphs capture the addition
//    with the call, so a replay adds it again. The runtime gives the runners of one lane one
//    word and each group its own tag (NOTE [runtime] 10), so that a rank's word says how many
//    of the lane's calls began on its device and which. stalled() returns every rank's word
//    (read on the first reader stream, bounded, as the abort words are); the caller decodes
//    them. Not an ordering edge: nothing waits on a tag.
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
  // Every rank's abort word among its signal words, outside the sequence's counters (NOTE
  // [CUDA call sequences] 5), shared by the sequences of a communicator; -1: a private word
  // per device that other processes cannot read (then no end-of-call check).
  int abort_word = -1;
  // The call-order tag (NOTE [CUDA call sequences] 7): where call_tag_word >= 0 (a signal word
  // outside the sequence's counters, which the sequences of one lane share), every call
  // first adds `call_tag` to each local rank's word, on the caller stream; stalled() reads
  // every rank's. -1: no tag.
  int call_tag_word = -1;
  std::uint64_t call_tag = 0;
  // The message lane of this sequence's messages: over a fabric with message areas
  // (Fabric::message_area_bytes() > 0) its channel set (NOTE [ipc rendezvous transport]),
  // otherwise the lane of Fabric::send_on_lane (NCCL: a communicator per lane). Sequences that
  // share a lane must never have calls in flight at once on a device (the runtime gives each
  // lane's sequences its lane), and every process gives a sequence the same lane.
  int message_channels = 0;
};

// One local rank's pointers for one call.
struct CudaCallBindings {
  std::vector<const void*> tensors;  // kTensor buffers by index (gradients or fp32 masters)
  void* output = nullptr;            // kOutput 0 (the RS shard); may be null where unused
};

// Fault injection, not a production setting: only tests and `tide check-runtime` (through
// runtime::CommunicatorFaultInjection) set it; the defaults inject nothing.
struct CudaSequenceFaultInjection {
  // Every stream of rank `gate_rank` waits, at the start of every call, until the device word
  // `gate_word` holds >= 1 (a peer whose signals are late).
  int gate_rank = -1;
  const std::uint64_t* gate_word = nullptr;
  // release_waits() leaves the transport's device waits (a rendezvous transport's) alone
  // until release_messages(): the released rank's messages keep flowing, carrying its abort
  // token (NOTE [abort relay]), as NCCL's sends do until the communicator's abort.
  bool hold_messages_on_release = false;
};

// Test options, not a production setting: only tests set them; the defaults change nothing.
struct CudaSequenceTestMessages {
  // > 0: ranks r and p with r / node_size != p / node_size are on different emulated nodes;
  // every put and signal between them travels as a message (NOTE [CUDA call sequences] 6)
  // through a rendezvous transport on this process's ranks (NOTE [rendezvous transport]),
  // although the fabric could store directly. Needs every rank local (the virtual fabric).
  int node_size = 0;
  // With node_size: the messages travel one-sided (NOTE [one-sided messages]) through the
  // loopback transport (NOTE [loopback one-sided transport]) where every template plans; else
  // through the rendezvous transport, with one_sided_refusal() saying why.
  bool one_sided = false;
};

struct CudaSequenceOptions {
  bool replay_graphs = true;  // NOTE [CUDA call sequences] 3
  // With replay_graphs: calls with fresh bindings also replay the slot's graph, with the
  // nodes that carry them re-pointed (NOTE [CUDA call sequences] 3); off: only calls whose
  // bindings equal the slot's last call's replay.
  bool repoint_graphs = true;
  // NOTE [graph wait budget] (src/exec/cuda/graph_wait_budget.hpp): runners given one nonzero
  // lane (from new_graph_lane()) promise that their calls never run at once on a device (each
  // starts after the lane's previous call completed, as the runtime's lane handoffs order
  // them), so their graph waits count once per device; 0: a lane of its own.
  std::uint64_t graph_lane = 0;
  // Streams a copy op's descriptors are dealt over: its own and copy_streams - 1 pool streams
  // per rank (Sec. 6.2; NOTE [copy-engine pool] in src/exec/cuda/sequence_copy_pool.cpp). 1:
  // every copy on its op's stream. 1..16.
  int copy_streams = 1;
  CudaSequenceFaultInjection fault_injection;  // tests only
  CudaSequenceTestMessages test_messages;      // tests only
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
  // Grids a device keeps resident at once (CUDA's concurrent-kernel limit, sm_90), and the
  // most of them graph waits may spin in: the streams of every runner of this process whose
  // calls may overlap on one device (NOTE [graph wait budget]). A runner whose streams would
  // take a device past it runs on the stream path and refuses capture (graphs_unavailable()).
  static constexpr int kMaxResidentGrids = 128;
  static constexpr int kMaxGraphWaitStreams = kMaxResidentGrids / 2;
  // The graph-wait streams `device` may spin at once under the runners alive now (at most
  // kMaxGraphWaitStreams; NOTE [graph wait budget]).
  static int graph_wait_streams(int device);

  // `sequence` and `fabric` must outlive the runner. Validates the templates as the CUDA
  // executor does, creates streams, events and tables, and zeroes the sequence's signal
  // words of the local ranks. The setup's device work runs on a private stream per device
  // that the constructor synchronises (NOTE [CUDA call sequences] 1): when it returns the
  // words are zero and the tables uploaded, for every stream and peer; it never waits for
  // other work on the device. Throws Unsupported where a rank is not load/store reachable,
  // InvalidArgument where the fabric's words or arena are too small.
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
  // Before each launch of a graph that captured `calls`: gives the launch the next call
  // indices (the runner's host totals advance past them; the graph's waits follow on the
  // device). Throws InvalidArgument when the next index is not congruent to
  // calls.first_call mod event_slots().
  void prepare_replay(const CudaCapturedCalls& calls);
  // What prepare_replay checks, without advancing anything.
  void check_replay(const CudaCapturedCalls& calls) const;
  // Orders `caller` after the sequence's previous call where that ran on another stream (what
  // enqueue() does first), for work the caller enqueues before its call that the previous
  // call must not overlap (e.g. refilling an input the previous call still reads). Nothing
  // under a capture.
  void order_after_previous(cudaStream_t caller);

  // Thread-safe (NOTE [CUDA call sequences] 5): the oldest watched call still running
  // `timeout` after its enqueue, with its unsatisfied waits; nullopt when there is none.
  // A CUDA error met while looking is reported as a stall naming it.
  std::optional<CudaStalledCall> stalled(std::chrono::milliseconds timeout) const;
  // Thread-safe: whether a message to a local rank carried a nonzero abort token (NOTE [abort
  // relay]: its relayed-abort word is set), read on the first reader stream, bounded; false
  // without messages; nullopt where the read did not complete (the GPU's queues are held).
  std::optional<bool> relayed_abort() const;
  // Thread-safe: whether every watched call has completed.
  bool idle() const;
  // After release_waits(): a watched call is still running (its streams could not drain).
  // The runner's destructor then frees nothing that synchronises; the process must end.
  bool stuck() const;
  // Thread-safe: writes the local ranks' abort words, then satisfies every wait of the
  // sequence on the local ranks, so that its streams drain after a fail-stop abort (NOTE
  // [CUDA call sequences] 5). Their later signals count for nothing; the outputs of every
  // call from first_void_call() on are garbage, and the runner refuses every later call and
  // replay. Idempotent.
  void release_waits();
  // Thread-safe: ends the transport's own device waits (a rendezvous transport's: NOTE [rail
  // messages]); release_waits() does it too unless the fault injection holds them.
  // Idempotent.
  void release_messages();
  // Thread-safe: whether release_waits() ran.
  bool released() const;
  // Enqueues on `stream` (on the first local rank's device) the end-of-call check of NOTE
  // [CUDA call sequences] 5: the stream's later work runs only while no other process's rank
  // has released its waits (else only after this rank's own release). Nothing without
  // published abort words or without ranks of other processes. Capturable.
  void enqueue_abort_check(cudaStream_t stream) const;
  // Thread-safe: after release_waits(), the first call whose outputs are void (every call
  // from it on; calls before it completed before the release); -1 before.
  std::int64_t first_void_call() const;

  std::int64_t calls() const;  // calls enqueued (or replayed) so far
  int event_slots() const;     // Q
  // Calls run as launches of the runner's own slot graphs: captures (a call captured, then
  // launched) and replays (re-pointed or not) together.
  std::int64_t graph_launches() const;
  // Of those, the captures: slot graphs captured and instantiated (NOTE [slot graph policy]).
  // Replays are graph_launches() - graph_captures(); the other calls ran on the stream path.
  std::int64_t graph_captures() const;
  // Messages this process's ranks sent (NOTE [CUDA call sequences] 6: puts and signals to
  // ranks the fabric cannot store to) and their bytes (each message's abort token counts 8:
  // NOTE [abort relay]), so far.
  std::int64_t messages_sent() const;
  std::int64_t message_bytes_sent() const;
  // Caller-pointer nodes (copies, kernels, memsets) patched so far by fresh calls replayed
  // as graphs (NOTE [CUDA call sequences] 3), and the calls that were.
  std::int64_t nodes_repointed() const;
  // Why slot graphs cannot be re-pointed: from construction where a template copies caller
  // memory in 2-D, else the last capture or node update that failed (empty when none did).
  std::string repoint_failure() const;
  // Why this sequence's calls cannot run in graphs (empty when they can; NOTE [CUDA call
  // sequences] 3, 6): captures throw Unsupported with it, except where it begins "no slot
  // graphs" (only the runner's own slot graphs are off; a caller's capture is taken).
  std::string graphs_unavailable() const;
  std::int64_t repointed_launches() const;
  CudaSequenceCounts counts() const;
  // Why this runner's messages travel two-sided (NCCL sends and receives, or a rendezvous
  // transport), empty where they travel one-sided (NOTE [one-sided messages] in
  // src/exec/cuda/one_sided_messages.hpp: opt-in, Fabric::one_sided()). Fixed at construction,
  // the same on every process.
  std::string one_sided_refusal() const;
  // How this runner's messages travel: "two-sided" (NCCL ncclSend / ncclRecv), "one-sided"
  // (NCCL put and signal), "ipc-rendezvous" (NOTE [ipc rendezvous transport]), or a one-GPU
  // test transport's name ("test-rendezvous", "test-one-sided"); empty where its calls send
  // no messages (every peer addressable). Fixed at construction.
  std::string message_path() const;
  // Message sides (sends and receives) of the local ranks per call, averaged over the
  // templates (NOTE [CUDA call sequences] 6); 0 where every put and signal stores directly.
  double message_ops() const;

 private:
  // The one-shot facade (cuda_executor.hpp) runs a Program as a sequence of period 1 whose
  // buffers are bound at construction (NOTE [one-shot programs] in src/exec/cuda/executor.cpp).
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
