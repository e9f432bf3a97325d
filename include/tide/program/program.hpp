// The TIDE protocol as data: per-rank op lists on named streams (architecture: program/).
//
// A Program holds every rank's ops. Ops of one (rank, stream) run in list order, each
// after the previous one has completed (CUDA stream semantics). Across streams and ranks,
// order exists only through the synchronisation ops:
//   - kEventRecord / kEventWait: event ids are per rank, like counters; each (rank, id) is
//     recorded once. A wait completes once that record (same rank) has completed; the
//     record completes when every earlier op of its stream has.
//   - kSignal / kWait on counters: a signal adds to a counter (on any rank) when it runs;
//     a wait completes once its counter (on its own rank) holds at least its value. A
//     wait is ordered after every signal whose addition it needed to reach that value.
//   - kRailPut: writes its destination region (on another rank), then adds to a counter on
//     the destination rank; a wait that observes the addition is ordered after the write.
// Every op names the byte ranges it reads and writes (reads_of / writes_of), so an
// executor can check that each read has a happens-before edge from the write it sees and
// that no write lands on bytes still to be read (App. E invariants I1-I4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/core/dtype.hpp"

namespace tide::program {

// Where bytes live. Each rank has one symmetric arena (landing, receive stage, staging,
// outbox, inbox, spares, resident shard), per-parameter tensors outside it (FSDP2's
// gradients G_p, or fp32 master shards for a mixed-precision all-gather), and an output
// outside it (the reduce-scatter's fp32 shard).
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

enum class OpKind : std::uint8_t {
  kCopy,         // copy-engine copies: `copies` (a batch of 1-D or 2-D descriptors)
  kSum,          // Level 1 sum (Sec. 4.1) on `ctas` short-lived CTAs
  kLand,         // Level 2 landing of one wave (Sec. 4.2), pull through peer pointers
  kCast,         // fp32 -> bf16 cast (Sec. 3.1)
  kZero,         // memset of `dst`
  kSignal,       // counter += add
  kWait,         // until counter >= value
  kRailPut,      // copies[0] to a rail peer, then counter += add on that peer
  kEventRecord,  // record event `event`
  kEventWait,    // wait for event `event`'s record
  kRelease,      // host-visible release of `dst` (FSDP2 frees a gradient; memory may be reused)
};

std::string_view op_kind_name(OpKind kind);

struct CopyDescriptor {
  Region src;
  Region dst;  // same width and rows as src
};

// One run of the Level 1 owner's own contribution: `elems` elements of output row `row`
// starting at element `out_elem`, read from parameter `param`'s gradient at `src_elem`.
// Staged inputs are valid exactly on these runs; output elements outside every run are
// padding and are written as +0.
struct SumSegment {
  int row = 0;
  std::int64_t out_elem = 0;
  int param = 0;  // the kTensor index of its gradient
  std::int64_t src_elem = 0;
  std::int64_t elems = 0;
};

struct Op {
  OpKind kind = OpKind::kCopy;
  int rank = 0;
  int stream = 0;     // index into Program::stream_names
  std::string label;  // what the op is, for errors and traces ("AG r2 scatter slot 3 p1")

  std::vector<CopyDescriptor> copies;  // kCopy, kRailPut (one descriptor)

  // kSum: `dst` is fp32 rows (width = row elements * 4, pitch in bytes); `staged` are the
  // L - 1 staged contributions in local-rank order, each with dst's row/element geometry
  // in `in_dtype`; `segments` locate the own contribution in this rank's gradient tensors.
  // kLand: `dst` is a 1-D fp32 range of the output; `sources` are the wave's partials in
  // contributor order, each the same length. kCast: `sources[0]` fp32 -> `dst` bf16.
  // kZero, kRelease: `dst`.
  Region dst;
  std::vector<Region> staged;
  std::vector<Region> sources;
  std::vector<SumSegment> segments;
  DType in_dtype = DType::kBf16;
  float alpha = 1.0f;
  bool accumulate = false;
  int wave_index = 0;  // kLand: 0 for the first wave of its elements
  // kSum, kLand, kCast: CTA budget. On kCopy / kRailPut, ctas > 0 marks an SM-driven
  // transfer (a copy kernel, an NCCL kernel) rather than a copy engine or the NIC. On
  // kEventWait, ctas > 0 marks the wait that opens an NCCL kernel on its stream (the cost
  // model charges the kernel's start there; executors treat it as a plain event wait).
  int ctas = 0;

  Counter counter;             // kSignal, kWait, kRailPut
  std::int64_t value = 0;      // kSignal / kRailPut: amount added; kWait: threshold
  bool network_round = false;  // kWait: closes a network round (the cost model adds t_rnd)
  // A step inside one long-running kernel (an NCCL ring step) rather than an operation the
  // host enqueues: it costs no host enqueue time.
  bool inside_kernel = false;
  int event = 0;  // kEventRecord, kEventWait
};

// Sizes of every buffer, per rank, so an executor can allocate them.
struct BufferSizes {
  std::int64_t arena_bytes = 0;
  std::vector<std::int64_t> tensor_bytes;  // per parameter (kTensor index)
  std::vector<std::int64_t> output_bytes;  // per output (kOutput index; one per call of a step)
};

struct Program {
  int ranks = 0;
  std::vector<std::string> stream_names;  // streams every rank has, by index
  std::vector<BufferSizes> buffers;       // per rank
  std::vector<Op> ops;                    // all ranks; list order is stream order
  int counters = 0;                       // counter ids are 0..counters-1 on every rank
  int events = 0;                         // event ids are 0..events-1 on every rank

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

// The byte ranges an op reads and writes (copy sources, staged inputs, gradient runs,
// landing partials, the output when accumulating ...). Synchronisation ops touch none.
std::vector<Region> reads_of(const Op& op);
std::vector<Region> writes_of(const Op& op);

}  // namespace tide::program
