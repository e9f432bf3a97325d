// The TIDE protocol as data: per-rank op lists on named streams (architecture: program/).
// Ops of one (rank, stream) run in list order, each after the previous one completed (CUDA
// stream semantics). Across streams and ranks, order exists only through:
//   - kEventRecord / kEventWait: each (rank, id) recorded once; a wait completes once that
//     record (same rank) completed, i.e. every earlier op of the record's stream.
//   - kSignal / kWait: a signal adds to a counter (any rank) when it runs; a wait completes once
//     its counter (own rank) holds at least its value, ordered after the additions it needed.
//   - kRailPut: writes its destination (another rank), then adds to a counter there.
// Every op names the bytes it reads and writes (reads_of / writes_of), so an executor can
// check App. E's invariants I1-I4.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "tide/core/dtype.hpp"

namespace tide::program {

// Where bytes live: each rank's symmetric arena, per-parameter tensors (FSDP2's gradients, or
// fp32 master shards), and outputs (the reduce-scatter's fp32 shard).
enum class Space : std::uint8_t { kArena, kTensor, kOutput };

struct Buffer {
  int rank = 0;
  Space space = Space::kArena;
  int index = 0;  // the parameter, for kTensor; 0 otherwise
  bool operator==(const Buffer&) const = default;
};

// `rows` rows of `width` bytes starting at `offset`, `pitch` bytes apart (1-D: rows = 1).
struct Region {
  Buffer buffer;
  std::int64_t offset = 0;
  std::int64_t width = 0;
  std::int64_t pitch = 0;
  std::int64_t rows = 1;
  std::int64_t bytes() const { return width * rows; }
};

// A counter lives on one rank; `id` names it within the program.
struct Counter {
  int rank = 0;
  int id = 0;
};

struct CopyDescriptor {
  Region src;
  Region dst;  // same width and rows as src
};

// One run of the Level 1 owner's own contribution: `elems` elements of output row `row` from
// `out_elem`, read from parameter `param`'s gradient at `src_elem`. Staged inputs are valid
// exactly on these runs; output elements outside every run are padding (written +0).
struct SumSegment {
  int row = 0;
  std::int64_t out_elem = 0;
  int param = 0;  // the kTensor index of its gradient (kArena: 0)
  std::int64_t src_elem = 0;
  std::int64_t elems = 0;
  // The gradient tensor, or (one-node Slot-Reuse, NOTE [one-node TIDE-RS]) this rank's arena,
  // src_elem then counting gradient-dtype items from its start.
  Space space = Space::kTensor;
  Buffer source(int rank) const { return Buffer{rank, space, space == Space::kTensor ? param : 0}; }
};

// One payload per kind of op, holding exactly the fields that kind uses.
// A batch of 1-D or 2-D copies; ctas > 0: SM-driven (a copy or NCCL kernel), not a copy engine.
struct CopyOp {
  std::vector<CopyDescriptor> copies;
  int ctas = 0;
};

// Level 1 sum (Sec. 4.1) on `ctas` CTAs into fp32 rows `dst`; `staged`: the L - 1 staged
// contributions in local-rank order, dst's geometry in `in_dtype`; `segments`: the own one.
struct SumOp {
  Region dst;
  std::vector<Region> staged;
  std::vector<SumSegment> segments;
  DType in_dtype = DType::kBf16;
  float alpha = 1.0f;
  // dst = dst + part (+0 on padding): the one-node sum into the output (NOTE [one-node
  // TIDE-RS]). Only for a dst in the output; a sum into the arena overwrites.
  bool accumulate = false;
  int ctas = 0;
};

// Level 2 landing of one wave (Sec. 4.2) on `ctas` CTAs into a 1-D fp32 range of the output;
// `sources`: the wave's partials in contributor order, each of dst's length.
struct LandOp {
  Region dst;
  std::vector<Region> sources;
  bool accumulate = false;  // fold into the output's existing values
  int wave_index = 0;       // 0 for the first wave of its elements
  int ctas = 0;
};

// fp32 `src` -> bf16 `dst` (Sec. 3.1) on `ctas` CTAs.
struct CastOp {
  Region src;
  Region dst;
  int ctas = 0;
};

// Memset of `dst` to zero.
struct ZeroOp {
  Region dst;
};

// counter += value.
struct SignalOp {
  Counter counter;
  std::int64_t value = 0;
};

// Until counter >= value; the counter is on the op's own rank.
struct WaitOp {
  Counter counter;
  std::int64_t value = 0;
  bool network_round = false;  // closes a network round (the cost model adds t_rnd)
};

// `copies` to a rail peer, then counter += value there; ctas > 0: an NCCL kernel, not the NIC.
struct RailPutOp {
  std::vector<CopyDescriptor> copies;
  Counter counter;
  std::int64_t value = 0;
  int ctas = 0;
};

// Records event `event`.
struct EventRecordOp {
  int event = 0;
};

// Waits for event `event`'s record. ctas > 0 marks the wait that opens an NCCL kernel of that
// many CTAs (the cost model charges its start; executors treat it as a plain wait).
struct EventWaitOp {
  int event = 0;
  int ctas = 0;
};

// Host-visible release of `dst` (FSDP2 frees a gradient; memory may be reused).
struct ReleaseOp {
  Region dst;
};

// The payloads in OpKind order: an op's kind is the index of its payload.
using OpPayload = std::variant<CopyOp, SumOp, LandOp, CastOp, ZeroOp, SignalOp, WaitOp, RailPutOp,
                               EventRecordOp, EventWaitOp, ReleaseOp>;

enum class OpKind : std::uint8_t {
  kCopy,
  kSum,
  kLand,
  kCast,
  kZero,
  kSignal,
  kWait,
  kRailPut,
  kEventRecord,
  kEventWait,
  kRelease,
};

std::string_view op_kind_name(OpKind kind);

struct Op {
  int rank = 0;
  int stream = 0;     // index into Program::stream_names
  std::string label;  // what the op is, for errors and traces ("AG r2 scatter slot 3 p1")
  // A step inside one long-running kernel (an NCCL ring step): no host enqueue time.
  bool inside_kernel = false;
  // Its call: an index into Program::calls[rank] (NOTE [call identities]); -1: none.
  int call = -1;
  OpPayload payload;

  OpKind kind() const { return static_cast<OpKind>(payload.index()); }
  template <class T>
  bool is() const {
    return std::holds_alternative<T>(payload);
  }
  // The payload as kind T; throws std::bad_variant_access for another kind.
  template <class T>
  T& as() {
    return std::get<T>(payload);
  }
  template <class T>
  const T& as() const {
    return std::get<T>(payload);
  }
  // The payload as kind T, or nullptr for another kind.
  template <class T>
  T* get_if() {
    return std::get_if<T>(&payload);
  }
  template <class T>
  const T* get_if() const {
    return std::get_if<T>(&payload);
  }
};

// An op of the payload's kind.
inline Op make_op(int rank, int stream, std::string label, OpPayload payload) {
  Op op;
  op.rank = rank;
  op.stream = stream;
  op.label = std::move(label);
  op.payload = std::move(payload);
  return op;
}

// Facts several kinds share. The CTA budget of a kSum / kLand / kCast, the SM-driven mark of a
// kCopy / kRailPut, the kernel-opening mark of a kEventWait; 0 for other kinds.
int ctas_of(const Op& op);
// The descriptors of a kCopy / kRailPut; empty for other kinds.
std::span<const CopyDescriptor> copies_of(const Op& op);
// The counter of a kSignal / kWait / kRailPut; nullptr for other kinds.
const Counter* counter_of(const Op& op);
Counter* counter_of(Op& op);
// A counter and a value: what a kSignal / kRailPut adds to it, or what a kWait waits for.
struct CounterUse {
  Counter counter;
  std::int64_t value = 0;
};
// The addition of a kSignal / kRailPut; nullopt for other kinds.
std::optional<CounterUse> addition_of(const Op& op);
// The addition of a kSignal / kRailPut or the threshold of a kWait; nullopt for other kinds.
std::optional<CounterUse> counter_use_of(const Op& op);
// The event id of a kEventRecord / kEventWait; nullptr for other kinds.
const int* event_of(const Op& op);
int* event_of(Op& op);

namespace detail {
template <class OpT, class F>
void for_each_region(OpT& op, F&& f) {
  std::visit(
      [&](auto& p) {
        using T = std::remove_cvref_t<decltype(p)>;
        if constexpr (requires { p.copies; }) {
          for (auto& c : p.copies) {
            f(c.src);
            f(c.dst);
          }
        }
        if constexpr (std::is_same_v<T, CastOp>) f(p.src);
        if constexpr (requires { p.dst; }) f(p.dst);
        if constexpr (requires { p.staged; }) {
          for (auto& r : p.staged)
            f(r);
        }
        if constexpr (requires { p.sources; }) {
          for (auto& r : p.sources)
            f(r);
        }
      },
      op.payload);
}
}  // namespace detail

// Calls f on every region an op names (sum segments name tensors by index: not regions).
template <class F>
void for_each_region(Op& op, F&& f) {
  detail::for_each_region(op, f);
}
template <class F>
void for_each_region(const Op& op, F&& f) {
  detail::for_each_region(op, f);
}

// Sizes of every buffer, per rank, so an executor can allocate them.
struct BufferSizes {
  std::int64_t arena_bytes = 0;
  std::vector<std::int64_t> tensor_bytes;  // per parameter (kTensor index)
  std::vector<std::int64_t> output_bytes;  // per output (kOutput index; one per call of a step)
};

// NOTE [call identities]
// A program of several calls says which call each op belongs to (Op::call) and, per rank,
// which call it issues at each position (Program::calls). Every rank must issue the same calls
// in the same order (Sec. 3.2, I4): a wait in call i on a peer's counter, where the peer's
// call i is another, is a call-order mismatch (ErrorKind::kCallOrderMismatch before running).
// Programs of one call may leave `calls` empty.
struct CallIdentity {
  int group = 0;           // the parameter group (its index in the step)
  std::string collective;  // "all-gather", "reduce-scatter"
  std::string name;        // the group's name, for messages
  bool same_call(const CallIdentity& o) const {
    return group == o.group && collective == o.collective;
  }
};

// "reduce-scatter of group 1 ('b')", for messages.
std::string describe_call(const CallIdentity& call);

struct Program {
  int ranks = 0;
  std::vector<std::string> stream_names;         // streams every rank has, by index
  std::vector<BufferSizes> buffers;              // per rank
  std::vector<Op> ops;                           // all ranks; list order is stream order
  int counters = 0;                              // counter ids are 0..counters-1 on every rank
  int events = 0;                                // event ids are 0..events-1 on every rank
  std::vector<std::vector<CallIdentity>> calls;  // per rank, in issue order (may be empty)

  int stream(const std::string& name);  // finds or adds a stream name
};

// Where a call's private ids, tensors and output sit in a step's program.
struct CallPlacement {
  int counter_base = 0;  // first private counter id
  int event_base = 0;    // first private event id
  int tensor_base = 0;   // the call's per-parameter tensors are kTensor tensor_base + p
  int output = 0;        // the call's output is kOutput `output`
  int entry_event = -1;  // the caller stream waits for this event before the call (-1: none)
};

// The byte ranges an op reads and writes; synchronisation ops touch none.
std::vector<Region> reads_of(const Op& op);
std::vector<Region> writes_of(const Op& op);

}  // namespace tide::program
