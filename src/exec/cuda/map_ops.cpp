// The CUDA executor, step 1 of NOTE [CUDA executor op mapping]: every op resolved at
// construction to device pointers, copy calls (per descriptor, pooled), counters and kernel
// arguments; the rank's rail and copy-pool streams made on first use.
#include <algorithm>
#include <string>
#include <vector>

#include "executor_state.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/kernels/cuda_check.hpp"

namespace tide::exec {

// The rank's rail stream (messages), created on first use.
int CudaExecutor::State::rail_of(int rank) {
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

std::byte* CudaExecutor::State::at(const Region& r) const {
  auto* p = static_cast<std::byte*>(fabric.pointer(r.buffer));
  if (p == nullptr && r.bytes() > 0) {
    throw Unsupported("a buffer of rank " + std::to_string(r.buffer.rank) +
                      " is not addressable from this process (not a load/store peer); "
                      "rail transfers to other hosts need the NCCL send/receive path, "
                      "which is not built yet (docs/nccl_fabric.md)");
  }
  return p + r.offset;
}

std::uint64_t* CudaExecutor::State::counter(const program::Counter& c) const {
  std::uint64_t* words = fabric.signals(c.rank);
  if (words == nullptr) {
    throw Unsupported("the signal words of rank " + std::to_string(c.rank) +
                      " are not addressable from this process (not a load/store peer)");
  }
  return words + c.id;
}

// NOTE [copy-engine pool]
// With CudaExecutorOptions::copy_streams = k > 1, a copy op (kCopy, kRailPut) of two or more
// descriptors deals its descriptors over its own stream and up to k - 1 pool streams of its
// rank (Sec. 6.2: descriptor batches over a small stream pool, so that several copy engines
// work on one op): largest first, each to the least-loaded lane by bytes. Synchronisation:
// the op's stream records `fork`; each pool stream used waits for it, issues its share and
// records its `join`; the op's stream waits for every join before anything that follows the
// op (a kRailPut's counter addition included). A rank's pool streams are shared by its
// program streams and fed in the one enqueue order (NOTE [enqueue order]), so a pool stream
// only ever waits for forks already enqueued.
std::vector<int>& CudaExecutor::State::pool_of(int rank) {
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

void CudaExecutor::State::map_pool(const Op& op, Mapped& m) {
  const int lanes = std::min<int>(options.copy_streams, static_cast<int>(m.copies.size()));
  if (lanes < 2) return;
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

void CudaExecutor::State::map_copies(const Op& op, Mapped& m) const {
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
}

void CudaExecutor::State::map_sum(const Op& op, Mapped& m) const {
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

void CudaExecutor::State::map_op(const Op& op, Mapped& m, int stream) {
  use_device_of(op.rank);  // Level 1 tables and message staging live on the rank's device
  m.kind = op.kind;
  m.rank = op.rank;
  m.stream = stream;
  if (cuda_detail::is_message(op, fabric)) {
    m.message = std::make_unique<cuda_detail::Message>(
        cuda_detail::map_message(op, /*sender=*/true, fabric));
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

}  // namespace tide::exec
