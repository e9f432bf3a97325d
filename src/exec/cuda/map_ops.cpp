// The CUDA executor, step 1 of NOTE [CUDA executor op mapping]: every op resolved at
// construction to device pointers, copy calls (per descriptor, pooled), counters and kernel
// arguments (NOTE [CUDA op resolution]); the rank's rail and copy-pool streams made on first
// use.
#include <algorithm>
#include <string>
#include <vector>

#include "executor_state.hpp"
#include "op_resolution.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

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
  stream_owner.push_back({rank, StreamOwner::Role::kRailMessages, 0});
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
    stream_owner.push_back({rank, StreamOwner::Role::kCopyPool, 0});
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

void CudaExecutor::State::map_op(const Op& op, Mapped& m, int stream) {
  use_device_of(op.rank);  // Level 1 tables and message staging live on the rank's device
  m.kind = op.kind();
  m.rank = op.rank;
  m.stream = stream;
  if (cuda_detail::is_message(op, fabric)) {
    m.message = std::make_unique<cuda_detail::Message>(
        cuda_detail::map_message(op, /*sender=*/true, fabric));
    m.rail = rail_of(op.rank);
    return;
  }
  // NOTE [CUDA op resolution] with fixed pointers: every region resolved now.
  struct FixedResolver {
    const State& st;
    const Op& op;
    Mapped& m;
    std::byte* address(const Region& r) const { return st.at(r); }
    std::byte* fixed(const Region& r) const { return st.at(r); }
    void gradient(int param) const {
      m.gradients.push_back(st.fabric.pointer(Buffer{op.rank, program::Space::kTensor, param}));
    }
  } resolver{*this, op, m};
  cuda_detail::resolve_payload(op, resolver, m);
  if (op.is<program::CopyOp>() || op.is<program::RailPutOp>()) map_pool(op, m);
  if (const auto use = program::counter_use_of(op)) {
    m.counter = counter(use->counter);
    m.counter_index = counter_index(use->counter);
    m.value = static_cast<std::uint64_t>(use->value);
  } else if (const int* event = program::event_of(op)) {
    m.event = event_index[event_slot(op.rank, *event)];
  } else if (const auto* sum = op.get_if<program::SumOp>(); sum != nullptr && !m.empty) {
    m.sum.out = reinterpret_cast<float*>(m.out);
    if (m.sum.num_staged > 0) m.sum.staged = m.in;
    m.sum.alpha = sum->alpha;
  } else if (const auto* land = op.get_if<program::LandOp>()) {
    m.land.out = reinterpret_cast<float*>(m.out);
    m.land.accumulate = land->accumulate;
  }
}

}  // namespace tide::exec
