// The CUDA sequence runner, step 2 of NOTE [CUDA call sequences]: one call onto the streams,
// with this call's pointers, alpha and accumulate, waits at host-known thresholds and event
// slots per call; under capture, waits as kernels whose thresholds follow the slot's
// generation on the device (step 3).
#include <algorithm>
#include <array>
#include <string>

#include "cuda_driver.hpp"
#include "op_resolution.hpp"
#include "sequence_generations.hpp"
#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/cast.hpp"
#include "tide/kernels/signal/counter_add.hpp"

namespace tide::exec {

using program::OpKind;
using sequence_detail::at;
using sequence_detail::Capture;
using sequence_detail::Copy;
using sequence_detail::Ptr;
using sequence_detail::SeqOp;

// Under the capture of a slot graph: the node the copy or launch just captured on `s` carries
// caller pointers; remember it (NOTE [CUDA call sequences] 3).
void sequence_detail::Enqueue::record_node(cudaStream_t s, const SeqOp& m, std::size_t index,
                                           int copy_index, Capture* capture) {
  if (capture == nullptr || capture->repoints == nullptr || !capture->repointable) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  std::size_t count = 0;
  TIDE_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &deps, nullptr, &count));
  if (status != cudaStreamCaptureStatusActive || count != 1) {
    slot_graphs_.repoint_failure = std::string(program::op_kind_name(m.kind)) + ": captured as " +
                                   std::to_string(count) + " nodes";
    capture->repointable = false;
    return;
  }
  sequence_detail::Repoint r;
  r.node = deps[0];
  r.op = index;
  r.copy = copy_index;
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  TIDE_CUDA_CHECK(cudaGraphNodeGetType(r.node, &type));
  const bool fits = copy_index >= 0           ? type == cudaGraphNodeTypeMemcpy
                    : m.kind == OpKind::kZero ? type == cudaGraphNodeTypeMemset
                                              : type == cudaGraphNodeTypeKernel;
  if (!fits) {
    slot_graphs_.repoint_failure = std::string(program::op_kind_name(m.kind)) +
                                   ": captured as node type " +
                                   std::to_string(static_cast<int>(type));
    capture->repointable = false;
    return;
  }
  if (m.kind == OpKind::kZero) TIDE_CUDA_CHECK(cudaGraphMemsetNodeGetParams(r.node, &r.memset));
  capture->repoints->push_back(r);
}

void sequence_detail::Enqueue::launch_kernel_op(const SeqOp& m, const CudaCallBindings& b,
                                                float alpha, bool accumulate,
                                                cudaStream_t s) const {
  switch (m.kind) {
    case OpKind::kSum: {
      kernels::Level1SumArgs a = m.sum;
      std::array<const void*, kernels::kMaxLevel1Gradients> gradients{};
      for (std::size_t k = 0; k < m.gradient_slots.size(); ++k)
        gradients[k] = fixed_.one_shot || m.gradient_slots[k] < 0
                           ? m.fixed_gradients[k]
                           : b.tensors[static_cast<std::size_t>(m.gradient_slots[k])];
      a.gradients = gradients.data();
      a.out = reinterpret_cast<float*>(at(m.out, b));
      if (a.num_staged > 0) a.staged = at(m.in, b);
      if (!fixed_.one_shot) a.alpha = alpha;  // NOTE [one-shot programs]: else the program's
      if (!fixed_.one_shot && m.sum_into_output) a.accumulate = accumulate;
      kernels::launch_level1_sum(a, s, m.tuning);
      break;
    }
    case OpKind::kLand: {
      kernels::LandingArgs a = m.land;
      a.out = reinterpret_cast<float*>(at(m.out, b));
      if (!fixed_.one_shot) a.accumulate = accumulate;  // else the program's
      kernels::launch_landing(a, s);
      break;
    }
    case OpKind::kCast:
      kernels::launch_cast_fp32_to_bf16(reinterpret_cast<std::uint16_t*>(at(m.out, b)),
                                        reinterpret_cast<const float*>(at(m.in, b)), m.elems, s,
                                        m.ctas);
      break;
    default:
      throw InternalError("CudaSequenceRunner: not a kernel op");
  }
}

void sequence_detail::Enqueue::enqueue_op(const SeqOp& m, std::size_t index, std::int64_t e,
                                          const CudaCallBindings& b, float alpha, bool accumulate,
                                          const std::vector<std::int64_t>& base, Capture* capture) {
  if (m.empty) return;
  devices_.use_device_of(m.rank);
  cudaStream_t s = devices_.streams[static_cast<std::size_t>(m.stream)];
  if (m.message) {  // NOTE [CUDA call sequences] 6; under capture as on the stream path
    const transport::Message* message = m.message.get();
    transport::Message bound;  // the parts of caller memory at this call's pointers
    for (std::size_t k = 0; k < m.message_slots.size(); ++k) {
      if (m.message_slots[k].slot == sequence_detail::kFixed) continue;
      if (message != &bound) {
        bound = *m.message;  // shares its events and staging; never released itself
        message = &bound;
      }
      transport::MessagePart& part = bound.parts[k];
      (part.strided ? part.region : part.data) = at(m.message_slots[k], b);
    }
    // NOTE [CUDA call sequences] 3: a slot graph holding caller memory in a message is not
    // re-pointed (its transport's nodes take the pointers at capture).
    if (message == &bound && capture != nullptr && capture->repoints != nullptr &&
        capture->repointable) {
      capture->repointable = false;
      slot_graphs_.repoint_failure = sequence_detail::kMessageNotRepointed;
    }
    // NOTE [abort relay]: the receiver's addition counts only where the token says valid.
    transport::enqueue_message(*message, *mapping_.transport,
                               devices_.streams[static_cast<std::size_t>(m.rail)], s,
                               aborts_.relay_of(*message));
    return;
  }
  switch (m.kind) {
    case OpKind::kCopy:
    case OpKind::kRailPut:  // split by the fusion pass; kept for ops mapped but not fused
      enqueue_copies(m, index, b, s, capture);  // NOTE [copy-engine pool]
      if (m.kind == OpKind::kRailPut)
        kernels::launch_counter_add(m.word, static_cast<std::uint64_t>(m.value), s,
                                    aborts_.of(m.rank));
      break;
    case OpKind::kSignal: {
      std::array<kernels::CounterAdd, kernels::kMaxCounterAddsPerLaunch> adds{};
      // NOTE [CUDA call sequences] 5: none of them counts once the rank's abort word is set.
      if (m.adds.empty()) {
        kernels::launch_counter_add(m.word, static_cast<std::uint64_t>(m.value), s,
                                    aborts_.of(m.rank));
        break;
      }
      for (std::size_t first = 0; first < m.adds.size(); first += adds.size()) {
        const std::size_t n = std::min(adds.size(), m.adds.size() - first);
        for (std::size_t k = 0; k < n; ++k)
          adds[k] = {m.adds[first + k].word, static_cast<std::uint64_t>(m.adds[first + k].value)};
        kernels::launch_counter_adds(std::span(adds.data(), n), s, aborts_.of(m.rank));
      }
      break;
    }
    case OpKind::kWait:
      if (m.waits.empty()) {
        const sequence_detail::WaitTerm w{m.word, m.total, m.value};
        wait_terms(s, m.rank, e, std::span(&w, 1), base, capture);
      } else {
        wait_terms(s, m.rank, e, m.waits, base, capture);
      }
      break;
    case OpKind::kEventRecord: {
      cudaEvent_t ev = devices_.event(e, m.rank, m.event);
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
      TIDE_CUDA_CHECK(cudaStreamWaitEvent(s, devices_.event(recorded, m.rank, m.event),
                                          outside ? cudaEventWaitExternal : 0));
      break;
    }
    case OpKind::kSum:
    case OpKind::kLand:
    case OpKind::kCast: {
      // A profiled call (one-shot programs) times every kernel on its stream.
      const bool timed = profile.on && capture == nullptr && index < profile.ops.size() &&
                         profile.ops[index].first != nullptr;
      if (timed) TIDE_CUDA_CHECK(cudaEventRecord(profile.ops[index].first, s));
      launch_kernel_op(m, b, alpha, accumulate, s);
      if (timed) TIDE_CUDA_CHECK(cudaEventRecord(profile.ops[index].second, s));
      if (sequence_detail::carries_bindings(m)) record_node(s, m, index, -1, capture);
      break;
    }
    case OpKind::kZero:
      cuda_detail::enqueue_zero(m, at(m.out, b), s);
      if (sequence_detail::carries_bindings(m)) record_node(s, m, index, -1, capture);
      break;
    case OpKind::kRelease:
      break;
  }
}

void sequence_detail::Enqueue::call(std::int64_t e, std::span<const CudaCallBindings> bindings,
                                    float alpha, bool accumulate, cudaStream_t caller,
                                    const std::vector<std::int64_t>& base, Capture* capture) {
  const sequence_detail::Template& t = mapping_.of_call(e);
  // The slot's generation (NOTE [CUDA call sequences] 3), before anything of the call.
  devices_.use_device_of(fixed_.local_ranks.empty() ? 0 : fixed_.local_ranks[0]);
  kernels::launch_counter_add(slot_graphs_.generations + e % fixed_.q, 1, caller);
  if (fixed_.place.call_tag_word >= 0) {  // NOTE [CUDA call sequences] 7
    for (const int r : fixed_.local_ranks)
      kernels::launch_counter_add(fixed_.fabric.signals(r) + fixed_.place.call_tag_word,
                                  fixed_.place.call_tag, caller);
  }
  TIDE_CUDA_CHECK(cudaEventRecord(devices_.entry, caller));
  for (const int i : t.streams) {
    devices_.use_device_of(devices_.stream_rank[static_cast<std::size_t>(i)]);
    cudaStream_t s = devices_.streams[static_cast<std::size_t>(i)];
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(s, devices_.entry, 0));
    const int r = devices_.stream_rank[static_cast<std::size_t>(i)];
    const CudaSequenceFaultInjection& faults = fixed_.options.fault_injection;
    if (r == faults.gate_rank && faults.gate_word != nullptr) {
      const sequence_detail::WaitTerm gate{const_cast<std::uint64_t*>(faults.gate_word),
                                           sequence_detail::kConstantWait, 1};
      wait_terms(s, r, e, std::span(&gate, 1), base, capture);
    }
    if (profile.on && capture == nullptr) profile_head(static_cast<std::size_t>(i));
  }
  for (std::size_t k = 0; k < t.ops.size(); ++k) {
    const SeqOp& op = t.ops[k];
    try {
      enqueue_op(op, k, e, bindings[static_cast<std::size_t>(op.rank)], alpha, accumulate, base,
                 capture);
    } catch (const std::exception& x) {
      throw CudaError("CudaSequenceRunner: call " + std::to_string(e) + ", rank " +
                      std::to_string(op.rank) + ", " + std::string(program::op_kind_name(op.kind)) +
                      ": " + x.what());
    }
  }
  for (const int i : t.streams) {
    devices_.use_device_of(devices_.stream_rank[static_cast<std::size_t>(i)]);
    if (profile.on && capture == nullptr) profile_tail(static_cast<std::size_t>(i));
    TIDE_CUDA_CHECK(cudaEventRecord(devices_.done[static_cast<std::size_t>(i)],
                                    devices_.streams[static_cast<std::size_t>(i)]));
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(caller, devices_.done[static_cast<std::size_t>(i)], 0));
  }
  // NOTE [CUDA call sequences] 5: the call completes only while no other process's rank has
  // released its waits.
  if (aborts_.peer_check.watched_count > 0) {
    devices_.use_device_of(fixed_.local_ranks.empty() ? 0 : fixed_.local_ranks[0]);
    kernels::launch_abort_check(aborts_.peer_check, caller);
  }
}

void sequence_detail::Enqueue::order_after_previous(cudaStream_t caller) {
  if (called && last_caller != caller) TIDE_CUDA_CHECK(cudaStreamWaitEvent(caller, last_done, 0));
}

void sequence_detail::Enqueue::mark_done(cudaStream_t caller) {
  devices_.use_device_of(fixed_.local_ranks.empty() ? 0 : fixed_.local_ranks[0]);
  TIDE_CUDA_CHECK(cudaEventRecord(last_done, caller));
  last_caller = caller;
  called = true;
}

void sequence_detail::Enqueue::count_messages(std::int64_t e) {
  const sequence_detail::Template& t = mapping_.of_call(e);
  messages_sent += t.message_sends;  // under the call lock
  message_bytes_sent += t.message_bytes;
}

void CudaSequenceRunner::enqueue(std::span<const CudaCallBindings> bindings, float alpha,
                                 bool accumulate, cudaStream_t caller) {
  State& s = *state_;
  // NOTE [CUDA call sequences] 6: one call at a time, from any thread. A release may come
  // while the call is enqueued: the call is then void (first_void_call()) and its signals
  // count for nothing.
  std::lock_guard lock(s.mutex);
  s.devices.current_device = -1;  // the CUDA device is per thread
  if (s.watcher.released()) {
    throw CudaError(
        "CudaSequenceRunner: the sequence was aborted (its waits were released); no call can "
        "follow");
  }
  if (s.broken) {
    throw CudaError(
        "CudaSequenceRunner: an earlier call failed part-way through its enqueue; "
        "the sequence cannot continue");
  }
  s.mapping.check_bindings(bindings, s.call);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TIDE_CUDA_CHECK(cudaStreamIsCapturing(caller, &status));
  if (status == cudaStreamCaptureStatusInvalidated) {
    throw InvalidArgument("CudaSequenceRunner: the caller stream's capture was invalidated");
  }
  const bool capturing = status == cudaStreamCaptureStatusActive;
  if (capturing && !s.slot_graphs.no_graph_waits.empty()) {
    throw Unsupported("CudaSequenceRunner: calls of this sequence cannot be captured: " +
                      s.slot_graphs.no_graph_waits);
  }
  try {
    enqueue_checked(bindings, alpha, accumulate, caller);
  } catch (...) {
    // Under a caller's capture nothing reached the device and the runner did not advance:
    // the capture's record goes (that graph cannot be launched), the runner stays usable.
    if (capturing) {
      s.slot_graphs.captured = {};
    } else {
      s.broken = true;
    }
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

    unsigned long long id = 0;
    TIDE_CUDA_CHECK(cudaStreamGetCaptureInfo(caller, &status, &id));
    if (s.slot_graphs.captured.calls > 0 && id != s.slot_graphs.capture_id)
      s.slot_graphs.captured = {};  // an abandoned capture's
    s.slot_graphs.capture_id = id;
    if (s.slot_graphs.captured.calls == 0) {
      s.slot_graphs.captured.first_call = s.call;
      s.slot_graphs.capture_totals = s.totals;
    }
    const std::int64_t e = s.slot_graphs.captured.first_call + s.slot_graphs.captured.calls;
    sequence_detail::Capture capture{s.slot_graphs.captured.first_call};
    s.enqueue.call(e, bindings, alpha, accumulate, caller, s.slot_graphs.capture_totals, &capture);
    s.mapping.advance(s.slot_graphs.capture_totals, e);
    ++s.slot_graphs.captured.calls;
    return;
  }
  if (status != cudaStreamCaptureStatusNone) {
    throw InvalidArgument("CudaSequenceRunner: the caller stream's capture was invalidated");
  }
  // NOTE [CUDA call sequences] 3, NOTE [slot graph policy]: the slot's graph, replayed,
  // re-pointed or captured, where the policy says so; its waits follow on the device.
  if (s.options.replay_graphs &&
      s.graph_runner.run(s.call, s.totals, bindings, alpha, accumulate, caller)) {
    s.enqueue.count_messages(s.call);
    s.mapping.advance(s.totals, s.call);
    ++s.call;
    return;
  }
  s.enqueue.order_after_previous(caller);
  s.enqueue.call(s.call, bindings, alpha, accumulate, caller, s.totals, nullptr);
  s.enqueue.mark_done(caller);
  s.watcher.record(s.call, caller);
  s.enqueue.count_messages(s.call);
  s.mapping.advance(s.totals, s.call);
  ++s.call;
}

}  // namespace tide::exec
