// The CUDA sequence runner, steps 3-4 of NOTE [CUDA call sequences]: replay graphs per event
// slot, re-pointed where a call binds fresh pointers, and calls captured into a caller's
// graph; their waits follow the call on the device (nothing is patched per launch).
#include <atomic>
#include <map>
#include <string>
#include <utility>

#include "cuda_driver.hpp"
#include "graph_wait_budget.hpp"
#include "sequence_generations.hpp"
#include "sequence_slot_policy.hpp"
#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/landing.hpp"

namespace tide::exec {

using program::OpKind;
using sequence_detail::at;
using sequence_detail::Copy;
using sequence_detail::Repoint;
using sequence_detail::SeqOp;
using sequence_detail::SlotGraph;

// At construction: whether this runner's calls may wait in graphs (NOTE [graph wait budget]:
// graph waits spin in kernels, one per stream at a time; the streams of every runner whose
// calls may overlap on a device share one budget there), whether it keeps slot graphs, and the
// slots' generation words.
void CudaSequenceRunner::State::set_up_graph_waits() {
  std::map<int, int> streams_per_device;
  for (const int r : devices.stream_rank)
    ++streams_per_device[fabric.device_of(r)];
  slot_graphs.budget_id = reinterpret_cast<std::uintptr_t>(this);
  if (one_shot) {
    // NOTE [one-shot programs]: every call on the stream path; no claim on the budget.
    slot_graphs.no_graph_waits = "a one-shot program (CudaExecutor) runs on the stream path";
  } else if (mapping.has_messages && !mapping.transport->capture_refusal().empty()) {
    // NOTE [CUDA call sequences] 6: messages a graph cannot hold.
    slot_graphs.no_graph_waits =
        "its calls send rail messages (NOTE [CUDA call sequences] 6) that cannot "
        "be captured: " +
        mapping.transport->capture_refusal();
  } else {
    slot_graphs.no_graph_waits = sequence_detail::GraphWaitBudget::process().claim(
        slot_graphs.budget_id, options.graph_lane, streams_per_device);
  }
  if (slot_graphs.no_graph_waits.empty()) {
    slot_graphs.budget_claimed = true;
    // NOTE [CUDA call sequences] 6: slot graphs are decided per process; a caller's capture
    // is the caller's, alike on every rank.
    if (mapping.has_messages && !mapping.transport->per_process_refusal().empty()) {
      slot_graphs.no_slot_graphs = "no slot graphs (a caller's capture is taken): " +
                                   mapping.transport->per_process_refusal();
      options.replay_graphs = false;
    }
  } else {
    options.replay_graphs = false;
  }
  // Graph waits (NOTE [CUDA call sequences] 3): what Q calls add, the slots' generations.
  std::vector<std::vector<std::int64_t>> additions;
  for (const sequence_detail::Template& t : mapping.templates)
    additions.push_back(t.additions);
  slot_graphs.slot_period_additions = cuda_detail::slot_period_additions(additions, q);
  devices.use_device_of(local_ranks.empty() ? 0 : local_ranks[0]);
  TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&slot_graphs.generations),
                             static_cast<std::size_t>(q) * 8));
  TIDE_CUDA_CHECK(cudaMemsetAsync(slot_graphs.generations, 0, static_cast<std::size_t>(q) * 8,
                                  devices.setup_stream(local_ranks.empty() ? 0 : local_ranks[0])));
  slot_graphs.graphs.resize(static_cast<std::size_t>(q));
}

bool CudaSequenceRunner::State::same_as(const sequence_detail::SlotBindings& last,
                                        std::span<const CudaCallBindings> bindings, float alpha,
                                        bool accumulate) const {
  if (!last.set || last.alpha != alpha || last.accumulate != accumulate) return false;
  for (const int r : local_ranks) {
    const CudaCallBindings& b = bindings[static_cast<std::size_t>(r)];
    if (b.output != last.outputs[static_cast<std::size_t>(r)]) return false;
    if (b.tensors != last.tensors[static_cast<std::size_t>(r)]) return false;
  }
  return true;
}

void CudaSequenceRunner::State::remember(sequence_detail::SlotBindings& last,
                                         std::span<const CudaCallBindings> bindings, float alpha,
                                         bool accumulate) const {
  last.set = true;
  last.alpha = alpha;
  last.accumulate = accumulate;
  last.tensors.assign(static_cast<std::size_t>(ranks), {});
  last.outputs.assign(static_cast<std::size_t>(ranks), nullptr);
  for (const int r : local_ranks) {
    last.tensors[static_cast<std::size_t>(r)] = bindings[static_cast<std::size_t>(r)].tensors;
    last.outputs[static_cast<std::size_t>(r)] = bindings[static_cast<std::size_t>(r)].output;
  }
}

// An executable graph still in flight is freed by the driver when it completes. The slot's
// last bindings, run and capture count stay (NOTE [slot graph policy]).
void CudaSequenceRunner::State::drop(SlotGraph& g) {
  if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
  if (g.graph != nullptr) (void)cudaGraphDestroy(g.graph);
  g.exec = nullptr;
  g.graph = nullptr;
  release_repoints(g);
  g.held = {};
}

void CudaSequenceRunner::State::release_repoints(SlotGraph& g) {
  g.repoints.clear();
  g.repointable = false;
}

// Captures the current call (index `call`) from the private origin stream into the slot's
// graph and instantiates it.
void CudaSequenceRunner::State::capture_slot(SlotGraph& g,
                                             std::span<const CudaCallBindings> bindings,
                                             float alpha, bool accumulate) {
  devices.use_device_of(local_ranks.empty() ? 0 : local_ranks[0]);
  TIDE_CUDA_CHECK(cudaStreamBeginCapture(slot_graphs.origin, cudaStreamCaptureModeRelaxed));
  sequence_detail::Capture capture{call, &g.repoints};
  try {
    enqueue.call(call, bindings, alpha, accumulate, slot_graphs.origin, totals, &capture);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    (void)cudaStreamEndCapture(slot_graphs.origin, &partial);
    if (partial != nullptr) (void)cudaGraphDestroy(partial);
    release_repoints(g);
    throw;
  }
  const bool repointable = capture.repointable;
  if (!repointable) release_repoints(g);
  g.repointable = repointable;
  TIDE_CUDA_CHECK(cudaStreamEndCapture(slot_graphs.origin, &g.graph));
  TIDE_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
  ++g.captures;
  ++slot_graphs.graph_captures;
  remember(g.held, bindings, alpha, accumulate);
}

// NOTE [slot graph policy]: the call's step for its slot, and the launch where it is one.
bool CudaSequenceRunner::State::run_slot_graph(std::span<const CudaCallBindings> bindings,
                                               float alpha, bool accumulate, cudaStream_t caller) {
  const auto slot = static_cast<std::size_t>(call % q);
  SlotGraph& g = slot_graphs.graphs[slot];
  sequence_detail::SlotView v;
  v.graph = g.exec != nullptr;
  v.graph_same = v.graph && same_as(g.held, bindings, alpha, accumulate);
  v.seen = g.last.set;
  g.run = same_as(g.last, bindings, alpha, accumulate) ? g.run + 1 : 1;
  if (g.run > 1 << 30) g.run = 1 << 30;  // capture_run() never asks for more
  v.run = g.run;
  v.captures = g.captures;
  const bool repointable =
      v.graph ? g.repointable
              : mapping.template_repointable[static_cast<std::size_t>(call % sequence.period)] != 0;
  v.may_repoint = options.repoint_graphs && !g.repoint_failed && repointable;
  remember(g.last, bindings, alpha, accumulate);
  switch (sequence_detail::slot_step(v)) {
    case sequence_detail::SlotStep::kReplay:
      break;
    case sequence_detail::SlotStep::kRepoint:
      if (!repoint(g, bindings, alpha, accumulate)) {
        // Some nodes may hold this call's bindings already, others the last: the graph goes.
        g.repoint_failed = true;
        drop(g);
        return false;
      }
      ++slot_graphs.repointed_launches;
      remember(g.held, bindings, alpha, accumulate);
      break;
    case sequence_detail::SlotStep::kCapture:
      drop(g);
      capture_slot(g, bindings, alpha, accumulate);
      break;
    case sequence_detail::SlotStep::kStream:
      return false;
  }
  enqueue.order_after_previous(caller);
  TIDE_CUDA_CHECK(cudaGraphLaunch(g.exec, caller));
  enqueue.mark_done(caller);
  watch_call(call, caller);
  ++slot_graphs.graph_launches;
  return true;
}

// Patches the nodes of the slot's graph whose bindings differ from its last call's: 1-D copies,
// memsets and landings directly (cudaGraphExecMemcpyNodeSetParams1D,
// cudaGraphExecMemsetNodeSetParams, kernels::landing_launch), other kernels with the
// parameters their launcher computes for the new bindings (repoint_kernels).
bool CudaSequenceRunner::State::repoint(SlotGraph& g, std::span<const CudaCallBindings> bindings,
                                        float alpha, bool accumulate) {
  if (!g.repointable || g.exec == nullptr) {  // slot_step() asks only where it is
    if (slot_graphs.repoint_failure.empty())
      slot_graphs.repoint_failure = "the slot graph was captured not repointable";
    return false;
  }
  const sequence_detail::Template& t = mapping.of_call(call);
  std::vector<char> changed(static_cast<std::size_t>(ranks), 0);
  for (const int r : local_ranks) {
    const CudaCallBindings& b = bindings[static_cast<std::size_t>(r)];
    changed[static_cast<std::size_t>(r)] =
        b.output != g.held.outputs[static_cast<std::size_t>(r)] ||
        b.tensors != g.held.tensors[static_cast<std::size_t>(r)];
  }
  const bool alpha_changed = alpha != g.held.alpha;
  const bool accumulate_changed = accumulate != g.held.accumulate;
  std::vector<const Repoint*> kernel_nodes;
  for (const Repoint& rp : g.repoints) {
    const SeqOp& m = t.ops[rp.op];
    const bool stale =
        changed[static_cast<std::size_t>(m.rank)] != 0 ||
        (m.kind == OpKind::kSum && (alpha_changed || (m.sum_into_output && accumulate_changed))) ||
        (m.kind == OpKind::kLand && accumulate_changed);
    if (!stale) continue;
    const CudaCallBindings& b = bindings[static_cast<std::size_t>(m.rank)];
    cudaError_t err = cudaSuccess;
    if (rp.copy >= 0) {
      const Copy& c = m.copies[static_cast<std::size_t>(rp.copy)];
      if (c.flat) {
        err = cudaGraphExecMemcpyNodeSetParams1D(g.exec, rp.node, at(c.dst, b), at(c.src, b),
                                                 c.width * c.rows, cudaMemcpyDeviceToDevice);
      } else {
        err = cudaErrorInvalidValue;  // a 2-D copy node: never recorded (not updatable)
      }
    } else if (m.kind == OpKind::kZero) {
      cudaMemsetParams p = rp.memset;
      p.dst = at(m.out, b);
      err = cudaGraphExecMemsetNodeSetParams(g.exec, rp.node, &p);
    } else if (m.kind == OpKind::kLand) {
      // The landing's launcher says what it would launch; no capture needed.
      kernels::LandingArgs a = m.land;
      a.out = reinterpret_cast<float*>(at(m.out, b));
      a.accumulate = accumulate;
      kernels::LandingLaunch launch = kernels::landing_launch(a);
      if (launch.empty) continue;  // nothing was captured for an empty landing either
      void* args[] = {&launch.params};
      cudaKernelNodeParams p{};
      p.func = const_cast<void*>(launch.kernel);
      p.gridDim = dim3(static_cast<unsigned>(launch.grid));
      p.blockDim = dim3(static_cast<unsigned>(launch.block));
      p.kernelParams = args;
      devices.use_device_of(m.rank);
      err = cudaGraphExecKernelNodeSetParams(g.exec, rp.node, &p);
    } else {
      kernel_nodes.push_back(&rp);
      continue;
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      slot_graphs.repoint_failure =
          std::string(program::op_kind_name(m.kind)) + ": " + cudaGetErrorName(err);
      return false;
    }
    ++slot_graphs.nodes_repointed;
  }
  return kernel_nodes.empty() || repoint_kernels(g.exec, kernel_nodes, bindings, alpha, accumulate);
}

// Kernel nodes take the parameters their launcher computes (derived values such as alignment
// heads, or another instantiation of the kernel, included): the launches are captured on a
// scratch stream per device, and each captured node's parameters set into the slot graph's
// node (cudaGraphExecKernelNodeSetParams may change the function on the same device).
bool CudaSequenceRunner::State::repoint_kernels(cudaGraphExec_t exec,
                                                const std::vector<const Repoint*>& nodes,
                                                std::span<const CudaCallBindings> bindings,
                                                float alpha, bool accumulate) {
  const sequence_detail::Template& t = mapping.of_call(call);
  std::size_t k = 0;
  while (k < nodes.size()) {
    const int rank = t.ops[nodes[k]->op].rank;
    const int device = fabric.device_of(rank);
    devices.use_device_of(rank);
    cudaStream_t& scr = slot_graphs.scratch[device];
    if (scr == nullptr) TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&scr, cudaStreamNonBlocking));
    TIDE_CUDA_CHECK(cudaStreamBeginCapture(scr, cudaStreamCaptureModeRelaxed));
    std::vector<std::pair<cudaGraphNode_t, cudaGraphNode_t>> pairs;  // (slot graph, scratch)
    bool ok = true;
    try {
      for (; k < nodes.size(); ++k) {
        const SeqOp& m = t.ops[nodes[k]->op];
        if (fabric.device_of(m.rank) != device) break;
        enqueue.launch_kernel_op(m, bindings[static_cast<std::size_t>(m.rank)], alpha, accumulate,
                                 scr);
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        const cudaGraphNode_t* deps = nullptr;
        std::size_t count = 0;
        TIDE_CUDA_CHECK(
            cudaStreamGetCaptureInfo(scr, &status, nullptr, nullptr, &deps, nullptr, &count));
        if (count != 1) {
          slot_graphs.repoint_failure =
              "a kernel launch captured as " + std::to_string(count) + " nodes";
          ok = false;
          ++k;
          break;
        }
        pairs.emplace_back(nodes[k]->node, deps[0]);
      }
    } catch (...) {
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(scr, &partial);
      if (partial != nullptr) (void)cudaGraphDestroy(partial);
      throw;
    }
    cudaGraph_t launches = nullptr;
    TIDE_CUDA_CHECK(cudaStreamEndCapture(scr, &launches));
    for (const auto& [target, source] : pairs) {
      if (!ok) break;
      cudaKernelNodeParams p{};
      cudaError_t err = cudaGraphKernelNodeGetParams(source, &p);
      if (err == cudaSuccess) err = cudaGraphExecKernelNodeSetParams(exec, target, &p);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        slot_graphs.repoint_failure = std::string("kernel node update: ") + cudaGetErrorName(err);
        ok = false;
        break;
      }
      ++slot_graphs.nodes_repointed;
    }
    (void)cudaGraphDestroy(launches);
    if (!ok) return false;
  }
  return true;
}

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
  if (s.released()) {
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
