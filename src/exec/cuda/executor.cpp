// The CUDA executor: maps every op of a Program onto CUDA streams, copy engines, stream memory
// operations, events and TIDE's kernels (NOTE [CUDA executor op mapping] in
// include/tide/exec/cuda_executor.hpp), enqueues a run, and waits for it with a timeout.
//
// Steps:
//   1. Construction: check_program(); resolve every region to device pointers on the fabric;
//      one non-blocking stream per used (rank, stream), one event per recorded (rank, event),
//      one counter array; a Level1SegmentTable per kSum (one synchronous upload each); per
//      copy op, the pointer and size arrays of its cudaMemcpyBatchAsync (when batching).
//   2. run(): enqueue every op in the order of NOTE [enqueue order] (event waits deferred
//      until their record is enqueued), waits offset by the run's counter epoch (no counter
//      reset on the hot path; NOTE [CUDA executor op mapping]); record one completion event
//      per stream. With CudaRunOptions::profile, timing events around kernels and streams.
//   3. Poll the completion events until all completed or the timeout; on a timeout name the
//      unsatisfied waits, release every wait so the streams drain, and throw (fail-stop).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "../../fabric/cuda_driver.hpp"
#include "counter_add.hpp"
#include "messages.hpp"
#include "program_checks.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/kernels/cast.hpp"
#include "tide/kernels/cuda_check.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"
#include "tide/version_gates.hpp"  // after cuda_runtime_api.h: the CUDA runtime gates

namespace tide::exec {

using cuda_detail::op_where;
using program::Buffer;
using program::Op;
using program::OpKind;
using program::Program;
using program::Region;

namespace {

using Clock = std::chrono::steady_clock;

// A value above every threshold a program can wait for: written into every counter after a
// timeout so that every cuStreamWaitValue64 (GEQ) passes and the streams drain.
constexpr unsigned char kReleaseByte = 0x3F;  // 0x3F3F3F3F3F3F3F3F

// How long a drain after a timeout or an enqueue failure may take before the executor gives
// its streams up as stuck.
constexpr double kDrainTimeoutS = 10.0;

struct CopyCall {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t width = 0, rows = 0, dpitch = 0, spitch = 0;
  bool flat = true;  // one cudaMemcpyAsync of width * rows bytes
};

// One op, resolved to device pointers and launch arguments at construction.
struct Mapped {
  OpKind kind = OpKind::kRelease;
  int rank = 0;     // the rank whose device runs it (a message receive: the receiver)
  int stream = -1;  // index into State::streams (-1: no stream work)
  bool empty = false;
  std::vector<CopyCall> copies;
  // The batched form of `copies` (State::batch): the 1-D copies (the flat descriptors and
  // the rows of the short 2-D ones) of one cudaMemcpyBatchAsync, and the 2-D descriptors
  // that stay cudaMemcpy2DAsync calls. Built at construction; empty when not batched.
  bool batched = false;
  std::vector<void*> batch_dsts;
  std::vector<void*> batch_srcs;  // not const: CUDA 12.8's signature takes void**
  std::vector<std::size_t> batch_sizes;
  std::vector<CopyCall> batch_2d;
  // Counters (kSignal, kWait, kRailPut): the device word, and its host index
  // (rank * program.counters + id) into State::totals.
  std::uint64_t* counter = nullptr;
  std::size_t counter_index = 0;
  std::uint64_t value = 0;
  // Events (kEventRecord, kEventWait): index into State::events.
  int event = -1;
  // kSum.
  kernels::Level1SumArgs sum{};
  std::vector<const void*> gradients;
  std::unique_ptr<kernels::Level1SegmentTable> table;
  kernels::Level1Tuning tuning{};
  // kLand.
  kernels::LandingArgs land{};
  // kCast.
  std::uint16_t* cast_dst = nullptr;
  const float* cast_src = nullptr;
  std::int64_t cast_n = 0;
  int cast_ctas = 0;
  // kZero.
  void* zero_ptr = nullptr;
  std::size_t zero_width = 0, zero_rows = 0, zero_pitch = 0;
  // Copy-engine pool (CudaExecutorOptions::copy_streams, NOTE [copy-engine pool]): lane of
  // each CopyCall (0: the op's own stream, j: pool stream j - 1 of the rank), the pool
  // streams used (indices into State::streams), the fork event and one join event per pool
  // stream used. Empty when the op's copies stay on its own stream.
  std::vector<int> lane;
  std::vector<int> pool;
  cudaEvent_t fork = nullptr;
  std::vector<cudaEvent_t> joins;
  // A put or signal to an unreachable rank (NOTE [rail messages]): the message and the
  // rank's rail stream (index into State::streams).
  std::unique_ptr<cuda_detail::Message> message;
  int rail = -1;

  Mapped() = default;
  Mapped(Mapped&&) = default;
  Mapped& operator=(Mapped&&) = default;
  ~Mapped() {
    if (message) cuda_detail::release_message(*message);
    if (fork != nullptr) (void)cudaEventDestroy(fork);
    for (cudaEvent_t e : joins)
      (void)cudaEventDestroy(e);
  }
};

std::string cuda_status(cudaError_t s) {
  return std::string(cudaGetErrorName(s)) + " (" + cudaGetErrorString(s) + ")";
}

// A byte span [lo, hi) a batched op writes (dst) or reads.
struct Span {
  std::uintptr_t lo = 0, hi = 0;
  bool dst = false;
};

// Adds the span of a copy's rows at `p`: one span per row, or the whole extent (gaps between
// rows included, conservative) when `whole`.
void add_spans(std::vector<Span>& spans, const void* p, std::size_t width, std::size_t rows,
               std::size_t pitch, bool whole, bool dst) {
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  if (whole) {
    spans.push_back({base, base + (rows - 1) * pitch + width, dst});
    return;
  }
  for (std::size_t r = 0; r < rows; ++r)
    spans.push_back({base + r * pitch, base + r * pitch + width, dst});
}

// True when a destination span meets another span (a source or destination). Copies of one
// cudaMemcpyBatchAsync run in no fixed order, so such an op is not batched. Sorts `spans`.
bool spans_overlap(std::vector<Span>& spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
  // Sweep in start order: a span meets an earlier one iff it starts before that one's end.
  // A destination conflicts with any earlier span, a source only with earlier destinations.
  std::uintptr_t dst_end = 0, any_end = 0;
  for (const Span& x : spans) {
    if (x.lo < (x.dst ? any_end : dst_end)) return true;
    any_end = std::max(any_end, x.hi);
    if (x.dst) dst_end = std::max(dst_end, x.hi);
  }
  return false;
}

#if TIDE_HAS_CUDA_MEMCPY_BATCH
// One cudaMemcpyBatchAsync with one attribute set for every copy.
cudaError_t memcpy_batch(const Mapped& m, cudaMemcpyAttributes* attrs, std::size_t* attr_index,
                         cudaStream_t s) {
#if TIDE_CUDA_MEMCPY_BATCH_FAIL_INDEX
  std::size_t fail = 0;
  return cudaMemcpyBatchAsync(const_cast<void**>(m.batch_dsts.data()),
                              const_cast<void**>(m.batch_srcs.data()),
                              const_cast<std::size_t*>(m.batch_sizes.data()), m.batch_dsts.size(),
                              attrs, attr_index, 1, &fail, s);
#else
  return cudaMemcpyBatchAsync(m.batch_dsts.data(), m.batch_srcs.data(), m.batch_sizes.data(),
                              m.batch_dsts.size(), attrs, attr_index, 1, s);
#endif
}
#endif

}  // namespace

struct CudaExecutor::State {
  const Program& program;
  fabric::Fabric& fabric;
  CudaExecutorOptions options;
  // Copy ops go through cudaMemcpyBatchAsync (options.batch_copies, the build and the driver
  // have it); every batch shares one attribute set.
  bool batch = false;
#if TIDE_HAS_CUDA_MEMCPY_BATCH
  cudaMemcpyAttributes batch_attrs{};
  std::size_t batch_attr_index = 0;
#endif
  std::vector<Mapped> ops;
  // Streams: one per used (rank, stream name).
  std::vector<cudaStream_t> streams;
  std::vector<std::pair<int, int>> stream_owner;  // (rank, stream name index; -1: rail)
  int current_device = -1;                        // the device last made current here
  std::map<int, int> rail_stream;                 // rank -> its rail stream (messages)
  std::map<int, std::vector<int>> copy_pool;  // rank -> its pool streams (NOTE [copy-engine pool])
  std::vector<Mapped> receives;               // the receiving side of messages to local ranks
  void* token = nullptr;                      // 8 device bytes: the payload of signal messages
  std::vector<cudaEvent_t> done;              // completion event per stream
  cudaStream_t control = nullptr;             // counter resets and read-backs
  // Events: one per recorded (rank, id); slot = rank * program.events + id.
  std::vector<cudaEvent_t> events;
  std::vector<int> event_index;  // slot -> index into events, or -1
  // The ranks this process runs (Fabric::local), and their signal words (the counters of
  // those ranks: program.counters words each, NOTE [fabric interface]).
  std::vector<int> local_ranks;
  std::size_t counter_words = 0;  // program.counters
  // Epoch-based counters: every run adds totals[c] to counter c; `epoch` runs completed since
  // the last reset, so the next run waits for epoch * totals[c] + value.
  std::vector<std::uint64_t> totals;
  std::uint64_t epoch = 0;
  bool counters_dirty = false;  // forced high after a timeout: reset before the next run
  // Profiling (created on the first profiled run): two timing events per kernel op (indexed
  // like ops; null elsewhere) and per stream.
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> kernel_events;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> stream_events;
  bool stuck = false;  // streams could not be drained: resources are kept, runs refused
  // The enqueue order: a legal serial schedule (NOTE [enqueue order]), then any ops it could
  // not place, in program order. An entry -(k + 1) is receives[k].
  std::vector<int> order;

  State(const Program& p, fabric::Fabric& f, const CudaExecutorOptions& o)
      : program(p), fabric(f), options(o) {}

  ~State() {
    if (stuck) {
      // Freeing memory that stuck streams still use would wait forever: keep everything.
      for (auto* list : {&ops, &receives}) {
        for (Mapped& m : *list) {
          (void)m.table.release();
          (void)m.message.release();
        }
      }
      return;
    }
    for (std::size_t i = 0; i < streams.size(); ++i) {
      (void)cudaSetDevice(fabric.device_of(stream_owner[i].first));
      (void)cudaStreamSynchronize(streams[i]);
    }
    for (cudaEvent_t e : done)
      (void)cudaEventDestroy(e);
    for (cudaEvent_t e : events)
      (void)cudaEventDestroy(e);
    for (auto& v : {&kernel_events, &stream_events}) {
      for (auto [a, b] : *v) {
        if (a != nullptr) (void)cudaEventDestroy(a);
        if (b != nullptr) (void)cudaEventDestroy(b);
      }
    }
    for (cudaStream_t s : streams)
      (void)cudaStreamDestroy(s);
    if (control != nullptr) (void)cudaStreamDestroy(control);
    if (token != nullptr) (void)cudaFree(token);
  }

  // Makes `rank`'s device current (kernels and stream calls must run on their stream's device).
  void use_device_of(int rank) {
    const int d = rank < 0 ? fabric.device() : fabric.device_of(rank);
    if (d == current_device) return;
    TIDE_CUDA_CHECK(cudaSetDevice(d));
    current_device = d;
  }

  // The rank's rail stream (messages), created on first use.
  int rail_of(int rank) {
    const auto it = rail_stream.find(rank);
    if (it != rail_stream.end()) return it->second;
    use_device_of(rank);
    cudaStream_t s = nullptr;
    TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int index = static_cast<int>(streams.size());
    streams.push_back(s);
    stream_owner.emplace_back(rank, -1);
    cudaEvent_t e = nullptr;
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    done.push_back(e);
    rail_stream.emplace(rank, index);
    if (token == nullptr) {
      TIDE_CUDA_CHECK(cudaMalloc(&token, sizeof(std::uint64_t)));
      TIDE_CUDA_CHECK(cudaMemset(token, 0x5A, sizeof(std::uint64_t)));
    }
    return index;
  }

  std::string stream_name(std::size_t i) const {
    const int name = stream_owner[i].second;
    if (name == -1) return "rail messages";
    if (name == -2) return "copy pool";
    return program.stream_names[static_cast<std::size_t>(name)];
  }

  std::byte* at(const Region& r) const {
    auto* p = static_cast<std::byte*>(fabric.pointer(r.buffer));
    if (p == nullptr && r.bytes() > 0) {
      throw Unsupported("a buffer of rank " + std::to_string(r.buffer.rank) +
                        " is not addressable from this process (not a load/store peer); "
                        "rail transfers to other hosts need the NCCL send/receive path, "
                        "which is not built yet (docs/nccl_fabric.md)");
    }
    return p + r.offset;
  }

  std::size_t counter_index(const program::Counter& c) const {
    return static_cast<std::size_t>(c.rank) * counter_words + static_cast<std::size_t>(c.id);
  }

  std::uint64_t* counter(const program::Counter& c) const {
    std::uint64_t* words = fabric.signals(c.rank);
    if (words == nullptr) {
      throw Unsupported("the signal words of rank " + std::to_string(c.rank) +
                        " are not addressable from this process (not a load/store peer)");
    }
    return words + c.id;
  }

  // Writes `byte` into every signal word of the local ranks (synchronously, on each rank's
  // device).
  void fill_local_signals(unsigned char byte) {
    for (int r : local_ranks) {
      use_device_of(r);
      TIDE_CUDA_CHECK(
          cudaMemset(fabric.signals(r), byte, std::max<std::size_t>(1, counter_words) * 8));
    }
  }

  std::size_t event_slot(const Op& op) const {
    return static_cast<std::size_t>(op.rank) * static_cast<std::size_t>(program.events) +
           static_cast<std::size_t>(op.event);
  }

  // NOTE [copy-engine pool]
  // With CudaExecutorOptions::copy_streams = k > 1, a copy op (kCopy, kRailPut) of two or more
  // descriptors on the per-descriptor path deals its descriptors over its own stream and up
  // to k - 1 pool streams of its rank (Sec. 6.2: descriptor batches over a small stream pool,
  // so that several copy engines work on one op): largest first, each to the least-loaded
  // lane by bytes. Synchronisation: the op's stream records `fork`; each pool stream used
  // waits for it, issues its share and records its `join`; the op's stream waits for every
  // join before anything that follows the op (a kRailPut's counter addition included). A
  // rank's pool streams are shared by its program streams and fed in the one enqueue order
  // (NOTE [enqueue order]), so a pool stream only ever waits for forks already enqueued.
  std::vector<int>& pool_of(int rank) {
    std::vector<int>& pool = copy_pool[rank];
    while (static_cast<int>(pool.size()) < options.copy_streams - 1) {
      use_device_of(rank);
      cudaStream_t s = nullptr;
      TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      pool.push_back(static_cast<int>(streams.size()));
      streams.push_back(s);
      stream_owner.emplace_back(rank, -2);
      cudaEvent_t e = nullptr;
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      done.push_back(e);
    }
    return pool;
  }

  void map_pool(const Op& op, Mapped& m) {
    const int lanes = std::min<int>(options.copy_streams, static_cast<int>(m.copies.size()));
    if (lanes < 2 || m.batched) return;
    std::vector<std::size_t> order_by_size(m.copies.size());
    for (std::size_t i = 0; i < order_by_size.size(); ++i)
      order_by_size[i] = i;
    auto bytes = [&](std::size_t i) { return m.copies[i].width * m.copies[i].rows; };
    std::stable_sort(order_by_size.begin(), order_by_size.end(),
                     [&](std::size_t a, std::size_t b) { return bytes(a) > bytes(b); });
    std::vector<std::size_t> load(static_cast<std::size_t>(lanes), 0);
    m.lane.assign(m.copies.size(), 0);
    for (std::size_t i : order_by_size) {
      const auto lightest =
          static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      m.lane[i] = static_cast<int>(lightest);
      load[lightest] += bytes(i);
    }
    const std::vector<int>& pool = pool_of(op.rank);
    use_device_of(op.rank);
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&m.fork, cudaEventDisableTiming));
    for (int j = 1; j < lanes; ++j) {
      m.pool.push_back(pool[static_cast<std::size_t>(j - 1)]);
      cudaEvent_t e = nullptr;
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      m.joins.push_back(e);
    }
  }

  void map_copies(const Op& op, Mapped& m) const {
    for (const program::CopyDescriptor& c : op.copies) {
      if (c.src.bytes() == 0) continue;
      CopyCall call;
      call.dst = at(c.dst);
      call.src = at(c.src);
      call.width = static_cast<std::size_t>(c.src.width);
      call.rows = static_cast<std::size_t>(c.src.rows);
      call.dpitch = static_cast<std::size_t>(c.dst.pitch);
      call.spitch = static_cast<std::size_t>(c.src.pitch);
      call.flat = cuda_detail::contiguous(c.src) && cuda_detail::contiguous(c.dst);
      m.copies.push_back(call);
    }
    if (batch) map_batch(m);
  }

  // The batched form of an op's copies (Mapped::batched). One copy stays one plain call;
  // copies that meet (checked row by row; a long 2-D copy by its whole extent) keep the
  // per-descriptor calls, in descriptor order.
  void map_batch(Mapped& m) const {
    if (m.copies.size() < 2) return;
    const auto max_rows = static_cast<std::size_t>(options.batch_max_rows);
    std::vector<Span> spans;
    for (const CopyCall& c : m.copies) {
      if (!c.flat && c.rows > max_rows) {
        m.batch_2d.push_back(c);
        add_spans(spans, c.dst, c.width, c.rows, c.dpitch, true, true);
        add_spans(spans, c.src, c.width, c.rows, c.spitch, true, false);
        continue;
      }
      const std::size_t rows = c.flat ? 1 : c.rows;
      const std::size_t bytes = c.flat ? c.width * c.rows : c.width;
      for (std::size_t r = 0; r < rows; ++r) {
        m.batch_dsts.push_back(static_cast<std::byte*>(c.dst) + r * c.dpitch);
        m.batch_srcs.push_back(const_cast<std::byte*>(static_cast<const std::byte*>(c.src)) +
                               r * c.spitch);
        m.batch_sizes.push_back(bytes);
      }
      add_spans(spans, c.dst, bytes, rows, c.dpitch, false, true);
      add_spans(spans, c.src, bytes, rows, c.spitch, false, false);
    }
    if (spans_overlap(spans)) {
      m.batch_dsts = {};
      m.batch_srcs = {};
      m.batch_sizes = {};
      m.batch_2d = {};
      return;
    }
    m.batched = true;
  }

  void map_sum(const Op& op, Mapped& m) const {
    const std::int64_t width = op.dst.width / 4;
    if (width == 0 || op.dst.rows == 0) {
      m.empty = true;
      return;
    }
    const std::int64_t item = item_bytes(op.in_dtype);
    // Tensor indices renumbered per op: the kernel takes at most 256 gradient pointers.
    std::map<int, int> compact;
    for (const program::SumSegment& s : op.segments)
      compact.emplace(s.param, 0);
    for (auto& [param, index] : compact) {
      index = static_cast<int>(m.gradients.size());
      m.gradients.push_back(fabric.pointer(Buffer{op.rank, program::Space::kTensor, param}));
    }
    std::vector<kernels::Level1RunSpec> runs;
    runs.reserve(op.segments.size());
    for (const program::SumSegment& s : op.segments)
      runs.push_back({s.row, s.out_elem, s.elems, compact.at(s.param), s.src_elem});
    m.table =
        std::make_unique<kernels::Level1SegmentTable>(static_cast<int>(op.dst.rows), width, runs);
    kernels::Level1SumArgs& a = m.sum;
    a.out = reinterpret_cast<float*>(at(op.dst));
    a.out_pitch = op.dst.rows > 1 ? op.dst.pitch / 4 : width;
    a.dtype = op.in_dtype;
    a.num_staged = static_cast<int>(op.staged.size());
    if (!op.staged.empty()) {
      a.staged = at(op.staged[0]);
      a.staged_stride = cuda_detail::staged_stride(op) / item;
      a.staged_pitch = op.dst.rows > 1 ? op.staged[0].pitch / item : width;
    }
    a.num_gradients = static_cast<int>(m.gradients.size());
    a.table = m.table->view();
    a.alpha = op.alpha;
    a.accumulate = op.accumulate;
    a.ctas = std::max(1, op.ctas);
    m.tuning = kernels::recommended_level1_tuning(a.ctas);
  }

  void map_op(const Op& op, Mapped& m, int stream) {
    use_device_of(op.rank);  // Level 1 tables and message staging live on the rank's device
    m.kind = op.kind;
    m.rank = op.rank;
    m.stream = stream;
    if (cuda_detail::is_message(op, fabric)) {
      m.message = std::make_unique<cuda_detail::Message>(
          cuda_detail::map_message(program, op, /*sender=*/true, fabric));
      m.rail = rail_of(op.rank);
      return;
    }
    switch (op.kind) {
      case OpKind::kCopy:
        map_copies(op, m);
        map_pool(op, m);
        m.empty = m.copies.empty();
        break;
      case OpKind::kRailPut:
        map_copies(op, m);
        map_pool(op, m);
        m.counter = counter(op.counter);
        m.counter_index = counter_index(op.counter);
        m.value = static_cast<std::uint64_t>(op.value);
        break;
      case OpKind::kSignal:
      case OpKind::kWait:
        m.counter = counter(op.counter);
        m.counter_index = counter_index(op.counter);
        m.value = static_cast<std::uint64_t>(op.value);
        break;
      case OpKind::kEventRecord:
      case OpKind::kEventWait:
        m.event = event_index[event_slot(op)];
        break;
      case OpKind::kSum:
        map_sum(op, m);
        break;
      case OpKind::kLand:
        m.land.out = reinterpret_cast<float*>(at(op.dst));
        m.land.n = op.dst.bytes() / 4;
        m.land.num_partials = static_cast<int>(op.sources.size());
        for (std::size_t k = 0; k < op.sources.size(); ++k)
          m.land.partials[k] = reinterpret_cast<const float*>(at(op.sources[k]));
        m.land.wave_index = op.wave_index;
        m.land.accumulate = op.accumulate;
        m.land.ctas = std::max(1, op.ctas);
        m.empty = m.land.n == 0;
        break;
      case OpKind::kCast:
        m.cast_dst = reinterpret_cast<std::uint16_t*>(at(op.dst));
        m.cast_src = reinterpret_cast<const float*>(at(op.sources[0]));
        m.cast_n = op.dst.bytes() / 2;
        m.cast_ctas = op.ctas;
        m.empty = m.cast_n == 0;
        break;
      case OpKind::kZero:
        m.zero_ptr = at(op.dst);
        m.zero_width = static_cast<std::size_t>(op.dst.width);
        m.zero_rows = static_cast<std::size_t>(op.dst.rows);
        m.zero_pitch = static_cast<std::size_t>(op.dst.pitch);
        m.empty = op.dst.bytes() == 0;
        break;
      case OpKind::kRelease:
        m.empty = true;
        break;
    }
  }

  static bool is_kernel(OpKind k) {
    return k == OpKind::kSum || k == OpKind::kLand || k == OpKind::kCast;
  }

  // Creates the profiling events once.
  void make_profile_events() {
    if (!stream_events.empty()) return;
    auto timing = [] {
      cudaEvent_t e = nullptr;
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
      return e;
    };
    kernel_events.assign(ops.size(), {nullptr, nullptr});
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (!is_kernel(ops[i].kind) || ops[i].empty || ops[i].stream < 0) continue;
      use_device_of(ops[i].rank);
      kernel_events[i] = {timing(), timing()};
    }
    for (std::size_t i = 0; i < streams.size(); ++i) {
      use_device_of(stream_owner[i].first);
      stream_events.emplace_back(timing(), timing());
    }
  }

  // Enqueues one op on its stream. Throws with the CUDA error; the caller adds the op.
  void enqueue(const Mapped& m, CudaRunResult& stats) {
    use_device_of(m.rank);
    if (m.message) {
      cudaStream_t rail = streams[static_cast<std::size_t>(m.rail)];
      cudaStream_t own = m.stream >= 0 ? streams[static_cast<std::size_t>(m.stream)] : rail;
      cuda_detail::enqueue_message(*m.message, fabric, rail, own, token);
      stats.copies += static_cast<std::int64_t>(m.message->parts.size());
      return;
    }
    if (m.empty && m.kind != OpKind::kRailPut) return;
    cudaStream_t s = streams[static_cast<std::size_t>(m.stream)];
    const auto& d = fabric::detail::driver();
    const std::uint64_t base = epoch * (m.counter != nullptr ? totals[m.counter_index] : 0);
    switch (m.kind) {
      case OpKind::kCopy:
      case OpKind::kRailPut:
        if (m.batched) {
          enqueue_batch(m, s, stats);
        } else if (!m.lane.empty()) {
          enqueue_pooled(m, s, stats);
        } else {
          for (const CopyCall& c : m.copies)
            enqueue_copy(c, s, stats);
        }
        if (m.kind == OpKind::kRailPut) {
          cuda_detail::launch_counter_add(m.counter, m.value, s);
          ++stats.kernels;
        }
        break;
      case OpKind::kSignal:
        cuda_detail::launch_counter_add(m.counter, m.value, s);
        ++stats.kernels;
        break;
      case OpKind::kWait:
        fabric::detail::check_driver(
            d.stream_wait_value64(reinterpret_cast<CUstream>(s),
                                  reinterpret_cast<CUdeviceptr>(m.counter), base + m.value,
                                  CU_STREAM_WAIT_VALUE_GEQ),
            "cuStreamWaitValue64");
        ++stats.memops;
        break;
      case OpKind::kEventRecord:
        TIDE_CUDA_CHECK(cudaEventRecord(events[static_cast<std::size_t>(m.event)], s));
        break;
      case OpKind::kEventWait:
        TIDE_CUDA_CHECK(cudaStreamWaitEvent(s, events[static_cast<std::size_t>(m.event)], 0));
        break;
      case OpKind::kSum: {
        kernels::Level1SumArgs a = m.sum;
        a.gradients = m.gradients.data();
        kernels::launch_level1_sum(a, s, m.tuning);
        ++stats.kernels;
        break;
      }
      case OpKind::kLand:
        kernels::launch_landing(m.land, s);
        ++stats.kernels;
        break;
      case OpKind::kCast:
        kernels::launch_cast_fp32_to_bf16(m.cast_dst, m.cast_src, m.cast_n, s, m.cast_ctas);
        ++stats.kernels;
        break;
      case OpKind::kZero:
        if (m.zero_rows <= 1 || m.zero_pitch == m.zero_width) {
          TIDE_CUDA_CHECK(cudaMemsetAsync(m.zero_ptr, 0, m.zero_width * m.zero_rows, s));
        } else {
          TIDE_CUDA_CHECK(
              cudaMemset2DAsync(m.zero_ptr, m.zero_pitch, 0, m.zero_width, m.zero_rows, s));
        }
        break;
      case OpKind::kRelease:
        break;
    }
  }

  void enqueue_copy(const CopyCall& c, cudaStream_t s, CudaRunResult& stats) {
    if (c.flat) {
      TIDE_CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src, c.width * c.rows, cudaMemcpyDeviceToDevice, s));
    } else {
      TIDE_CUDA_CHECK(cudaMemcpy2DAsync(c.dst, c.dpitch, c.src, c.spitch, c.width, c.rows,
                                        cudaMemcpyDeviceToDevice, s));
    }
    ++stats.copies;
    ++stats.copy_calls;
  }

  // An op's copies dealt over its stream and pool streams (NOTE [copy-engine pool]).
  void enqueue_pooled(const Mapped& m, cudaStream_t own, CudaRunResult& stats) {
    TIDE_CUDA_CHECK(cudaEventRecord(m.fork, own));
    for (std::size_t j = 0; j < m.pool.size(); ++j) {
      cudaStream_t p = streams[static_cast<std::size_t>(m.pool[j])];
      TIDE_CUDA_CHECK(cudaStreamWaitEvent(p, m.fork, 0));
    }
    for (std::size_t i = 0; i < m.copies.size(); ++i) {
      const int lane = m.lane[i];
      cudaStream_t s = lane == 0 ? own : streams[static_cast<std::size_t>(m.pool[lane - 1])];
      enqueue_copy(m.copies[i], s, stats);
    }
    for (std::size_t j = 0; j < m.pool.size(); ++j) {
      cudaStream_t p = streams[static_cast<std::size_t>(m.pool[j])];
      TIDE_CUDA_CHECK(cudaEventRecord(m.joins[j], p));
      TIDE_CUDA_CHECK(cudaStreamWaitEvent(own, m.joins[j], 0));
    }
  }

  // A batched op's copies: one cudaMemcpyBatchAsync (a plain cudaMemcpyAsync for a single
  // 1-D copy), then its long 2-D descriptors.
  void enqueue_batch(const Mapped& m, cudaStream_t s, CudaRunResult& stats) {
    const std::size_t n = m.batch_dsts.size();
    if (n == 1) {
      TIDE_CUDA_CHECK(cudaMemcpyAsync(m.batch_dsts[0], m.batch_srcs[0], m.batch_sizes[0],
                                      cudaMemcpyDeviceToDevice, s));
      ++stats.copy_calls;
    } else if (n > 1) {
#if TIDE_HAS_CUDA_MEMCPY_BATCH
      TIDE_CUDA_CHECK(memcpy_batch(m, &batch_attrs, &batch_attr_index, s));
      ++stats.copy_calls;
#else
      throw CudaError("CudaExecutor: cudaMemcpyBatchAsync is not available in this build");
#endif
    }
    for (const CopyCall& c : m.batch_2d) {
      TIDE_CUDA_CHECK(cudaMemcpy2DAsync(c.dst, c.dpitch, c.src, c.spitch, c.width, c.rows,
                                        cudaMemcpyDeviceToDevice, s));
      ++stats.copy_calls;
    }
    stats.copies += static_cast<std::int64_t>(m.copies.size());
  }

  // Polls every stream's completion event until all completed or `timeout_s` passed. Returns
  // whether all completed; throws CudaError on an asynchronous fault.
  bool wait_all(double timeout_s, std::vector<bool>* complete) const {
    const Clock::time_point start = Clock::now();
    std::vector<bool> ok(done.size(), false);
    std::size_t remaining = done.size();
    for (;;) {
      for (std::size_t i = 0; i < done.size(); ++i) {
        if (ok[i]) continue;
        const cudaError_t st = cudaEventQuery(done[i]);
        if (st == cudaSuccess) {
          ok[i] = true;
          --remaining;
        } else if (st != cudaErrorNotReady) {
          throw CudaError("CudaExecutor: stream of rank " + std::to_string(stream_owner[i].first) +
                          " '" + stream_name(i) + "' failed: " + cuda_status(st));
        }
      }
      if (remaining == 0) break;
      if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) break;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (complete != nullptr) *complete = ok;
    return remaining == 0;
  }

  // Sets every counter to a huge value so every stream waiting on one proceeds, then waits
  // for the streams; marks the executor stuck (and releases the fabric) if they do not drain.
  void release_and_drain() {
    bool drained = false;
    try {
      counters_dirty = true;
      fill_local_signals(kReleaseByte);
      drained = wait_all(kDrainTimeoutS, nullptr);
    } catch (const std::exception&) {
      drained = false;
    }
    if (!drained) {
      stuck = true;
      fabric.release();
    }
  }

  // NOTE [enqueue order]
  // Streams share a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), each executed in
  // submission order, and a cuStreamWaitValue64 stalls its whole queue. Enqueuing a wait
  // before the signal it needs could then deadlock two aliased streams. So the executor
  // enqueues in a legal serial schedule, computed once here by simulating counters and
  // events on the host: repeatedly take the head op of any (rank, stream) whose wait is
  // already satisfied by the ops taken before it. Every op's dependencies are then submitted
  // before it, and no aliasing can block it. Ops the simulation cannot place (a wait that can
  // never be satisfied) follow in program order, so the run-time timeout names them.
  // Every rank's ops are simulated (a local wait may need a remote rank's signal); only the
  // local ranks' ops enter `order`. Each process's order is the global schedule filtered to
  // its ranks, so no process submits a wait before the local signals it needs.
  void schedule() {
    const std::size_t n = program.ops.size();
    std::map<std::pair<int, int>, std::size_t> queue_of;
    std::vector<std::deque<int>> heads;
    for (std::size_t i = 0; i < n; ++i) {
      const Op& op = program.ops[i];
      const auto [it, fresh] = queue_of.emplace(std::pair{op.rank, op.stream}, heads.size());
      if (fresh) heads.emplace_back();
      heads[it->second].push_back(static_cast<int>(i));
    }
    std::vector<std::int64_t> total(totals_size(), 0);
    std::vector<bool> recorded(event_index.size(), false);
    std::vector<bool> placed(n, false);
    order.clear();
    order.reserve(n);
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& q : heads) {
        while (!q.empty()) {
          const Op& op = program.ops[static_cast<std::size_t>(q.front())];
          const bool ready = op.kind == OpKind::kWait ? total[counter_index(op.counter)] >= op.value
                             : op.kind == OpKind::kEventWait
                                 ? static_cast<bool>(recorded[event_slot(op)])
                                 : true;
          if (!ready) break;
          if (op.kind == OpKind::kSignal || op.kind == OpKind::kRailPut)
            total[counter_index(op.counter)] += op.value;
          if (op.kind == OpKind::kEventRecord) recorded[event_slot(op)] = true;
          placed[static_cast<std::size_t>(q.front())] = true;
          place(q.front());
          q.pop_front();
          moved = true;
        }
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!placed[i]) place(static_cast<int>(i));
    }
    // What one run adds to every counter, placed or not (the epochs of NOTE [CUDA executor op
    // mapping]).
    totals.assign(total.size(), 0);
    for (const Op& op : program.ops) {
      if (op.kind == OpKind::kSignal || op.kind == OpKind::kRailPut)
        totals[counter_index(op.counter)] += static_cast<std::uint64_t>(op.value);
    }
  }

  // Appends op i to `order` where this process runs it: the op itself on its local rank, and
  // the receiving side of a message to a local rank (NOTE [rail messages]).
  void place(int i) {
    const Op& op = program.ops[static_cast<std::size_t>(i)];
    if (fabric.local(op.rank)) order.push_back(i);
    if (!cuda_detail::is_message(op, fabric) || !fabric.local(op.counter.rank)) return;
    if (fabric.local(op.rank)) {
      throw InternalError(cuda_detail::op_where(program, i) +
                          "a message between two ranks of one process");
    }
    Mapped r;
    r.kind = op.kind;
    r.rank = op.counter.rank;
    r.rail = rail_of(op.counter.rank);
    use_device_of(r.rank);
    r.stream = -1;
    try {
      r.message = std::make_unique<cuda_detail::Message>(
          cuda_detail::map_message(program, op, /*sender=*/false, fabric));
    } catch (...) {
      rethrow_with_op(i);
    }
    receives.push_back(std::move(r));
    order.push_back(-static_cast<int>(receives.size()));
  }

  [[noreturn]] void rethrow_with_op(int i) const;

  std::size_t totals_size() const {
    return std::max<std::size_t>(1, static_cast<std::size_t>(program.ranks) * counter_words);
  }

  // Reads the profiling events of a completed run into `stats`.
  void collect_profile(CudaRunResult& stats) const {
    // Times between events are only defined on one device: each stream's span is measured
    // from the earliest stream head of its device.
    std::map<int, cudaEvent_t> origin;  // device -> earliest head
    for (std::size_t i = 0; i < stream_events.size(); ++i) {
      const int d = fabric.device_of(stream_owner[i].first);
      const auto [it, fresh] = origin.emplace(d, stream_events[i].first);
      if (fresh) continue;
      float ms = 0;
      TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, it->second, stream_events[i].first));
      if (ms < 0) it->second = stream_events[i].first;
    }
    for (std::size_t i = 0; i < stream_events.size(); ++i) {
      cudaEvent_t o = origin.at(fabric.device_of(stream_owner[i].first));
      float begin = 0, end = 0;
      TIDE_CUDA_CHECK(cudaEventElapsedTime(&begin, o, stream_events[i].first));
      TIDE_CUDA_CHECK(cudaEventElapsedTime(&end, o, stream_events[i].second));
      stats.streams.push_back({stream_owner[i].first, stream_owner[i].second,
                               static_cast<double>(begin), static_cast<double>(end)});
    }
    for (std::size_t i = 0; i < kernel_events.size(); ++i) {
      const auto& [a, b] = kernel_events[i];
      if (a == nullptr) continue;
      float ms = 0;
      TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      const Op& op = program.ops[i];
      stats.kernels_timed.push_back({static_cast<int>(i), op.rank, op.kind,
                                     op.kind == OpKind::kCast ? op.ctas : std::max(1, op.ctas),
                                     static_cast<double>(ms)});
    }
  }

  std::string describe_timeout(double timeout_s, const std::vector<bool>& complete) const {
    // This run's additions to the local ranks' counters (host index as in `totals`).
    std::vector<std::uint64_t> values(totals_size(), 0);
    std::vector<bool> readable(values.size(), false);
    std::string read_error;
    for (int r : local_ranks) {
      const std::size_t first = static_cast<std::size_t>(r) * counter_words;
      // Synchronous and stream-less: the executor's streams may be stuck, and the words may
      // live on another device than the control stream.
      const cudaError_t sync = counter_words == 0
                                   ? cudaSuccess
                                   : cudaMemcpy(values.data() + first, fabric.signals(r),
                                                counter_words * 8, cudaMemcpyDeviceToHost);
      if (sync != cudaSuccess) {
        read_error = " (counters could not be read: " + cuda_status(sync) + ")";
        break;
      }
      for (std::size_t k = 0; k < counter_words; ++k)
        readable[first + k] = true;
    }
    std::string text = "CudaExecutor: the run did not complete within " +
                       std::to_string(timeout_s) + " s (fail-stop)" + read_error + ".";
    int streams_left = 0;
    std::string stream_list;
    for (std::size_t i = 0; i < complete.size(); ++i) {
      if (complete[i]) continue;
      if (++streams_left <= 16) {
        stream_list +=
            " (rank " + std::to_string(stream_owner[i].first) + ", '" + stream_name(i) + "')";
      }
    }
    text += " Incomplete streams: " + std::to_string(streams_left) + ":" + stream_list + ".";
    if (!read_error.empty()) return text;
    int unsatisfied = 0;
    std::string waits;
    for (std::size_t i = 0; i < program.ops.size(); ++i) {
      const Op& op = program.ops[i];
      if (op.kind != OpKind::kWait || !fabric.local(op.rank)) continue;
      const std::size_t c = counter_index(op.counter);
      if (!readable[c]) continue;
      const std::uint64_t have = values[c] - epoch * totals[c];  // this run's additions
      if (have >= static_cast<std::uint64_t>(op.value)) continue;
      if (++unsatisfied <= 16) {
        waits += "\n  " + op_where(program, static_cast<int>(i)) + "counter " +
                 std::to_string(op.counter.id) + " of rank " + std::to_string(op.counter.rank) +
                 " holds " + std::to_string(have) + " < " + std::to_string(op.value);
      }
    }
    text += " Unsatisfied waits: " + std::to_string(unsatisfied) +
            (unsatisfied > 16 ? " (first 16)" : "") + ":" + waits;
    return text;
  }
};

namespace {

// Rethrows the exception in flight with `prefix` added to its message, keeping its type.
[[noreturn]] void rethrow_with(const std::string& prefix) {
  try {
    throw;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(prefix + e.what());
  } catch (const Unsupported& e) {
    throw Unsupported(prefix + e.what());
  } catch (const CudaError& e) {
    throw CudaError(prefix + e.what());
  } catch (const std::exception& e) {
    throw CudaError(prefix + e.what());
  }
}

}  // namespace

void CudaExecutor::State::rethrow_with_op(int i) const {
  rethrow_with(op_where(program, i));
}

CudaExecutor::CudaExecutor(const Program& program, fabric::Fabric& fabric,
                           const CudaExecutorOptions& options)
    : state_(std::make_unique<State>(program, fabric, options)) {
  cuda_detail::check_program(program);
  if (options.batch_max_rows < 1) {
    throw InvalidArgument("CudaExecutor: batch_max_rows = " +
                          std::to_string(options.batch_max_rows) + " (need >= 1)");
  }
  if (options.copy_streams < 1 || options.copy_streams > 16) {
    throw InvalidArgument("CudaExecutor: copy_streams = " + std::to_string(options.copy_streams) +
                          " (need 1..16)");
  }
  if (fabric.ranks() != program.ranks) {
    throw InvalidArgument("CudaExecutor: the fabric has " + std::to_string(fabric.ranks()) +
                          " ranks, the program " + std::to_string(program.ranks) +
                          "; build the fabric from the program (VirtualFabric(program))");
  }
  if (fabric.signal_words() < program.counters) {
    throw InvalidArgument("CudaExecutor: the fabric has " + std::to_string(fabric.signal_words()) +
                          " signal words per rank, the program " +
                          std::to_string(program.counters) +
                          " counters; build the fabric from the program");
  }
  for (int r = 0; r < program.ranks; ++r) {
    if (!fabric.local(r)) continue;
    const program::BufferSizes& s = program.buffers[static_cast<std::size_t>(r)];
    auto too_small = [&](const Buffer& b, std::int64_t need) {
      if (fabric.bytes(b) < need) {
        throw InvalidArgument("CudaExecutor: the fabric's buffers of rank " + std::to_string(r) +
                              " are smaller than the program's; build the fabric from the program");
      }
    };
    too_small(Buffer{r, program::Space::kArena, 0}, s.arena_bytes);
    for (std::size_t i = 0; i < s.tensor_bytes.size(); ++i)
      too_small(Buffer{r, program::Space::kTensor, static_cast<int>(i)}, s.tensor_bytes[i]);
    for (std::size_t i = 0; i < s.output_bytes.size(); ++i)
      too_small(Buffer{r, program::Space::kOutput, static_cast<int>(i)}, s.output_bytes[i]);
  }

  State& st = *state_;
  st.use_device_of(-1);  // (rank -1: the fabric's first device) the control stream lives there
  (void)fabric::detail::driver();  // fail early when an entry point is missing
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&st.control, cudaStreamNonBlocking));
#if TIDE_HAS_CUDA_MEMCPY_BATCH
  if (options.batch_copies) {
    int driver = 0;
    TIDE_CUDA_CHECK(cudaDriverGetVersion(&driver));
    st.batch = driver >= 12080;  // the driver of CUDA 12.8 introduced the batch entry point
    // Device memory on both sides; the sources are read in stream order (after the ops
    // before the batch), and the copies may overlap with kernels (a hint). The location
    // hints only matter for managed memory; they name this device.
    st.batch_attrs.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    st.batch_attrs.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    st.batch_attrs.srcLocHint.type = cudaMemLocationTypeDevice;
    st.batch_attrs.srcLocHint.id = fabric.device();
    st.batch_attrs.dstLocHint = st.batch_attrs.srcLocHint;
  }
#endif

  st.counter_words = static_cast<std::size_t>(program.counters);
  for (int r = 0; r < program.ranks; ++r) {
    if (fabric.local(r)) st.local_ranks.push_back(r);
  }
  if (st.local_ranks.empty()) {
    throw InvalidArgument("CudaExecutor: the fabric runs none of the program's ranks here");
  }
  st.fill_local_signals(0);  // NOTE [fabric interface]: a barrier must follow across processes

  st.event_index.assign(
      static_cast<std::size_t>(program.ranks) * static_cast<std::size_t>(program.events), -1);
  std::map<std::pair<int, int>, int> stream_of;
  for (const Op& op : program.ops) {
    if (!fabric.local(op.rank)) continue;
    st.use_device_of(op.rank);  // its events and streams live on its device
    if (op.kind == OpKind::kEventRecord && st.event_index[st.event_slot(op)] < 0) {
      cudaEvent_t e = nullptr;
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      st.event_index[st.event_slot(op)] = static_cast<int>(st.events.size());
      st.events.push_back(e);
    }
    const auto key = std::pair{op.rank, op.stream};
    if (stream_of.count(key) == 0) {
      cudaStream_t s = nullptr;
      TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      stream_of.emplace(key, static_cast<int>(st.streams.size()));
      st.streams.push_back(s);
      st.stream_owner.push_back(key);
      cudaEvent_t e = nullptr;
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      st.done.push_back(e);
    }
  }
  st.ops.resize(program.ops.size());
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    if (!fabric.local(op.rank)) continue;  // another process runs it
    try {
      st.map_op(op, st.ops[i], stream_of.at(std::pair{op.rank, op.stream}));
    } catch (...) {
      rethrow_with(op_where(program, static_cast<int>(i)));
    }
  }
  st.schedule();
}

CudaExecutor::~CudaExecutor() = default;

const Program& CudaExecutor::program() const {
  return state_->program;
}

bool CudaExecutor::batching() const {
  return state_->batch;
}

namespace {

void check_range(const fabric::Fabric& fabric, const Buffer& buffer, std::int64_t offset,
                 std::int64_t bytes, const char* who) {
  if (!fabric.local(buffer.rank)) {
    throw InvalidArgument(std::string("CudaExecutor::") + who + ": rank " +
                          std::to_string(buffer.rank) + " runs in another process");
  }
  const std::int64_t size = fabric.bytes(buffer);
  if (offset < 0 || bytes < 0 || offset + bytes > size) {
    throw InvalidArgument(std::string("CudaExecutor::") + who + ": bytes [" +
                          std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                          ") do not fit the buffer's " + std::to_string(size) + " bytes");
  }
}

}  // namespace

void CudaExecutor::upload(const Buffer& buffer, std::span<const std::byte> bytes,
                          std::int64_t offset) {
  const auto n = static_cast<std::int64_t>(bytes.size());
  check_range(state_->fabric, buffer, offset, n, "upload");
  if (n == 0) return;
  TIDE_CUDA_CHECK(cudaSetDevice(state_->fabric.device_of(buffer.rank)));
  state_->current_device = -1;
  TIDE_CUDA_CHECK(cudaMemcpy(static_cast<std::byte*>(state_->fabric.pointer(buffer)) + offset,
                             bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
}

void CudaExecutor::fill(const Buffer& buffer, std::byte value) {
  check_range(state_->fabric, buffer, 0, 0, "fill");
  const std::int64_t n = state_->fabric.bytes(buffer);
  if (n == 0) return;
  TIDE_CUDA_CHECK(cudaSetDevice(state_->fabric.device_of(buffer.rank)));
  state_->current_device = -1;
  TIDE_CUDA_CHECK(cudaMemset(state_->fabric.pointer(buffer), std::to_integer<int>(value),
                             static_cast<std::size_t>(n)));
}

std::vector<std::byte> CudaExecutor::download(const Buffer& buffer) {
  check_range(state_->fabric, buffer, 0, 0, "download");
  const std::int64_t n = state_->fabric.bytes(buffer);
  std::vector<std::byte> out(static_cast<std::size_t>(n));
  if (n == 0) return out;
  TIDE_CUDA_CHECK(cudaSetDevice(state_->fabric.device_of(buffer.rank)));
  state_->current_device = -1;
  TIDE_CUDA_CHECK(cudaMemcpy(out.data(), state_->fabric.pointer(buffer),
                             static_cast<std::size_t>(n), cudaMemcpyDeviceToHost));
  return out;
}

CudaRunResult CudaExecutor::run(const CudaRunOptions& options) {
  State& st = *state_;
  const Program& program = st.program;
  if (st.stuck) {
    throw CudaError(
        "CudaExecutor: an earlier run left streams that could not be drained; "
        "this executor (and its fabric) cannot run again: restart the process");
  }
  if (!(options.timeout_s > 0.0)) {
    throw InvalidArgument("CudaExecutor::run: timeout_s = " + std::to_string(options.timeout_s) +
                          " (need > 0)");
  }
  st.current_device = -1;  // the caller may have made another device current
  st.use_device_of(-1);
  CudaRunResult stats;
  // Every stream is idle here (the previous run completed or was drained). Counters hold
  // epoch x totals unless a timeout forced them high.
  if (st.counters_dirty) {
    st.fill_local_signals(0);
    st.counters_dirty = false;
    st.epoch = 0;
    stats.counters_reset = true;
  }
  if (options.profile) st.make_profile_events();
  const Clock::time_point start = Clock::now();
  std::vector<bool> recorded(st.event_index.size(), false);
  std::vector<std::deque<int>> pending(st.streams.size());
  auto blocked = [&](int i) {
    const Op& op = program.ops[static_cast<std::size_t>(i)];
    return op.kind == OpKind::kEventWait && !recorded[st.event_slot(op)];
  };
  std::vector<bool> started;
  if (options.profile) started.assign(st.streams.size(), false);
  auto issue = [&](int i) {
    const Op& op = program.ops[static_cast<std::size_t>(i)];
    const Mapped& m = st.ops[static_cast<std::size_t>(i)];
    try {
      if (options.profile) {
        st.use_device_of(m.rank);
        cudaStream_t s = st.streams[static_cast<std::size_t>(m.stream)];
        if (!started[static_cast<std::size_t>(m.stream)]) {
          started[static_cast<std::size_t>(m.stream)] = true;
          TIDE_CUDA_CHECK(
              cudaEventRecord(st.stream_events[static_cast<std::size_t>(m.stream)].first, s));
        }
        const auto& ke = st.kernel_events[static_cast<std::size_t>(i)];
        if (ke.first != nullptr) TIDE_CUDA_CHECK(cudaEventRecord(ke.first, s));
        st.enqueue(m, stats);
        if (ke.second != nullptr) TIDE_CUDA_CHECK(cudaEventRecord(ke.second, s));
      } else {
        st.enqueue(m, stats);
      }
    } catch (...) {
      st.release_and_drain();
      rethrow_with(op_where(program, i));
    }
    if (op.kind == OpKind::kEventRecord) recorded[st.event_slot(op)] = true;
    return op.kind == OpKind::kEventRecord;
  };
  // Issues the heads of deferred streams while they are not blocked, until nothing moves.
  auto flush = [&]() {
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& q : pending) {
        while (!q.empty() && !blocked(q.front())) {
          moved = issue(q.front()) || moved;
          q.pop_front();
          ++stats.deferred_ops;
        }
      }
    }
  };
  for (const int index : st.order) {
    if (index < 0) {  // the receiving side of a message, on its rail stream
      try {
        st.enqueue(st.receives[static_cast<std::size_t>(-index - 1)], stats);
      } catch (...) {
        st.release_and_drain();
        rethrow_with("CudaExecutor: a message receive: ");
      }
      continue;
    }
    auto& q = pending[static_cast<std::size_t>(st.ops[static_cast<std::size_t>(index)].stream)];
    if ((!q.empty() || blocked(index)) && st.ops[static_cast<std::size_t>(index)].message) {
      // Messages must keep the global order (NOTE [rail messages]); a legal schedule never
      // defers an op, so this is a program the schedule could not place.
      st.release_and_drain();
      throw InvalidArgument(op_where(program, index) +
                            "a message op behind an unrecorded event: the program deadlocks");
    }
    if (!q.empty() || blocked(index)) {
      q.push_back(index);
      continue;
    }
    if (issue(index)) flush();
  }
  for (const auto& q : pending) {
    if (q.empty()) continue;
    const int i = q.front();
    st.release_and_drain();
    throw InvalidArgument(op_where(program, i) + "waits for event " +
                          std::to_string(program.ops[static_cast<std::size_t>(i)].event) +
                          " whose record can only be enqueued after this wait completes (an "
                          "event-wait cycle): the program deadlocks");
  }
  for (std::size_t i = 0; i < st.streams.size(); ++i) {
    st.use_device_of(st.stream_owner[i].first);
    if (options.profile) {
      if (!started[i]) TIDE_CUDA_CHECK(cudaEventRecord(st.stream_events[i].first, st.streams[i]));
      TIDE_CUDA_CHECK(cudaEventRecord(st.stream_events[i].second, st.streams[i]));
    }
    TIDE_CUDA_CHECK(cudaEventRecord(st.done[i], st.streams[i]));
  }
  stats.enqueue_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();

  std::vector<bool> complete;
  bool ok = false;
  try {
    ok = st.wait_all(options.timeout_s, &complete);
  } catch (...) {
    st.stuck = true;  // an asynchronous fault: the context is unusable
    st.fabric.release();
    throw;
  }
  if (!ok) {
    const std::string text = st.describe_timeout(options.timeout_s, complete);
    st.release_and_drain();
    throw ExecutionTimeout(text);
  }
  stats.wall_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  ++st.epoch;
  if (options.profile) st.collect_profile(stats);
  return stats;
}

std::int64_t CudaExecutor::device_bytes() const {
  std::int64_t bytes = 0;
  for (const Mapped& m : state_->ops) {
    if (m.table != nullptr)
      bytes += static_cast<std::int64_t>(m.table->host_runs().size() * sizeof(kernels::Level1Run));
  }
  return bytes;
}

}  // namespace tide::exec
