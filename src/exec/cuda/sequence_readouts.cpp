// The sequence runner's read-outs (include/tide/exec/cuda_sequence.hpp): what construction
// fixed, read as is, and what calls change, read under the runner's lock (NOTE [CUDA call
// sequences] 6).
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "graph_wait_budget.hpp"
#include "sequence_state.hpp"

namespace tide::exec {

std::int64_t CudaSequenceRunner::calls() const {
  std::lock_guard lock(state_->mutex);
  return state_->call;
}
int CudaSequenceRunner::event_slots() const {
  return state_->q;  // fixed at construction
}
std::int64_t CudaSequenceRunner::messages_sent() const {
  std::lock_guard lock(state_->mutex);
  return state_->enqueue.messages_sent;
}
std::int64_t CudaSequenceRunner::message_bytes_sent() const {
  std::lock_guard lock(state_->mutex);
  return state_->enqueue.message_bytes_sent;
}
std::string CudaSequenceRunner::one_sided_refusal() const {
  return state_->mapping.one_sided_refusal;  // fixed at construction
}
std::string CudaSequenceRunner::message_path() const {
  return state_->mapping.has_messages ? state_->mapping.transport->path()
                                      : "";  // fixed at construction
}

std::uint64_t new_graph_lane() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

int CudaSequenceRunner::graph_wait_streams(int device) {
  return sequence_detail::GraphWaitBudget::process().resident(device);
}

std::int64_t CudaSequenceRunner::graph_launches() const {
  std::lock_guard lock(state_->mutex);
  return state_->slot_graphs.graph_launches;
}
std::int64_t CudaSequenceRunner::graph_captures() const {
  std::lock_guard lock(state_->mutex);
  return state_->slot_graphs.graph_captures;
}
std::string CudaSequenceRunner::graphs_unavailable() const {
  // Fixed at construction.
  return state_->slot_graphs.no_graph_waits.empty() ? state_->slot_graphs.no_slot_graphs
                                                    : state_->slot_graphs.no_graph_waits;
}
std::string CudaSequenceRunner::repoint_failure() const {
  std::lock_guard lock(state_->mutex);
  return state_->slot_graphs.repoint_failure;
}
std::int64_t CudaSequenceRunner::nodes_repointed() const {
  std::lock_guard lock(state_->mutex);
  return state_->slot_graphs.nodes_repointed;
}
std::int64_t CudaSequenceRunner::repointed_launches() const {
  std::lock_guard lock(state_->mutex);
  return state_->slot_graphs.repointed_launches;
}

double CudaSequenceRunner::message_ops() const {
  double n = 0;
  for (const sequence_detail::Template& t : state_->mapping.templates)
    for (const sequence_detail::SeqOp& m : t.ops)
      n += m.message ? 1 : 0;
  return n / static_cast<double>(std::max<std::size_t>(1, state_->mapping.templates.size()));
}

CudaSequenceCounts CudaSequenceRunner::counts() const {
  CudaSequenceCounts c;
  for (const sequence_detail::Template& t : state_->mapping.templates) {
    for (const sequence_detail::SeqOp& m : t.ops) {
      if (m.empty) continue;
      c.ops += 1;
      c.copies += static_cast<double>(m.copies.size());
      switch (m.kind) {
        case program::OpKind::kWait:
          c.wait_ops += 1;
          c.wait_terms += static_cast<double>(std::max<std::size_t>(1, m.waits.size()));
          break;
        case program::OpKind::kSignal:
        case program::OpKind::kRailPut:
          c.signal_ops += 1;
          c.signal_terms += static_cast<double>(std::max<std::size_t>(1, m.adds.size()));
          break;
        case program::OpKind::kSum:
        case program::OpKind::kLand:
        case program::OpKind::kCast:
          c.kernels += 1;
          break;
        case program::OpKind::kEventRecord:
        case program::OpKind::kEventWait:
          c.events += 1;
          break;
        default:
          break;
      }
    }
  }
  const auto n = static_cast<double>(std::max<std::size_t>(1, state_->mapping.templates.size()));
  for (double* v : {&c.ops, &c.copies, &c.wait_ops, &c.wait_terms, &c.signal_ops, &c.signal_terms,
                    &c.kernels, &c.events})
    *v /= n;
  return c;
}

}  // namespace tide::exec
