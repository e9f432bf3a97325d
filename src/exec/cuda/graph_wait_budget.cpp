// NOTE [graph wait budget] (graph_wait_budget.hpp): the per-device registry of graph waits.
#include "graph_wait_budget.hpp"

#include <algorithm>

#include "tide/exec/cuda_sequence.hpp"

namespace tide::exec::sequence_detail {

// Never destroyed: runners freed during the process's exit (after static destructors ran)
// still release into it.
GraphWaitBudget& GraphWaitBudget::process() {
  static auto* budget = new GraphWaitBudget(CudaSequenceRunner::kMaxGraphWaitStreams);
  return *budget;
}

// Lane 0 is a lane of its own per runner: keyed apart from every real lane.
int GraphWaitBudget::resident_locked(int device, const Claim* extra, int* lanes) const {
  std::map<std::pair<bool, std::uint64_t>, int> largest;  // (own lane, lane or id) -> streams
  const auto add = [&](const Claim& c) {
    if (c.device != device) return;
    const auto key = c.lane == 0 ? std::make_pair(true, c.id) : std::make_pair(false, c.lane);
    int& m = largest[key];
    m = std::max(m, c.streams);
  };
  for (const Claim& c : claims_)
    add(c);
  if (extra != nullptr) add(*extra);
  int total = 0;
  for (const auto& [key, streams] : largest)
    total += streams;
  if (lanes != nullptr) *lanes = static_cast<int>(largest.size());
  return total;
}

std::string GraphWaitBudget::claim(std::uint64_t id, std::uint64_t lane,
                                   const std::map<int, int>& streams) {
  std::lock_guard lock(mutex_);
  for (const auto& [device, count] : streams) {
    const Claim mine{id, lane, device, count};
    int lanes = 0;
    const int before = resident_locked(device, nullptr, nullptr);
    const int after = resident_locked(device, &mine, &lanes);
    if (after <= limit_) continue;
    const int others = after - count;  // what the other lanes (and this lane's others) keep
    return std::to_string(after) + " streams on device " + std::to_string(device) +
           " could spin in graph waits at once (" + std::to_string(count) + " of this sequence, " +
           std::to_string(std::max(0, others)) + " of " + std::to_string(lanes - 1) +
           " other lane(s) of runners already built; " + std::to_string(before) +
           " before it): graph waits are kernels, a device keeps at most " +
           std::to_string(CudaSequenceRunner::kMaxResidentGrids) +
           " grids resident (sm_90) and graph waits may take at most " + std::to_string(limit_) +
           " of them (kMaxGraphWaitStreams), so this sequence's calls run on the stream path "
           "and cannot be captured. To keep graphs: fewer ranks per GPU, fewer runners alive "
           "at once, or one CudaSequenceOptions::graph_lane for runners whose calls never "
           "overlap";
  }
  for (const auto& [device, count] : streams)
    claims_.push_back(Claim{id, lane, device, count});
  return {};
}

void GraphWaitBudget::release(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  std::erase_if(claims_, [id](const Claim& c) { return c.id == id; });
}

int GraphWaitBudget::resident(int device) const {
  std::lock_guard lock(mutex_);
  return resident_locked(device, nullptr, nullptr);
}

}  // namespace tide::exec::sequence_detail
