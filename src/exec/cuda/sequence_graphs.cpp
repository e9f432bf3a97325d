// The CUDA sequence runner's entry points for a caller's capture, step 4 of NOTE [CUDA call
// sequences] (docs/executor.md): the calls captured into a caller's graph taken, checked
// before a launch of that graph and accounted for as calls (prepare_replay), and the order of a
// caller stream after the previous call. The runner's own slot graphs (step 3) are
// SlotGraphRunner's (sequence_slot_graph_runner.cpp).
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

namespace tide::exec {

CudaCapturedCalls CudaSequenceRunner::take_captured() {
  std::lock_guard lock(state_->mutex);
  CudaCapturedCalls out = std::move(state_->slot_graphs.captured);
  state_->slot_graphs.captured = {};
  return out;
}

void CudaSequenceRunner::check_replay(const CudaCapturedCalls& calls) const {
  std::lock_guard lock(state_->mutex);
  check_replay_locked(calls);
}

void CudaSequenceRunner::check_replay_locked(const CudaCapturedCalls& calls) const {
  const State& s = *state_;
  if (s.watcher.released()) {
    throw CudaError(
        "CudaSequenceRunner: the sequence was aborted (its waits were released); a captured "
        "graph of its calls cannot be launched");
  }
  if (s.broken) {
    throw CudaError("CudaSequenceRunner: an earlier call failed part-way through its enqueue");
  }
  if (calls.calls > 0 && (s.call - calls.first_call) % s.q != 0) {
    throw InvalidArgument("CudaSequenceRunner: a captured graph of calls from index " +
                          std::to_string(calls.first_call) + " cannot run as call " +
                          std::to_string(s.call) + ": the call index must be congruent mod " +
                          std::to_string(s.q) +
                          " (templates, banks and event slots repeat with that period); "
                          "capture a multiple of that many calls or issue calls to align");
  }
}

void CudaSequenceRunner::prepare_replay(const CudaCapturedCalls& calls) {
  std::lock_guard lock(state_->mutex);
  check_replay_locked(calls);
  State& s = *state_;
  for (int k = 0; k < calls.calls; ++k) {
    s.enqueue.count_messages(s.call);
    s.mapping.advance(s.totals, s.call);
    ++s.call;
  }
}

void CudaSequenceRunner::order_after_previous(cudaStream_t caller) {
  // Under a capture an event recorded outside it cannot be waited for: a caller's graph is
  // ordered by the stream it is launched on (NOTE [CUDA call sequences] 4).
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TIDE_CUDA_CHECK(cudaStreamIsCapturing(caller, &status));
  std::lock_guard lock(state_->mutex);
  if (status == cudaStreamCaptureStatusNone) state_->enqueue.order_after_previous(caller);
}

}  // namespace tide::exec
