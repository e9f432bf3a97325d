// The TIDE runtime (architecture: runtime/): what a training loop calls. One Communicator per
// process group; groups registered once; all-gathers and reduce-scatters bound per call. An example
// of use: docs/runtime.md. Contract (points 1-11, cited below: NOTE [runtime] in docs/runtime.md):
// - Collective: create(), register_group() and the first info(), arena(), arena_request() or
//   call, on every rank with the same arguments in the same order. A group TIDE cannot run (1),
//   or registered after the arena exists (3), gets a reason and no id.
// - Calls of different groups interleave in any order every rank shares (4). kHost runs a call
//   on the calling thread, complete on return; kNccl and kIpc enqueue it on the caller's stream
//   (a cudaStream_t as an integer; device pointers) and return at once.
// - Landing slots (7-8): a landing holds its parameters until release(); an all-gather into a
//   slot another group holds throws InvalidArgument and writes nothing.
// - Graphs (6, GPU backends): calls under the caller's capture go into its graph; pass
//   take_graph_calls() to prepare_graph_launch() before each launch. The first call or info()
//   comes before any capture; no launch after close.
// - Failure (5, fail-stop): a timeout, dead peer or abort raises CommunicationError and aborts
//   every rank's communicator; GPU callers check() at their own synchronisation points.
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
// The one-node layout at M = 1 (NOTE [one-node TIDE-RS]) unless TIDE_ONE_NODE=0 (another
// value: InvalidArgument); agreed with the group (a rank that differs refuses it).
bool one_node_layout();

// Fault injection for tests and `tide check-runtime` only; the defaults inject nothing.
struct CommunicatorFaultInjection {
  // GPU backends: rank `stall_rank`'s calls from `stall_at_call` on never start.
  int stall_rank = -1;
  std::int64_t stall_at_call = -1;
  // GPU backends: rank `release_rank`'s abort() lets its messages flow for `release_hold`
  // before it marks the failure (peers learn it from the abort tokens, NOTE [abort relay]).
  int release_rank = -1;
  std::chrono::milliseconds release_hold{0};
};

// Emulation for tests and `tide check-runtime` only.
struct CommunicatorEmulation {
  // Every node reports a host of its own (NOTE [runtime] 9): other nodes by rail messages only.
  bool nodes_as_hosts = false;
  // With nodes_as_hosts: this rank's emulated host ("": one per node). NOTE [runtime] 11.
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
  // TIDE-RS sub-slice geometry (NOTE [sub-slice geometry] in rs_plan.cpp).
  RsSubSlices sub_slices = RsOptions{}.sub_slices;
  bool cast = false;           // the all-gather casts per-parameter fp32 masters (Sec. 3.2)
  bool staged_shards = false;  // no cast: per-parameter shards with every call, no resident
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
  // Each collective's lane ("tide-ag", "tide-rs", "ep"), and why those lanes (for a
  // one-rank-per-host group: why not on "ep"). NOTE [runtime] 11.
  std::string all_gather_lane;
  std::string reduce_scatter_lane;
  std::string lane_reason;
  int ag_period = 0;  // calls per template cycle (NOTE [call sequences])
  int rs_period = 0;
  // A CUDA graph holds a multiple of this many calls (NOTE [runtime] 6); 0 on the host backend.
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
  std::int64_t copy_bytes_avoided = 0;     // what FSDP2's layout copies would move (Eq. 3)
  std::int64_t copy_bytes_made = 0;        // shards cast or copied per call (S each)
  std::int64_t gradient_bytes_staged = 0;  // of those, by stage_gradients (Slot-Reuse)
  // GPU backends: calls replayed from / captured into slot graphs (NOTE [slot graph policy]).
  std::int64_t all_gather_replays = 0;
  std::int64_t reduce_scatter_replays = 0;
  std::int64_t all_gather_graph_captures = 0;
  std::int64_t reduce_scatter_graph_captures = 0;
  // Why a collective's slot graphs cannot take fresh pointers (empty where they can).
  std::string all_gather_repoint_failure;
  std::string reduce_scatter_repoint_failure;
  // Rail messages to other hosts, and their bytes (NOTE [runtime] 9).
  std::int64_t rail_messages = 0;
  std::int64_t rail_message_bytes = 0;
  // GPU backends: "<all-gather>/<reduce-scatter>" message paths ("none"; empty without
  // messages), and the first one_sided_refusal(), all-gather first.
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
  // Collective: the same world, L, backend and prefix everywhere (else InvalidArgument).
  static std::unique_ptr<Communicator> create(const CommunicatorOptions& options);
  virtual ~Communicator() = default;

  virtual Registration register_group(const GroupSpec& spec) = 0;
  // Creates the arena at the first use (collective; NOTE [runtime] 3), hence not const.
  virtual const GroupInfo& info(int group) = 0;
  // The group's layout as info() gives it, without creating the arena: no pointers yet.
  virtual const GroupInfo& planned_info(int group) const = 0;
  // NOTE [runtime] 7: every group's landing slot id (by group), the same on every rank;
  // InvalidArgument after the arena exists, for another length or an id below -1.
  virtual void assign_landing_slots(std::span<const int> slots) = 0;
  virtual GroupStats stats(int group) const = 0;

  // TIDE-AG (Sec. 3): the landing then holds every rank's shard of every parameter. `shards`:
  // empty (the packed shard at info().resident) or a pointer per parameter (R_p K_p elements,
  // fp32 masters with a cast, else the all-gather dtype).
  virtual void all_gather(int group, std::uintptr_t stream,
                          std::span<const void* const> shards) = 0;
  // TIDE-RS (Sec. 4-5): out (fp32, shard_elems) = alpha * sum over ranks of the gradients'
  // rows of this rank (+ out when accumulating). `grads`: one pointer per parameter, D_p K_p
  // elements of the gradient dtype, read in place; none after stage_gradients (NOTE [runtime] 8).
  virtual void reduce_scatter(int group, std::uintptr_t stream, std::span<const void* const> grads,
                              float* out, float alpha, bool accumulate) = 0;

  // NOTE [runtime] 6 (host: Unsupported): what the capture took (resets the record); before
  // every launch, its call indices (InvalidArgument where the next calls differ).
  virtual GraphCalls take_graph_calls() = 0;
  virtual void prepare_graph_launch(const GraphCalls& calls) = 0;

  // NOTE [runtime] 7: done with the landing after `stream`'s work so far (host: now);
  // InvalidArgument when the group holds no slot.
  virtual void release(int group, std::uintptr_t stream) = 0;
  // NOTE [runtime] 8: InvalidArgument where another group holds the slot (read in place then)
  // or the dtypes' geometry differs.
  virtual void stage_gradients(int group, std::uintptr_t stream,
                               std::span<const void* const> grads) = 0;
  // Whether the group's slot holds its parameters (an all-gather since the last release).
  virtual bool holds_slot(int group) const = 0;

  virtual std::int64_t arena_bytes() const = 0;  // 0 before the first call
  // Before the arena exists (collective): the bytes for the caller to allocate instead (0 on
  // host; nccl: ncclMemAlloc), outliving the communicator. provide_arena(): InvalidArgument
  // after the arena exists or for fewer bytes.
  virtual std::int64_t arena_request() = 0;  // lays the arena out (collective)
  virtual void provide_arena(std::uintptr_t memory, std::int64_t bytes) = 0;
  // The arena's layout; creates it like info() (collective at the first use).
  virtual ArenaInfo arena() = 0;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // NOTE [arena lending] (collective; after the arena exists, outside any capture): a barrier
  // of both lanes on `stream` (host: now). Once it completes on this rank, every rank finished
  // every earlier call; every later call of any rank starts after every rank's `stream` reached
  // its fence. So between two fences with no call between them no rank reads or writes any
  // arena, and the caller may use this rank's arena bytes [0, ArenaInfo::arena_bytes) on
  // `stream`, its work there ordered before the second fence.
  virtual void fence(std::uintptr_t stream) = 0;
  // Fail-stop by hand: every rank's next wait raises with `reason`.
  virtual void abort(const std::string& reason) = 0;
  // CommunicationError with the reason once the communicator failed.
  virtual void check() const = 0;
};

}  // namespace tide::runtime
