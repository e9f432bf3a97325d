// The CUDA sequence runner, step 2 of NOTE [CUDA call sequences]: one call onto the streams,
// with this call's pointers, alpha and accumulate, waits at host-known thresholds and event
// slots per call; under capture, waits as explicit batch-mem-op nodes.
#include <array>
#include <string>

#include "counter_add.hpp"
#include "cuda_driver.hpp"
#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/kernels/cast.hpp"
#include "tide/kernels/cuda_check.hpp"

namespace tide::exec {

using program::OpKind;
using sequence_detail::Capture;
using sequence_detail::Copy;
using sequence_detail::Ptr;
using sequence_detail::SeqOp;

namespace {

std::byte* at(const Ptr& p, const CudaCallBindings& b) {
  if (p.slot == sequence_detail::kFixed) return p.fixed;
  const void* base = p.slot == sequence_detail::kOutputSlot
                         ? b.output
                         : b.tensors[static_cast<std::size_t>(p.slot)];
  return const_cast<std::byte*>(static_cast<const std::byte*>(base)) + p.offset;
}

void copy(const Copy& c, const CudaCallBindings& b, cudaStream_t s) {
  if (c.flat) {
    TIDE_CUDA_CHECK(
        cudaMemcpyAsync(at(c.dst, b), at(c.src, b), c.width * c.rows, cudaMemcpyDeviceToDevice, s));
  } else {
    TIDE_CUDA_CHECK(cudaMemcpy2DAsync(at(c.dst, b), c.dpitch, at(c.src, b), c.spitch, c.width,
                                      c.rows, cudaMemcpyDeviceToDevice, s));
  }
}

}  // namespace

void CudaSequenceRunner::State::check_bindings(std::span<const CudaCallBindings> bindings) const {
  if (bindings.size() < static_cast<std::size_t>(ranks)) {
    throw InvalidArgument("CudaSequenceRunner: " + std::to_string(bindings.size()) +
                          " bindings for " + std::to_string(ranks) + " ranks");
  }
  const sequence_detail::Template& t = templates[static_cast<std::size_t>(call % sequence.period)];
  for (const int r : local_ranks) {
    const CudaCallBindings& b = bindings[static_cast<std::size_t>(r)];
    const int need = t.tensors[static_cast<std::size_t>(r)];
    if (static_cast<int>(b.tensors.size()) < need) {
      throw InvalidArgument("CudaSequenceRunner: rank " + std::to_string(r) + " binds " +
                            std::to_string(b.tensors.size()) + " tensors; the call reads " +
                            std::to_string(need));
    }
  }
}

// A wait for `threshold` on `word`: cuStreamWaitValue64, or under capture an explicit
// batch-mem-op node whose threshold is patched before every launch (NOTE [CUDA call
// sequences] 3); a threshold <= 0 is met already and enqueues nothing outside capture.
void CudaSequenceRunner::State::wait_value(cudaStream_t s, int rank, std::uint64_t* w,
                                           std::int64_t threshold, std::size_t total,
                                           std::int64_t value, Capture* capture) {
  if (capture == nullptr) {
    if (threshold <= 0) return;
    fabric::detail::check_driver(
        fabric::detail::driver().stream_wait_value64(
            reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(w),
            static_cast<cuuint64_t>(threshold), CU_STREAM_WAIT_VALUE_GEQ),
        "cuStreamWaitValue64");
    return;
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  std::size_t count = 0;
  TIDE_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, &graph, &deps, &edges, &count));
  if (status != cudaStreamCaptureStatusActive) {
    throw InternalError("CudaSequenceRunner: a stream left the capture");
  }
  CUstreamBatchMemOpParams op{};
  op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
  op.waitValue.address = reinterpret_cast<CUdeviceptr>(w);
  op.waitValue.value64 = static_cast<cuuint64_t>(threshold > 0 ? threshold : 0);
  op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  CUDA_BATCH_MEM_OP_NODE_PARAMS params{};
  params.ctx = context[static_cast<std::size_t>(rank)];
  params.count = 1;
  params.paramArray = &op;
  CUgraphNode node = nullptr;
  fabric::detail::check_driver(sequence_detail::graph_driver().add_batch_mem_op_node(
                                   &node, reinterpret_cast<CUgraph>(graph),
                                   reinterpret_cast<const CUgraphNode*>(deps), count, &params),
                               "cuGraphAddBatchMemOpNode");
  auto after = reinterpret_cast<cudaGraphNode_t>(node);
  TIDE_CUDA_CHECK(
      cudaStreamUpdateCaptureDependencies(s, &after, nullptr, 1, cudaStreamSetCaptureDependencies));
  capture->waits->push_back({node, capture->call, total, value, w, params.ctx});
}

void CudaSequenceRunner::State::enqueue_op(const SeqOp& m, std::int64_t e,
                                           const CudaCallBindings& b, float alpha, bool accumulate,
                                           const std::vector<std::int64_t>& base,
                                           Capture* capture) {
  if (m.empty && m.kind != OpKind::kRailPut) return;
  use_device_of(m.rank);
  cudaStream_t s = streams[static_cast<std::size_t>(m.stream)];
  switch (m.kind) {
    case OpKind::kCopy:
      for (const Copy& c : m.copies)
        copy(c, b, s);
      break;
    case OpKind::kRailPut:
      for (const Copy& c : m.copies)
        copy(c, b, s);
      cuda_detail::launch_counter_add(m.word, static_cast<std::uint64_t>(m.value), s);
      break;
    case OpKind::kSignal:
      cuda_detail::launch_counter_add(m.word, static_cast<std::uint64_t>(m.value), s);
      break;
    case OpKind::kWait:
      wait_value(s, m.rank, m.word, base[m.total] + m.value, m.total, m.value, capture);
      break;
    case OpKind::kEventRecord: {
      cudaEvent_t ev = event(e, m.rank, m.event);
      // Under capture an external record node first (later calls outside the graph wait for
      // it), then the captured record that orders this graph's own waits.
      if (capture != nullptr)
        TIDE_CUDA_CHECK(cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal));
      TIDE_CUDA_CHECK(cudaEventRecord(ev, s));
      break;
    }
    case OpKind::kEventWait: {
      const std::int64_t recorded = e - m.age;
      if (recorded < 0) break;  // refers to a call before the first: orders nothing
      const bool outside = capture != nullptr && recorded < capture->first_call;
      TIDE_CUDA_CHECK(cudaStreamWaitEvent(s, event(recorded, m.rank, m.event),
                                          outside ? cudaEventWaitExternal : 0));
      break;
    }
    case OpKind::kSum: {
      kernels::Level1SumArgs a = m.sum;
      std::array<const void*, kernels::kMaxLevel1Gradients> gradients{};
      for (std::size_t k = 0; k < m.gradient_slots.size(); ++k)
        gradients[k] = b.tensors[static_cast<std::size_t>(m.gradient_slots[k])];
      a.gradients = gradients.data();
      a.out = reinterpret_cast<float*>(at(m.out, b));
      if (a.num_staged > 0) a.staged = at(m.in, b);
      a.alpha = alpha;
      kernels::launch_level1_sum(a, s, m.tuning);
      break;
    }
    case OpKind::kLand: {
      kernels::LandingArgs a = m.land;
      a.out = reinterpret_cast<float*>(at(m.out, b));
      a.accumulate = accumulate;
      kernels::launch_landing(a, s);
      break;
    }
    case OpKind::kCast:
      kernels::launch_cast_fp32_to_bf16(reinterpret_cast<std::uint16_t*>(at(m.out, b)),
                                        reinterpret_cast<const float*>(at(m.in, b)), m.elems, s,
                                        m.ctas);
      break;
    case OpKind::kZero:
      if (m.zero_rows <= 1 || m.zero_pitch == m.zero_width) {
        TIDE_CUDA_CHECK(cudaMemsetAsync(at(m.out, b), 0, m.zero_width * m.zero_rows, s));
      } else {
        TIDE_CUDA_CHECK(
            cudaMemset2DAsync(at(m.out, b), m.zero_pitch, 0, m.zero_width, m.zero_rows, s));
      }
      break;
    case OpKind::kRelease:
      break;
  }
}

void CudaSequenceRunner::State::enqueue_call(std::int64_t e,
                                             std::span<const CudaCallBindings> bindings,
                                             float alpha, bool accumulate, cudaStream_t caller,
                                             const std::vector<std::int64_t>& base,
                                             Capture* capture) {
  const sequence_detail::Template& t = templates[static_cast<std::size_t>(e % sequence.period)];
  TIDE_CUDA_CHECK(cudaEventRecord(entry, caller));
  for (const int i : t.streams) {
    use_device_of(stream_rank[static_cast<std::size_t>(i)]);
    cudaStream_t s = streams[static_cast<std::size_t>(i)];
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(s, entry, 0));
    const int r = stream_rank[static_cast<std::size_t>(i)];
    if (r == options.gate_rank && options.gate_word != nullptr) {
      wait_value(s, r, const_cast<std::uint64_t*>(options.gate_word), 1,
                 sequence_detail::kConstantWait, 1, capture);
    }
  }
  for (const SeqOp& op : t.ops) {
    try {
      enqueue_op(op, e, bindings[static_cast<std::size_t>(op.rank)], alpha, accumulate, base,
                 capture);
    } catch (const std::exception& x) {
      throw CudaError("CudaSequenceRunner: call " + std::to_string(e) + ", rank " +
                      std::to_string(op.rank) + ", " + std::string(program::op_kind_name(op.kind)) +
                      ": " + x.what());
    }
  }
  for (const int i : t.streams) {
    use_device_of(stream_rank[static_cast<std::size_t>(i)]);
    TIDE_CUDA_CHECK(
        cudaEventRecord(done[static_cast<std::size_t>(i)], streams[static_cast<std::size_t>(i)]));
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(caller, done[static_cast<std::size_t>(i)], 0));
  }
}

void CudaSequenceRunner::State::advance(std::vector<std::int64_t>& base, std::int64_t e) const {
  const std::vector<std::int64_t>& add =
      templates[static_cast<std::size_t>(e % sequence.period)].additions;
  for (std::size_t i = 0; i < base.size(); ++i)
    base[i] += add[i];
}

void CudaSequenceRunner::enqueue(std::span<const CudaCallBindings> bindings, float alpha,
                                 bool accumulate, cudaStream_t caller) {
  State& s = *state_;
  if (s.released()) {
    throw CudaError(
        "CudaSequenceRunner: the sequence was aborted (its waits were released); no call can "
        "follow");
  }
  if (s.broken) {
    throw CudaError(
        "CudaSequenceRunner: an earlier call failed part-way through its enqueue; "
        "the sequence cannot continue");
  }
  s.check_bindings(bindings);
  try {
    enqueue_checked(bindings, alpha, accumulate, caller);
  } catch (...) {
    s.broken = true;
    throw;
  }
}

void CudaSequenceRunner::enqueue_checked(std::span<const CudaCallBindings> bindings, float alpha,
                                         bool accumulate, cudaStream_t caller) {
  State& s = *state_;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TIDE_CUDA_CHECK(cudaStreamIsCapturing(caller, &status));
  if (status == cudaStreamCaptureStatusActive) {
    // NOTE [CUDA call sequences] 4: into the caller's graph, the runner not advanced.
    if (s.captured.calls == 0) {
      s.captured.first_call = s.call;
      s.capture_totals = s.totals;
    }
    const std::int64_t e = s.captured.first_call + s.captured.calls;
    sequence_detail::Capture capture{s.captured.first_call, s.captured.calls, &s.captured.waits};
    s.enqueue_call(e, bindings, alpha, accumulate, caller, s.capture_totals, &capture);
    s.advance(s.capture_totals, e);
    ++s.captured.calls;
    return;
  }
  if (status != cudaStreamCaptureStatusNone) {
    throw InvalidArgument("CudaSequenceRunner: the caller stream's capture was invalidated");
  }
  if (s.options.replay_graphs) {
    sequence_detail::SlotGraph& g = s.graphs[static_cast<std::size_t>(s.call % s.q)];
    if (s.same_as_last(g, bindings, alpha, accumulate)) {
      if (g.exec == nullptr) s.capture_slot(g, bindings, alpha, accumulate);
      for (const CudaCapturedCalls::Wait& w : g.waits)
        s.patch(g.exec, w,
                w.total == sequence_detail::kConstantWait ? w.value : s.totals[w.total] + w.value);
      TIDE_CUDA_CHECK(cudaGraphLaunch(g.exec, caller));
      s.watch_call(s.call, caller);
      ++s.graph_launches;
      s.advance(s.totals, s.call);
      ++s.call;
      return;
    }
    State::drop(g);
    s.remember(g, bindings, alpha, accumulate);
  }
  s.enqueue_call(s.call, bindings, alpha, accumulate, caller, s.totals, nullptr);
  s.watch_call(s.call, caller);
  s.advance(s.totals, s.call);
  ++s.call;
}

}  // namespace tide::exec
