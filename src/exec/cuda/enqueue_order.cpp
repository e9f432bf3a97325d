// NOTE [enqueue order] (enqueue_order.hpp): event waits deferred behind their records.
#include "enqueue_order.hpp"

#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "program_checks.hpp"
#include "tide/core/error.hpp"

namespace tide::exec::cuda_detail {

EnqueueOrder enqueue_order(const program::Program& program, std::span<const int> order,
                           std::span<const int> event_age,
                           const std::function<bool(const program::Op&)>& message) {
  using Key = std::pair<int, int>;  // (rank, stream) or (rank, event)
  EnqueueOrder out;
  out.ops.reserve(order.size());
  std::set<Key> recorded;
  std::map<Key, std::deque<int>> pending;
  const auto op_at = [&](int i) -> const program::Op& {
    return program.ops[static_cast<std::size_t>(i)];
  };
  const auto blocked = [&](int i) {
    const program::Op& op = op_at(i);
    const auto* wait = op.get_if<program::EventWaitOp>();
    const bool this_call = event_age.empty() || event_age[static_cast<std::size_t>(i)] == 0;
    return wait != nullptr && this_call && !recorded.contains({op.rank, wait->event});
  };
  // Step 2: submits op i; returns whether it recorded an event.
  const auto submit = [&](int i) {
    out.ops.push_back(i);
    const auto* record = op_at(i).get_if<program::EventRecordOp>();
    if (record != nullptr) recorded.insert({op_at(i).rank, record->event});
    return record != nullptr;
  };
  const auto flush = [&] {
    for (bool moved = true; moved;) {
      moved = false;
      for (auto& [key, q] : pending) {
        while (!q.empty() && !blocked(q.front())) {
          moved = submit(q.front()) || moved;
          q.pop_front();
          ++out.deferred;
        }
      }
    }
  };
  for (const int i : order) {  // step 1
    const program::Op& op = op_at(i);
    std::deque<int>& q = pending[{op.rank, op.stream}];
    if (message(op)) {
      if (!q.empty()) {  // step 3
        throw InvalidArgument(op_where(program, i) +
                              "a message op behind an unrecorded event: the program deadlocks");
      }
      submit(i);
      continue;
    }
    if (!q.empty() || blocked(i)) {
      q.push_back(i);
      continue;
    }
    if (submit(i)) flush();
  }
  for (const auto& [key, q] : pending) {  // step 3
    if (q.empty()) continue;
    const int i = q.front();
    throw InvalidArgument(op_where(program, i) + "waits for event " +
                          std::to_string(op_at(i).as<program::EventWaitOp>().event) +
                          " whose record can only be enqueued after this wait completes (an "
                          "event-wait cycle): the program deadlocks");
  }
  return out;
}

}  // namespace tide::exec::cuda_detail
