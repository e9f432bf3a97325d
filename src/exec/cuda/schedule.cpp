// The CUDA executor's enqueue order (NOTE [enqueue order]) and where message receives go.
#include <algorithm>
#include <string>
#include <vector>

#include "executor_state.hpp"
#include "tide/core/error.hpp"
#include "tide/program/legal_order.hpp"

namespace tide::exec {

// NOTE [enqueue order]
// Streams share a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), each executed in
// submission order, and a cuStreamWaitValue64 stalls its whole queue. Enqueuing a wait
// before the signal it needs could then deadlock two aliased streams. So the executor
// enqueues in a legal serial schedule (NOTE [legal order]), computed once here. Every op's
// dependencies are then submitted
// before it, and no aliasing can block it. Ops the simulation cannot place (a wait that can
// never be satisfied) follow in program order, so the run-time timeout names them.
// Every rank's ops are simulated (a local wait may need a remote rank's signal); only the
// local ranks' ops enter `order`. Each process's order is the global schedule filtered to
// its ranks, so no process submits a wait before the local signals it needs.
void CudaExecutor::State::schedule() {
  // NOTE [legal order]: the one host simulation of counters and events.
  const program::LegalOrder legal = program::legal_order(program);
  order.clear();
  order.reserve(program.ops.size());
  for (const int i : legal.order)
    place(i);
  for (const int i : legal.unplaced)
    place(i);
  // What one run adds to every counter, placed or not (the epochs of NOTE [CUDA executor op
  // mapping]).
  counters.totals.assign(totals_size(), 0);
  for (const Op& op : program.ops) {
    if (const auto add = program::addition_of(op))
      counters.totals[counter_index(add->counter)] += static_cast<std::uint64_t>(add->value);
  }
}

// Appends op i to `order` where this process runs it: the op itself on its local rank, and
// the receiving side of a message to a local rank (NOTE [rail messages]).
void CudaExecutor::State::place(int i) {
  const Op& op = program.ops[static_cast<std::size_t>(i)];
  if (fabric.local(op.rank)) order.push_back(i);
  if (!cuda_detail::is_message(op, fabric)) return;
  const int receiver = program::counter_of(op)->rank;  // a message is a put or a signal
  if (!fabric.local(receiver)) return;
  if (fabric.local(op.rank)) {
    throw InternalError(cuda_detail::op_where(program, i) +
                        "a message between two ranks of one process");
  }
  Mapped r;
  r.kind = op.kind();
  r.rank = receiver;
  r.rail = rail_of(receiver);
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
