// The TIDE runtime (architecture: runtime/): what a training loop calls. One Communicator per
// process group; groups registered once; all-gathers and reduce-scatters bound per call.
//
// Use (every rank, the same calls in the same order):
//   runtime::CommunicatorOptions o;  o.rank = r;  o.world = n;  o.gpus_per_node = l;
//   o.backend = runtime::BackendKind::kHost;  o.store = std::make_shared<FileStore>(dir);
//   auto comm = runtime::Communicator::create(o);
//   runtime::Registration g = comm->register_group(spec);     // g.group < 0: stock, g.reason
//   comm->all_gather(g.group, stream, shards);                  // landing: comm->info(g).landing
//   comm->reduce_scatter(g.group, stream, grads, out, alpha, accumulate);
//
// NOTE [runtime]
// 1. Registration is collective. Each rank describes the group (shapes, dtypes, mode, plan
//    options) and the store gathers every rank's description; the capability agreement
//    (NOTE [capability agreement]) decides, the same on every rank. Plans are validated
//    there (App. D); a group TIDE cannot run returns a reason and no id, never an internal
//    error, so the caller keeps its stock collectives for it.
// 2. The communicator has one arena (NOTE [communicator arena]): the groups share one
//    all-gather receive stage and TIDE-RS's areas (sized by the largest group), groups of one
//    landing slot id share that slot (GroupSpec::landing_slot), and only a group that keeps a
//    resident shard has an area of its own. Each group has its own signal words. Its
//    all-gather and reduce-scatter calls are call sequences (NOTE [call sequences]) placed in
//    that arena, and every call follows its collective's lane handoff (NOTE [lane handoff]),
//    a device-side wait until every rank finished the previous call of that collective.
// 3. The arena is created at the first call (or info()), laid out for every group registered
//    by then, and reported by arena(). Groups registered after it are refused with a reason.
// 4. A call binds what changes (the caller's gradient, shard and output pointers, alpha,
//    accumulate) into the group's next template and runs or enqueues it. Calls of different
//    groups interleave in any order that every rank shares (FSDP2's); a rank that issues
//    another order is caught by the wait that cannot complete (timeout, naming it).
// 5. Failure is fail-stop (Sec. 7.5): a timeout, a dead peer or an abort raises
//    CommunicationError on this rank and aborts the communicator on every rank, whose next
//    call or wait raises. On the nccl backend calls complete on the GPU after they return,
//    so a watchdog thread (not the caller's) looks for a call still running the timeout
//    after its enqueue (NOTE [CUDA call sequences] 5). It prints one line naming the call
//    and its unsatisfied waits, releases the waits so that no stream hangs, and aborts the
//    NCCL communicators; every later call, and check(), raises with that line. A dead or
//    stalled peer stalls every other rank's calls, so every rank fails within the timeout.
//    At the first call the ranks start their peer liveness (NOTE [peer liveness]): a peer
//    of this host is dead when its process is gone, a peer of another host when its
//    heartbeat through the store stays silent for half the timeout or says it failed. Where
//    a peer is dead and a call is still running a tenth of the timeout (at least 1 s) after
//    its enqueue, the watchdog fires at once and its line names the dead rank (the host
//    backend: its waits raise naming it). A communicator spanning hosts keeps the store
//    until it is closed, and its close is no death to its peers.
// 6. CUDA graphs (nccl backend): a call on a caller stream that is being captured goes into
//    the caller's graph (its waits as kernels whose thresholds follow the call on the device,
//    NOTE [CUDA call sequences] 3-4) and advances nothing. After the capture ends,
//    take_graph_calls() returns what it captured; before every launch of the instantiated
//    graph the caller passes that to prepare_graph_launch(), which gives the launch the next
//    call indices of each group (they must fall on the captured ones modulo the group's event
//    slots: GroupInfo::graph_period). The communicator's first call, or info(), creates the
//    arena and synchronises, so one of them must come before any capture. Launch the graph
//    on a stream ordered after the groups' earlier calls and make their later calls on a
//    stream ordered after the launch (torch: replay on the stream the calls are made on).
//    Calls inside a graph are not watched (no timeout) and are counted in stats() when
//    captured, not per launch. A graph must not be launched after the communicator is
//    closed (it holds the communicator's device words and events).
// 7. Landing slots: an all-gather of group g writes g's slot, which holds g's parameters
//    until release(g, stream) says the caller is done with them (FSDP2's reshard). An
//    all-gather into a slot that another group still holds throws InvalidArgument naming both
//    (nothing is written); one into a released slot first makes its stream wait, on the
//    device, for the stream work before that release (an event: no host synchronisation), so
//    the slot's previous occupant has finished reading it. A group's own next all-gather waits
//    for its own release the same way. Groups with slots of their own need no release.
// 8. Slot-Reuse (Sec. 5.3): stage_gradients(g, stream, grads) copies the layer's gradients into
//    g's slot, which it vacated at reshard (same byte geometry: the gradient dtype must be the
//    all-gather dtype), so the caller frees their storage at once; the group holds the slot
//    again. The next reduce_scatter(g, ..., no gradient pointers) reads them there and releases
//    the slot after its reads (on its stream), so the slot's next all-gather waits for them.
// 9. Hosts (the topology). At the first registration every rank publishes its host's id and
//    the communicator derives M x L from them: the ranks of a host must be consecutive
//    (host-major, as torchrun numbers them) and every host must hold as many, C; L is
//    gpus_per_node where that divides C (emulated nodes inside a host), and M = world / L.
//    Ranks of one host form one set of virtual nodes, all addressable; groups over several
//    hosts are described with real nodes (each node inside one host: the agreement checks
//    it) and their rail traffic between hosts travels as two-sided messages. A topology the
//    communicator cannot serve refuses every group with the reason, the same on every rank:
//    ranks not host-major, hosts of unequal sizes, an L that does not divide C, or hosts on a
//    backend without rail messages. The host backend carries messages over shared memory, and
//    the ipc backend through the ipc rendezvous transport over its mapped windows (NOTE [ipc
//    rendezvous transport]), so their "hosts" are emulated ones
//    (CommunicatorEmulation::nodes_as_hosts); the nccl backend carries them as ncclSend /
//    ncclRecv on a communicator per lane (NOTE [nccl window fabric]), between emulated hosts
//    of one machine and between real hosts: its NCCL fabric is M hosts x C ranks per host,
//    LSA peers only within a host (src/runtime/nccl_layout.hpp, which refuses only what the
//    registration cannot form). Ranks on other hosts, real or emulated, are not load/store
//    reachable, so their abort words travel with their messages (NOTE [abort relay] in
//    src/exec/cuda/messages.hpp); emulated hosts on ipc and nccl take that same path, which
//    is how one GPU tests it. Real hosts: built and CPU-tested (the layout), not yet run on
//    two machines; until they have, tide.fsdp takes the nccl backend for a group over real
//    hosts only where every rank sets TIDE_BACKEND=nccl (python/tide/_runtime.py), and keeps
//    stock FSDP2 otherwise, with the reason.
// 10. The GPU backends' fail-stop words (NOTE [CUDA call sequences] 5, 7). After the lanes'
//    handoff words every rank's signal words hold its abort word and, per lane, its call-tag
//    word. Abort words are published: after a rank's watchdog releases its waits, every peer's
//    calls end in a check that holds them (their outputs never complete as valid), the check
//    also runs before a landing slot's release (a peer's compute after it never reads a slot
//    that a released rank's copies may still overwrite), and a stalled call's line names the
//    ranks that aborted. Every group call adds 1 + ((g + 1) << 32) to its lane's tag word
//    (g: the group's index), so a word counts the lane's calls that began on its rank's device
//    (low half) and sums their groups (high half). Calls of a lane run one after another, each
//    behind a handoff, so ranks that issued one order are at most one call apart; a stalled
//    call whose peer's word counts as many calls but sums other groups was misordered, and its
//    line says so and names both groups ("call-order mismatch"), where it would otherwise read
//    as a stalled peer.
// 11. Expert-parallel lanes (App. F). A communicator whose ranks are one per host (M >= 2
//    hosts, L = 1: the process group of an expert sub-mesh, one rank per node) runs its groups
//    on the expert-parallel lane (program/ep_lane.hpp): the all-gather in ceil(log2 M)
//    recursive-doubling rounds landing to landing (no receive stage: the arena has none for
//    them), the reduce-scatter as bf16 pieces in rail parts into a double-buffered inbox summed
//    by one fixed 8-source fp32 sum (the inbox lives in the arena's reduce-scatter area). Its
//    arithmetic order is the lane's (ep_rs_expected in collective_reference.hpp), not
//    TIDE-RS's. What the lane cannot serve runs on TIDE-AG's and TIDE-RS's M x 1 plans, and
//    GroupInfo::lane_reason says why: M > 8 or gradients other than bf16 (the reduce-scatter
//    only). Every backend runs the lane: kHost on the host executor; kIpc (emulated hosts)
//    and kNccl on the CUDA sequence runner, whose Level 1 kernel is the fixed 8-source sum
//    (M - 1 staged inbox blocks, then the own gradients in place; missing sources would add
//    -0.0f, which changes no bit) and whose messages carry the rail puts between hosts. Ranks
//    of one host (virtual nodes) are not one per host and keep TIDE-AG and TIDE-RS (their
//    GroupInfo::lane_reason stays empty). GroupInfo::*_lane names the lanes.
// Backends: kHost runs calls on the calling thread over shared memory (exec/host), so a call
// has completed when it returns; CPU tensors have no streams, and `stream` is ignored.
// kNccl (one process per GPU, the ranks of one host) enqueues each call on the caller's
// stream (a cudaStream_t as an integer) through the CUDA sequence runner (NOTE [CUDA call
// sequences]) and returns at once; pointers are device pointers. kIpc does the same over
// windows shared through CUDA IPC (NOTE [ipc fabric]): processes of one host, which may share
// a GPU, and no NCCL. Both are the same communicator (src/runtime/cuda_communicator.hpp) over
// another fabric.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tide/core/dtype.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/core/store.hpp"

namespace tide::program {
struct CommunicatorArena;
}

namespace tide::runtime {

enum class BackendKind : std::uint8_t { kHost, kNccl, kIpc };

BackendKind parse_backend(std::string_view text);
std::string_view backend_name(BackendKind backend);
// Whether this build has the backend (nccl: built with CUDA and NCCL; ipc: with CUDA).
bool backend_built(BackendKind backend);

// Fault injection, not a production setting: only tests and `tide check-runtime` set it; the
// defaults inject nothing.
struct CommunicatorFaultInjection {
  // nccl and ipc backends: from rank `stall_rank`'s call `stall_at_call` on (counting every
  // all-gather and reduce-scatter of the communicator), that rank's calls wait for a gate that
  // never opens, as if a peer's signals never came; the watchdog must find it.
  int stall_rank = -1;
  std::int64_t stall_at_call = -1;
  // nccl and ipc backends, rank `release_rank`: its abort() releases its waits but lets its
  // messages flow for `release_hold` before it ends them and tells its peers (the store's
  // failure mark), so that its peers learn of the abort only from its messages' abort tokens
  // (NOTE [abort relay]; the NCCL order: sends run until ncclCommAbort).
  int release_rank = -1;
  std::chrono::milliseconds release_hold{0};
};

// Emulation, not a production setting: only tests and `tide check-runtime` set it.
struct CommunicatorEmulation {
  // Every node of gpus_per_node ranks reports a host of its own (NOTE [runtime] 9): one
  // machine runs the protocol of M hosts, whose ranks reach each other by rail messages only.
  bool nodes_as_hosts = false;
  // With nodes_as_hosts: this rank's emulated host ("": one per node of gpus_per_node ranks).
  // Ranks that give one name share a host; the adapter names them after the job's ranks, so
  // that a process group of a sub-mesh sees the hosts its ranks sit on (NOTE [runtime] 11).
  std::string host;
};

struct CommunicatorOptions {
  int rank = 0;
  int world = 1;
  int gpus_per_node = 1;  // L; M = world / L
  BackendKind backend = BackendKind::kHost;
  std::shared_ptr<Store> store;
  std::string key_prefix = "tide";  // store keys of this communicator
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  int device = -1;                             // the CUDA device (nccl and ipc backends)
  CommunicatorFaultInjection fault_injection;  // tests and `tide check-runtime` only
  CommunicatorEmulation emulation;             // tests and `tide check-runtime` only
};

struct GroupSpec {
  std::string name;  // the FSDP2 group (module path), for messages
  std::vector<ParamShape> params;
  DType ag_dtype = DType::kBf16;
  DType grad_dtype = DType::kBf16;
  RsMode mode = RsMode::kInPlace;
  // TIDE-RS sub-slice geometry (NOTE [sub-slice geometry] in rs_plan.cpp): the library's
  // default, or per rank for 1-D gradient reads that a CUDA graph can re-point.
  RsSubSlices sub_slices = RsOptions{}.sub_slices;
  // fp32 master shards all-gathered in ag_dtype (mixed precision, Sec. 3.2): the all-gather
  // reads per-parameter fp32 shards instead of the resident packed shard.
  bool cast = false;
  // Without a cast: the all-gather reads per-parameter shards in ag_dtype with every call
  // (copied into the shared stage) instead of a resident shard of the group's own.
  bool staged_shards = false;
  // NOTE [runtime] 7: groups with one slot id >= 0 land in one shared slot; -1: its own.
  int landing_slot = -1;
};

struct Registration {
  int group = -1;      // >= 0: TIDE runs this group's collectives
  std::string reason;  // why not, when group < 0 (one line, the same on every rank)
};

// Where a group's bytes are on this rank, for the caller's views.
struct GroupInfo {
  std::string name;
  std::int64_t shard_elems = 0;               // sum_p R_p K_p
  std::vector<std::int64_t> rows_per_rank;    // R_p
  std::vector<std::int64_t> shard_offsets;    // o_p in elements of the all-gather dtype
  std::vector<std::int64_t> out_offsets;      // e_p in fp32 elements of the reduce-scatter output
  std::vector<std::int64_t> landing_offsets;  // bytes from landing: p's (N R_p, K_p) matrix
  std::byte* landing = nullptr;               // the parameters after an all-gather (stable)
  std::int64_t landing_bytes = 0;             // N S
  std::byte* resident = nullptr;              // this rank's packed shard (nullptr: shards per call)
  int landing_slot = -1;     // its slot: index into ArenaInfo::slots (NOTE [runtime] 7)
  int landing_slot_id = -1;  // GroupSpec::landing_slot
  // NOTE [runtime] 11: the lane of each collective ("tide-ag", "tide-rs", or "ep": the
  // expert-parallel lane), and, for a group whose ranks are one per host, why a collective is
  // not on that lane ("" where both are, and for every other group).
  std::string all_gather_lane;
  std::string reduce_scatter_lane;
  std::string lane_reason;
  int ag_period = 0;  // calls per template cycle (NOTE [call sequences])
  int rs_period = 0;
  // NOTE [runtime] 6: a CUDA graph must hold a multiple of this many of the group's calls of
  // each collective (the event slots Q of both sequences; 0 on the host backend, and on the
  // nccl backend before the first call).
  int graph_period = 0;
};

// What a caller's CUDA graph captured (NOTE [runtime] 6): per group and collective, the call
// indices of its calls.
struct GraphCalls {
  struct Sequence {
    int group = -1;               // -1: the lane's handoffs (NOTE [lane handoff])
    bool reduce_scatter = false;  // false: the group's all-gathers
    std::int64_t first_call = 0;
    int calls = 0;
  };
  std::vector<Sequence> sequences;
};

struct GroupStats {
  std::int64_t all_gathers = 0;
  std::int64_t reduce_scatters = 0;
  // Bytes FSDP2's layout copies would have moved on this rank for these calls: copy-in and
  // copy-out per all-gather, the bf16 -> fp32 pack per reduce-scatter (Sec. 1, Eq. 3).
  std::int64_t copy_bytes_avoided = 0;
  // Bytes these calls still copy on this rank: the shards cast or copied into the stage (or
  // the resident shard) by every all-gather that reads them per call (S each).
  std::int64_t copy_bytes_made = 0;
  // Of those, the gradients stage_gradients copied into the group's slot (Slot-Reuse).
  std::int64_t gradient_bytes_staged = 0;
  // nccl backend: calls that ran as a launch of their slot's CUDA graph (pointers unchanged,
  // or re-pointed: all-gathers; tens of microseconds of host time), the others on the stream
  // path. A reduce-scatter whose gradients cannot be re-pointed launches its graph when they
  // are where the slot's graph holds them (NOTE [slot graph policy]). The calls that captured
  // and instantiated a slot graph (and then launched it) are counted apart, as captures.
  std::int64_t all_gather_replays = 0;
  std::int64_t reduce_scatter_replays = 0;
  std::int64_t all_gather_graph_captures = 0;
  std::int64_t reduce_scatter_graph_captures = 0;
  // Why a collective's slot graphs cannot take fresh pointers (CudaSequenceRunner::
  // repoint_failure(); empty where they can): its fresh calls then run on the stream path.
  std::string all_gather_repoint_failure;
  std::string reduce_scatter_repoint_failure;
  // Rail messages this rank sent for these calls, and their bytes (NOTE [runtime] 9: the
  // traffic to ranks of other hosts; 0 where every peer is addressable).
  std::int64_t rail_messages = 0;
  std::int64_t rail_message_bytes = 0;
  // GPU backends: how the group's rail messages travel, "<all-gather>/<reduce-scatter>", each
  // CudaSequenceRunner::message_path() ("two-sided", "one-sided", "ipc-rendezvous") or "none"
  // where that collective sends none; empty where neither sends any (every peer addressable,
  // and on the host backend). message_path_reason: the first non-empty one_sided_refusal()
  // among the collectives that send messages, all-gather first (empty where all that send
  // are one-sided).
  std::string message_path;
  std::string message_path_reason;
};

// The communicator's arena on each rank (NOTE [communicator arena]).
struct ArenaInfo {
  struct Slot {
    int id = -1;  // GroupSpec::landing_slot (-1: one group's own)
    std::int64_t bytes = 0;
    std::vector<int> groups;
  };
  std::int64_t arena_bytes = 0;
  std::int64_t resident_bytes = 0;
  std::int64_t stage_bytes = 0;
  std::int64_t landing_bytes = 0;
  std::int64_t reduce_scatter_bytes = 0;
  std::int64_t bound_bytes = 0;  // Sec. 5.4 for these groups (0: not computed)
  bool provided = false;         // in memory the caller provided (provide_arena)
  std::vector<Slot> slots;
};

// The arena's summary (ArenaInfo) of a layout (NOTE [communicator arena]).
ArenaInfo describe_arena(const program::CommunicatorArena& arena);

class Communicator {
 public:
  // Collective over the world: every rank calls it with the same world, L, backend and
  // prefix. Throws InvalidArgument for inconsistent options.
  static std::unique_ptr<Communicator> create(const CommunicatorOptions& options);
  virtual ~Communicator() = default;

  virtual Registration register_group(const GroupSpec& spec) = 0;
  // Creates the arena at the first use (collective; NOTE [runtime] 3), hence not const.
  virtual const GroupInfo& info(int group) = 0;
  // The group's layout as info() gives it, without creating the arena: no pointers yet.
  virtual const GroupInfo& planned_info(int group) const = 0;
  // NOTE [runtime] 7: every group's landing slot id (GroupSpec::landing_slot), by group id,
  // replacing those given at registration, before the arena is created; every rank must pass
  // the same (checked when the arena is created). Throws InvalidArgument after it, or for a
  // list of another length or an id below -1.
  virtual void assign_landing_slots(std::span<const int> slots) = 0;
  virtual GroupStats stats(int group) const = 0;

  // TIDE-AG (Sec. 3): afterwards the landing holds every rank's shard of every parameter.
  // `shards`: empty when the packed shard is already at info().resident; otherwise one
  // pointer per parameter (R_p K_p elements: fp32 masters with a cast, else the all-gather
  // dtype, copied into the resident shard first).
  virtual void all_gather(int group, std::uintptr_t stream,
                          std::span<const void* const> shards) = 0;
  // TIDE-RS (Sec. 4-5): out (fp32, shard_elems) = alpha * sum over ranks of the gradients'
  // rows of this rank (+ out when accumulating). `grads`: one pointer per parameter, D_p K_p
  // elements of the gradient dtype, read in place; none after stage_gradients (NOTE [runtime] 8).
  virtual void reduce_scatter(int group, std::uintptr_t stream, std::span<const void* const> grads,
                              float* out, float alpha, bool accumulate) = 0;

  // NOTE [runtime] 6 (nccl backend; the host backend throws Unsupported): what calls made
  // under the caller's capture put into its graph (resets the record), and before every
  // launch of that graph, the call indices it runs as. prepare_graph_launch throws
  // InvalidArgument when the groups' next calls do not fall on the captured ones.
  virtual GraphCalls take_graph_calls() = 0;
  virtual void prepare_graph_launch(const GraphCalls& calls) = 0;

  // NOTE [runtime] 7: the caller is done with the group's landing after the work enqueued
  // on `stream` so far (host backend: now). Throws InvalidArgument when the group holds no
  // slot (no all-gather since its last release).
  virtual void release(int group, std::uintptr_t stream) = 0;
  // NOTE [runtime] 8: throws InvalidArgument where the slot is held by another group (the
  // caller then reads the gradients in place), or the dtypes' geometry differs.
  virtual void stage_gradients(int group, std::uintptr_t stream,
                               std::span<const void* const> grads) = 0;
  // Whether the group's slot holds its parameters (an all-gather since the last release).
  virtual bool holds_slot(int group) const = 0;

  virtual std::int64_t arena_bytes() const = 0;  // 0 before the first call
  // Before the arena exists (collective, like info()): the bytes of device memory the
  // backend would allocate for it, so that the caller can allocate them instead through its
  // own allocator (torch's statistics then count them); 0 where the backend cannot take
  // memory from outside (the host backend's arena is shared memory). The memory must come
  // from ncclMemAlloc (nccl backend) and outlive the communicator; provide_arena() hands it
  // over. Throws InvalidArgument after the arena exists, or for fewer bytes than asked.
  virtual std::int64_t arena_request() = 0;  // lays the arena out (collective)
  virtual void provide_arena(std::uintptr_t memory, std::int64_t bytes) = 0;
  // The arena's layout; creates it like info() (collective at the first use).
  virtual ArenaInfo arena() = 0;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Fail-stop by hand: every rank's next wait raises with `reason`.
  virtual void abort(const std::string& reason) = 0;
  // Throws CommunicationError with the reason when the communicator has failed (an abort,
  // or a call the watchdog found stalled). The nccl backend's calls complete after they
  // return, so a caller checks at its own synchronisation points; host calls raise at once.
  virtual void check() const = 0;
};

}  // namespace tide::runtime
