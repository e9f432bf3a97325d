// The CUDA executor: one op onto its stream(s) (NOTE [CUDA executor op mapping]): copies
// (per descriptor or pooled), counter additions, stream waits, events, kernels.
#include <algorithm>
#include <string>
#include <vector>

#include "counter_add.hpp"
#include "cuda_driver.hpp"
#include "executor_state.hpp"
#include "op_resolution.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/cast.hpp"

namespace tide::exec {

// Enqueues one op on its stream. Throws with the CUDA error; the caller adds the op.
void CudaExecutor::State::enqueue(const Mapped& m, CudaRunResult& stats) {
  use_device_of(m.rank);
  if (m.message) {
    cudaStream_t rail = streams[static_cast<std::size_t>(m.rail)];
    cudaStream_t own = m.stream >= 0 ? streams[static_cast<std::size_t>(m.stream)] : rail;
    cuda_detail::FabricTransport transport(fabric);
    cuda_detail::enqueue_message(*m.message, transport, rail, own, token);
    stats.copies += static_cast<std::int64_t>(m.message->parts.size());
    return;
  }
  if (m.empty && m.kind != OpKind::kRailPut) return;
  cudaStream_t s = streams[static_cast<std::size_t>(m.stream)];
  const auto& d = fabric::detail::driver();
  const std::uint64_t base =
      counters.epoch * (m.counter != nullptr ? counters.totals[m.counter_index] : 0);
  switch (m.kind) {
    case OpKind::kCopy:
    case OpKind::kRailPut:
      if (!m.lane.empty()) {
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
      fabric::detail::check_driver(d.stream_wait_value64(reinterpret_cast<CUstream>(s),
                                                         reinterpret_cast<CUdeviceptr>(m.counter),
                                                         base + m.value, CU_STREAM_WAIT_VALUE_GEQ),
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
      kernels::launch_cast_fp32_to_bf16(reinterpret_cast<std::uint16_t*>(m.out),
                                        reinterpret_cast<const float*>(m.in), m.elems, s, m.ctas);
      ++stats.kernels;
      break;
    case OpKind::kZero:
      cuda_detail::enqueue_zero(m, m.out, s);
      break;
    case OpKind::kRelease:
      break;
  }
}

void CudaExecutor::State::enqueue_copy(const CopyCall& c, cudaStream_t s, CudaRunResult& stats) {
  cuda_detail::enqueue_copy(c, c.dst, c.src, s);
  ++stats.copies;
  ++stats.copy_calls;
}

// An op's copies dealt over its stream and pool streams (NOTE [copy-engine pool]).
void CudaExecutor::State::enqueue_pooled(const Mapped& m, cudaStream_t own, CudaRunResult& stats) {
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

}  // namespace tide::exec
