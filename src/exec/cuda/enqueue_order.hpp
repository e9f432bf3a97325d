// The order in which the CUDA executor submits a call's ops (NOTE [enqueue order]): host-only,
// computed once per call template at construction.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "tide/program/program.hpp"

namespace tide::exec::cuda_detail {

// NOTE [enqueue order]
// Paper Sec. 6.2 (host submission); App. E (the happens-before edges the order must keep).
// Streams share a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), each executed in
// submission order, and a stream memory wait stalls its whole queue. Enqueuing a wait before
// the signal it needs could then deadlock two aliased streams. So the executor submits a call
// in a legal serial order of its template (NOTE [legal order]): every op's dependencies are
// submitted before it, and no aliasing can block it. Every rank's ops are simulated (a local
// wait may need a remote rank's signal); each process submits the global order filtered to
// the ops it holds, so no process submits a wait before the local signals it needs, and every
// process meets the rail messages in the same order (NOTE [rail messages]).
// Ops no legal order reaches (a wait that can never be satisfied: only a one-shot program
// may keep them, so that its timeout names them) follow in program order. Among those, an
// event wait of this call (age 0) must not be submitted before its record
// (cudaStreamWaitEvent on a not-yet-recorded event waits for nothing): such a wait and every
// later op of its stream are deferred until the record is submitted. Steps:
//   1. walk `order`; an op whose stream has deferred ops, or an age-0 event wait whose record
//      (same rank, same event) is not yet submitted, joins its stream's queue;
//   2. any other op is submitted; after a record, the queues' heads are submitted while they
//      are not blocked, until nothing moves;
//   3. a queue left at the end is an event-wait cycle, and a deferred message op would break
//      the one global order of the two-sided messages: both are program errors
//      (InvalidArgument naming the op).
// A legal order defers nothing; a call sequence's templates never defer.
struct EnqueueOrder {
  std::vector<int> ops;  // op indices, in submission order
  int deferred = 0;      // ops submitted after a later op (behind an event wait)
};

// `order`: the ops this process maps, a legal order then the unplaced ops. `event_age`: per op
// of `program`, how many calls back an event wait refers to (empty: all 0). `message`:
// whether an op travels as a rail message.
EnqueueOrder enqueue_order(const program::Program& program, std::span<const int> order,
                           std::span<const int> event_age,
                           const std::function<bool(const program::Op&)>& message);

}  // namespace tide::exec::cuda_detail
