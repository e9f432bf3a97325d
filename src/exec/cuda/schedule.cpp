// The CUDA executor's enqueue order (NOTE [enqueue order]) and where message receives go.
#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "executor_state.hpp"
#include "tide/core/error.hpp"

namespace tide::exec {

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
void CudaExecutor::State::schedule() {
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
void CudaExecutor::State::place(int i) {
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
        cuda_detail::map_message(op, /*sender=*/false, fabric));
  } catch (...) {
    rethrow_with_op(i);
  }
  receives.push_back(std::move(r));
  order.push_back(-static_cast<int>(receives.size()));
}

}  // namespace tide::exec
