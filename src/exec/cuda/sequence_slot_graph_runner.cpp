// The runner's slot graph step, steps 3 and 6 of NOTE [CUDA call sequences] (docs/executor.md)
// and NOTE [slot graph policy]: replay graphs per event slot, re-pointed where a call binds
// fresh pointers; their waits follow the call on the device (nothing is patched per launch).
#include "sequence_slot_graph_runner.hpp"

#include <map>
#include <string>
#include <utility>

#include "graph_wait_budget.hpp"
#include "sequence_generations.hpp"
#include "sequence_slot_policy.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/landing.hpp"

namespace tide::exec::sequence_detail {

using program::OpKind;

// At construction: whether this runner's calls may wait in graphs (NOTE [graph wait budget]:
// graph waits spin in kernels, one per stream at a time; the streams of every runner whose
// calls may overlap on a device share one budget there), whether it keeps slot graphs, and the
// slots' generation words.
void SlotGraphRunner::set_up() {
  std::map<int, int> streams_per_device;
  for (const int r : devices_.stream_rank)
    ++streams_per_device[fixed_.fabric.device_of(r)];
  graphs_.budget_id = reinterpret_cast<std::uintptr_t>(&fixed_);  // the runner's State
  if (fixed_.one_shot) {
    // NOTE [one-shot programs]: every call on the stream path; no claim on the budget.
    graphs_.no_graph_waits = "a one-shot program (CudaExecutor) runs on the stream path";
  } else if (mapping_.has_messages && !mapping_.transport->capture_refusal().empty()) {
    // NOTE [CUDA call sequences] 6: messages a graph cannot hold.
    graphs_.no_graph_waits =
        "its calls send rail messages (NOTE [CUDA call sequences] 6) that cannot "
        "be captured: " +
        mapping_.transport->capture_refusal();
  } else {
    graphs_.no_graph_waits = GraphWaitBudget::process().claim(
        graphs_.budget_id, fixed_.options.graph_lane, streams_per_device);
  }
  if (graphs_.no_graph_waits.empty()) {
    graphs_.budget_claimed = true;
    // NOTE [CUDA call sequences] 6: slot graphs are decided per process; a caller's capture
    // is the caller's, alike on every rank.
    if (mapping_.has_messages && !mapping_.transport->per_process_refusal().empty()) {
      graphs_.no_slot_graphs = "no slot graphs (a caller's capture is taken): " +
                               mapping_.transport->per_process_refusal();
      fixed_.options.replay_graphs = false;
    }
  } else {
    fixed_.options.replay_graphs = false;
  }
  // Graph waits (NOTE [CUDA call sequences] 3): what Q calls add, the slots' generations.
  std::vector<std::vector<std::int64_t>> additions;
  for (const Template& t : mapping_.templates)
    additions.push_back(t.additions);
  graphs_.slot_period_additions = cuda_detail::slot_period_additions(additions, fixed_.q);
  devices_.use_device_of(fixed_.local_ranks.empty() ? 0 : fixed_.local_ranks[0]);
  TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&graphs_.generations),
                             static_cast<std::size_t>(fixed_.q) * 8));
  TIDE_CUDA_CHECK(cudaMemsetAsync(
      graphs_.generations, 0, static_cast<std::size_t>(fixed_.q) * 8,
      devices_.setup_stream(fixed_.local_ranks.empty() ? 0 : fixed_.local_ranks[0])));
  graphs_.graphs.resize(static_cast<std::size_t>(fixed_.q));
}

bool SlotGraphRunner::same_as(const SlotBindings& last, std::span<const CudaCallBindings> bindings,
                              float alpha, bool accumulate) const {
  if (!last.set || last.alpha != alpha || last.accumulate != accumulate) return false;
  for (const int r : fixed_.local_ranks) {
    const CudaCallBindings& b = bindings[static_cast<std::size_t>(r)];
    if (b.output != last.outputs[static_cast<std::size_t>(r)]) return false;
    if (b.tensors != last.tensors[static_cast<std::size_t>(r)]) return false;
  }
  return true;
}

void SlotGraphRunner::remember(SlotBindings& last, std::span<const CudaCallBindings> bindings,
                               float alpha, bool accumulate) const {
  last.set = true;
  last.alpha = alpha;
  last.accumulate = accumulate;
  last.tensors.assign(static_cast<std::size_t>(fixed_.ranks), {});
  last.outputs.assign(static_cast<std::size_t>(fixed_.ranks), nullptr);
  for (const int r : fixed_.local_ranks) {
    last.tensors[static_cast<std::size_t>(r)] = bindings[static_cast<std::size_t>(r)].tensors;
    last.outputs[static_cast<std::size_t>(r)] = bindings[static_cast<std::size_t>(r)].output;
  }
}

// An executable graph still in flight is freed by the driver when it completes. The slot's
// last bindings, run and capture count stay (NOTE [slot graph policy]).
void SlotGraphRunner::drop(SlotGraph& g) {
  if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
  if (g.graph != nullptr) (void)cudaGraphDestroy(g.graph);
  g.exec = nullptr;
  g.graph = nullptr;
  release_repoints(g);
  g.held = {};
}

void SlotGraphRunner::release_repoints(SlotGraph& g) {
  g.repoints.clear();
  g.repointable = false;
}

// Captures call `call` from the private origin stream into the slot's graph and instantiates
// it.
void SlotGraphRunner::capture(SlotGraph& g, std::int64_t call,
                              const std::vector<std::int64_t>& totals,
                              std::span<const CudaCallBindings> bindings, float alpha,
                              bool accumulate) {
  devices_.use_device_of(fixed_.local_ranks.empty() ? 0 : fixed_.local_ranks[0]);
  TIDE_CUDA_CHECK(cudaStreamBeginCapture(graphs_.origin, cudaStreamCaptureModeRelaxed));
  Capture capture{call, &g.repoints};
  try {
    enqueue_.call(call, bindings, alpha, accumulate, graphs_.origin, totals, &capture);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    (void)cudaStreamEndCapture(graphs_.origin, &partial);
    if (partial != nullptr) (void)cudaGraphDestroy(partial);
    release_repoints(g);
    throw;
  }
  const bool repointable = capture.repointable;
  if (!repointable) release_repoints(g);
  g.repointable = repointable;
  TIDE_CUDA_CHECK(cudaStreamEndCapture(graphs_.origin, &g.graph));
  TIDE_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
  ++g.captures;
  ++graphs_.graph_captures;
  remember(g.held, bindings, alpha, accumulate);
}

// NOTE [slot graph policy]: the call's step for its slot, and the launch where it is one.
bool SlotGraphRunner::run(std::int64_t call, const std::vector<std::int64_t>& totals,
                          std::span<const CudaCallBindings> bindings, float alpha, bool accumulate,
                          cudaStream_t caller) {
  const auto slot = static_cast<std::size_t>(call % fixed_.q);
  SlotGraph& g = graphs_.graphs[slot];
  SlotView v;
  v.graph = g.exec != nullptr;
  v.graph_same = v.graph && same_as(g.held, bindings, alpha, accumulate);
  v.seen = g.last.set;
  g.run = same_as(g.last, bindings, alpha, accumulate) ? g.run + 1 : 1;
  if (g.run > 1 << 30) g.run = 1 << 30;  // capture_run() never asks for more
  v.run = g.run;
  v.captures = g.captures;
  const bool repointable = v.graph ? g.repointable
                                   : mapping_.template_repointable[static_cast<std::size_t>(
                                         call % fixed_.sequence.period)] != 0;
  v.may_repoint = fixed_.options.repoint_graphs && !g.repoint_failed && repointable;
  remember(g.last, bindings, alpha, accumulate);
  switch (slot_step(v)) {
    case SlotStep::kReplay:
      break;
    case SlotStep::kRepoint:
      if (!repoint(g, call, bindings, alpha, accumulate)) {
        // Some nodes may hold this call's bindings already, others the last: the graph goes.
        g.repoint_failed = true;
        drop(g);
        return false;
      }
      ++graphs_.repointed_launches;
      remember(g.held, bindings, alpha, accumulate);
      break;
    case SlotStep::kCapture:
      drop(g);
      capture(g, call, totals, bindings, alpha, accumulate);
      break;
    case SlotStep::kStream:
      return false;
  }
  enqueue_.order_after_previous(caller);
  TIDE_CUDA_CHECK(cudaGraphLaunch(g.exec, caller));
  enqueue_.mark_done(caller);
  watcher_.record(call, caller);
  ++graphs_.graph_launches;
  return true;
}

// Patches the nodes of the slot's graph whose bindings differ from its last call's: 1-D copies,
// memsets and landings directly (cudaGraphExecMemcpyNodeSetParams1D,
// cudaGraphExecMemsetNodeSetParams, kernels::landing_launch), other kernels with the
// parameters their launcher computes for the new bindings (repoint_kernels).
bool SlotGraphRunner::repoint(SlotGraph& g, std::int64_t call,
                              std::span<const CudaCallBindings> bindings, float alpha,
                              bool accumulate) {
  if (!g.repointable || g.exec == nullptr) {  // slot_step() asks only where it is
    if (graphs_.repoint_failure.empty())
      graphs_.repoint_failure = "the slot graph was captured not repointable";
    return false;
  }
  const Template& t = mapping_.of_call(call);
  std::vector<char> changed(static_cast<std::size_t>(fixed_.ranks), 0);
  for (const int r : fixed_.local_ranks) {
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
      devices_.use_device_of(m.rank);
      err = cudaGraphExecKernelNodeSetParams(g.exec, rp.node, &p);
    } else {
      kernel_nodes.push_back(&rp);
      continue;
    }
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      graphs_.repoint_failure =
          std::string(program::op_kind_name(m.kind)) + ": " + cudaGetErrorName(err);
      return false;
    }
    ++graphs_.nodes_repointed;
  }
  return kernel_nodes.empty() ||
         repoint_kernels(g.exec, call, kernel_nodes, bindings, alpha, accumulate);
}

// Kernel nodes take the parameters their launcher computes (derived values such as alignment
// heads, or another instantiation of the kernel, included): the launches are captured on a
// scratch stream per device, and each captured node's parameters set into the slot graph's
// node (cudaGraphExecKernelNodeSetParams may change the function on the same device).
bool SlotGraphRunner::repoint_kernels(cudaGraphExec_t exec, std::int64_t call,
                                      const std::vector<const Repoint*>& nodes,
                                      std::span<const CudaCallBindings> bindings, float alpha,
                                      bool accumulate) {
  const Template& t = mapping_.of_call(call);
  std::size_t k = 0;
  while (k < nodes.size()) {
    const int rank = t.ops[nodes[k]->op].rank;
    const int device = fixed_.fabric.device_of(rank);
    devices_.use_device_of(rank);
    cudaStream_t& scr = graphs_.scratch[device];
    if (scr == nullptr) TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&scr, cudaStreamNonBlocking));
    TIDE_CUDA_CHECK(cudaStreamBeginCapture(scr, cudaStreamCaptureModeRelaxed));
    std::vector<std::pair<cudaGraphNode_t, cudaGraphNode_t>> pairs;  // (slot graph, scratch)
    bool ok = true;
    try {
      for (; k < nodes.size(); ++k) {
        const SeqOp& m = t.ops[nodes[k]->op];
        if (fixed_.fabric.device_of(m.rank) != device) break;
        enqueue_.launch_kernel_op(m, bindings[static_cast<std::size_t>(m.rank)], alpha, accumulate,
                                  scr);
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        const cudaGraphNode_t* deps = nullptr;
        std::size_t count = 0;
        TIDE_CUDA_CHECK(
            cudaStreamGetCaptureInfo(scr, &status, nullptr, nullptr, &deps, nullptr, &count));
        if (count != 1) {
          graphs_.repoint_failure =
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
        graphs_.repoint_failure = std::string("kernel node update: ") + cudaGetErrorName(err);
        ok = false;
        break;
      }
      ++graphs_.nodes_repointed;
    }
    (void)cudaGraphDestroy(launches);
    if (!ok) return false;
  }
  return true;
}

}  // namespace tide::exec::sequence_detail
