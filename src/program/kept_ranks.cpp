// NOTE [kept ranks]: a call sequence reduced to the ops its process's ranks run or receive.
#include "tide/program/kept_ranks.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tide/core/error.hpp"

namespace tide::program {

bool kept_op(const Op& op, const std::vector<bool>& kept) {
  auto at = [&](int rank) {
    return rank >= 0 && rank < static_cast<int>(kept.size()) &&
           kept[static_cast<std::size_t>(rank)];
  };
  if (at(op.rank)) return true;
  const std::optional<CounterUse> add = addition_of(op);
  return add && at(add->counter.rank);
}

void keep_ranks(CallTemplate& call, std::span<const int> ranks) {
  Program& p = call.program;
  std::vector<bool> kept(static_cast<std::size_t>(p.ranks), false);
  for (const int r : ranks) {
    if (r < 0 || r >= p.ranks) {
      throw InvalidArgument("keep_ranks: rank " + std::to_string(r) + " outside the template's " +
                            std::to_string(p.ranks) + " ranks");
    }
    kept[static_cast<std::size_t>(r)] = true;
  }
  const std::size_t n = p.ops.size();
  std::vector<int> index(n, -1);  // per built op: its index among the kept ones
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (kept_op(p.ops[i], kept)) index[i] = static_cast<int>(count++);
  }
  if (count == n) return;
  // Exact-size vectors, so nothing of the built template's capacity stays behind, and copies
  // of the kept ops rather than the built ones moved: the copies sit together in memory
  // allocated now, not scattered among the pages of the build, which can then go back to the
  // system (NOTE [registration scratch] in src/runtime/group.hpp; measured at N = 8: 1.4
  // rather than 1.9 MiB resident for the benchmark's wide model).
  std::vector<Op> ops;
  std::vector<int> ages, ids;
  ops.reserve(count);
  ids.reserve(count);
  if (!call.event_age.empty()) ages.reserve(count);
  for (std::size_t i = 0; i < n; ++i) {
    if (index[i] < 0) continue;
    ops.push_back(p.ops[i]);
    ids.push_back(call.op_id(i));
    if (!call.event_age.empty()) ages.push_back(call.event_age[i]);
  }
  auto project = [&](const std::vector<int>& built) {
    std::vector<int> out;
    for (const int i : built) {
      const int k = index.at(static_cast<std::size_t>(i));
      if (k >= 0) out.push_back(k);
    }
    out.shrink_to_fit();
    return out;
  };
  call.order.order = project(call.order.order);
  call.order.unplaced = project(call.order.unplaced);
  call.built_ops = call.op_id_count();
  p.ops = std::move(ops);
  call.event_age = std::move(ages);
  call.op_ids = std::move(ids);
}

void keep_ranks(CallSequence& sequence, std::span<const int> ranks) {
  for (CallTemplate& t : sequence.templates)
    keep_ranks(t, ranks);
}

}  // namespace tide::program
