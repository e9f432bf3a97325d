// The CUDA sequence runner, steps 3-4 of NOTE [CUDA call sequences]: replay graphs per event
// slot and calls captured into a caller's graph, whose wait nodes are re-targeted before
// every launch.
#include <string>

#include "cuda_driver.hpp"
#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/kernels/cuda_check.hpp"

namespace tide::exec {

using sequence_detail::SlotGraph;

bool CudaSequenceRunner::State::same_as_last(const SlotGraph& g,
                                             std::span<const CudaCallBindings> bindings,
                                             float alpha, bool accumulate) const {
  if (!g.seen || g.alpha != alpha || g.accumulate != accumulate) return false;
  for (const int r : local_ranks) {
    const CudaCallBindings& b = bindings[static_cast<std::size_t>(r)];
    if (b.output != g.outputs[static_cast<std::size_t>(r)]) return false;
    if (b.tensors != g.tensors[static_cast<std::size_t>(r)]) return false;
  }
  return true;
}

void CudaSequenceRunner::State::remember(SlotGraph& g, std::span<const CudaCallBindings> bindings,
                                         float alpha, bool accumulate) const {
  g.seen = true;
  g.alpha = alpha;
  g.accumulate = accumulate;
  g.tensors.assign(static_cast<std::size_t>(ranks), {});
  g.outputs.assign(static_cast<std::size_t>(ranks), nullptr);
  for (const int r : local_ranks) {
    g.tensors[static_cast<std::size_t>(r)] = bindings[static_cast<std::size_t>(r)].tensors;
    g.outputs[static_cast<std::size_t>(r)] = bindings[static_cast<std::size_t>(r)].output;
  }
}

// An executable graph still in flight is freed by the driver when it completes.
void CudaSequenceRunner::State::drop(SlotGraph& g) {
  if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
  if (g.graph != nullptr) (void)cudaGraphDestroy(g.graph);
  g.exec = nullptr;
  g.graph = nullptr;
  g.waits.clear();
  g.seen = false;
}

// Captures the current call (index `call`) from the private origin stream into the slot's
// graph and instantiates it; the waits are patched by the caller before each launch.
void CudaSequenceRunner::State::capture_slot(SlotGraph& g,
                                             std::span<const CudaCallBindings> bindings,
                                             float alpha, bool accumulate) {
  use_device_of(local_ranks.empty() ? 0 : local_ranks[0]);
  TIDE_CUDA_CHECK(cudaStreamBeginCapture(origin, cudaStreamCaptureModeRelaxed));
  sequence_detail::Capture capture{call, 0, &g.waits};
  try {
    enqueue_call(call, bindings, alpha, accumulate, origin, totals, &capture);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    (void)cudaStreamEndCapture(origin, &partial);
    if (partial != nullptr) (void)cudaGraphDestroy(partial);
    g.waits.clear();
    throw;
  }
  TIDE_CUDA_CHECK(cudaStreamEndCapture(origin, &g.graph));
  TIDE_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
}

void CudaSequenceRunner::State::patch(cudaGraphExec_t exec, const CudaCapturedCalls::Wait& w,
                                      std::int64_t threshold) {
  CUstreamBatchMemOpParams op{};
  op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
  op.waitValue.address = reinterpret_cast<CUdeviceptr>(w.word);
  op.waitValue.value64 = static_cast<cuuint64_t>(threshold > 0 ? threshold : 0);
  op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  CUDA_BATCH_MEM_OP_NODE_PARAMS params{};
  params.ctx = static_cast<CUcontext>(w.context);
  params.count = 1;
  params.paramArray = &op;
  fabric::detail::check_driver(
      sequence_detail::graph_driver().exec_batch_mem_op_node_set_params(
          reinterpret_cast<CUgraphExec>(exec), static_cast<CUgraphNode>(w.node), &params),
      "cuGraphExecBatchMemOpNodeSetParams");
  ++waits_patched;
}

CudaCapturedCalls CudaSequenceRunner::take_captured() {
  CudaCapturedCalls out = std::move(state_->captured);
  state_->captured = {};
  return out;
}

void CudaSequenceRunner::prepare_replay(const CudaCapturedCalls& calls, cudaGraphExec_t exec) {
  State& s = *state_;
  if (s.broken) {
    throw CudaError("CudaSequenceRunner: an earlier call failed part-way through its enqueue");
  }
  if (calls.calls == 0) return;
  if ((s.call - calls.first_call) % s.q != 0) {
    throw InvalidArgument("CudaSequenceRunner: a captured graph of calls from index " +
                          std::to_string(calls.first_call) + " cannot run as call " +
                          std::to_string(s.call) + ": the call index must be congruent mod " +
                          std::to_string(s.q) +
                          " (templates, banks and event slots repeat with that period); "
                          "capture a multiple of that many calls or issue calls to align");
  }
  std::vector<std::int64_t> base = s.totals;
  std::size_t w = 0;
  for (int k = 0; k < calls.calls; ++k) {
    for (; w < calls.waits.size() && calls.waits[w].call == k; ++w) {
      const CudaCapturedCalls::Wait& x = calls.waits[w];
      s.patch(exec, x,
              x.total == sequence_detail::kConstantWait ? x.value : base[x.total] + x.value);
    }
    s.advance(base, s.call + k);
  }
  s.totals = std::move(base);
  s.call += calls.calls;
}

}  // namespace tide::exec
