// TIDE-AG plan builder. See the header for the protocol summary (Sec. 3.1, Fig. 5).
#include "tide/core/ag_plan.hpp"

#include <algorithm>
#include <string>

#include "tide/core/error.hpp"

namespace tide {

int ceil_log2(std::int64_t m) {
  int r = 0;
  while ((std::int64_t{1} << r) < m)
    ++r;
  return r;
}

AgPlan::AgPlan(const GroupLayout& layout, AgOptions options) : layout_(layout), options_(options) {
  if (options_.min_strided_run < 2) {
    throw InvalidArgument("AG min_strided_run = " + std::to_string(options_.min_strided_run) +
                          " must be at least 2 (a strided copy needs two rows)");
  }
  if (options_.max_last_round_groups < 1) {
    throw InvalidArgument("AG max_last_round_groups must be at least 1");
  }
  if (options_.head_bytes < 0) throw InvalidArgument("AG head bytes must not be negative");
  if (options_.mixed_precision_cast && layout_.ag_dtype() != DType::kBf16) {
    throw InvalidArgument(
        "the mixed-precision cast writes fp32 masters as bf16; the all-gather "
        "dtype is " +
        std::string(dtype_name(layout_.ag_dtype())) + ": give it bf16, or drop the cast");
  }

  const int m = layout_.topology().nodes();
  const std::int64_t s = layout_.shard_bytes();
  const int round_count = ceil_log2(m);
  for (int d = 0; d < round_count; ++d) {
    AgRound round;
    round.index = d;
    round.peer_distance = 1 << d;
    round.first_slot = 1 << d;
    round.slot_count = std::min(1 << d, m - (1 << d));
    round.bytes = round.slot_count * s;
    round.head_bytes = std::min(round.bytes, options_.head_bytes);
    round.tail_bytes = round.bytes - round.head_bytes;
    round.paced = d >= 1;
    rounds_.push_back(round);

    // Every round but the last is one group; the last is split into at most
    // max_last_round_groups parts that each keep a mergeable run where possible.
    const bool last = d + 1 == round_count;
    const int parts = last ? std::clamp(round.slot_count / options_.min_strided_run, 1,
                                        options_.max_last_round_groups)
                           : 1;
    int next = round.first_slot;
    for (int g = 0; g < parts; ++g) {
      const int size = round.slot_count / parts + (g < round.slot_count % parts ? 1 : 0);
      groups_.push_back(AgSlotGroup{d, next, size});
      next += size;
    }
  }
}

std::int64_t AgPlan::stage_bytes() const {
  if (one_node()) return 0;  // NOTE [one-node TIDE-AG]
  const std::int64_t m = layout_.topology().nodes();
  return (options_.shard_in_stage() ? m : m - 1) * layout_.shard_bytes();
}

std::int64_t AgPlan::stage_slot_offset(int slot) const {
  const int first_staged = options_.shard_in_stage() ? 0 : 1;
  if (slot < first_staged || slot >= layout_.topology().nodes()) {
    throw InternalError("AG stage slot " + std::to_string(slot) + " does not exist");
  }
  return (slot - first_staged) * layout_.shard_bytes();
}

int AgPlan::source_node(int node, int slot) const {
  return mod(node + slot, layout_.topology().nodes());
}

std::vector<AgScatterCopy> AgPlan::scatter_copies(int node, int local) const {
  const Topology& topo = layout_.topology();
  const int m = topo.nodes();
  const std::int64_t stage_pitch = layout_.shard_bytes();
  std::vector<AgScatterCopy> copies;

  // Emits the copies of the slot run [first, first + count), which holds consecutive
  // source nodes (no wrap), for every parameter.
  auto emit_run = [&](int first, int count, bool from_resident) {
    for (int p = 0; p < layout_.param_count(); ++p) {
      const ParamLayout& pl = layout_.param(p);
      auto make = [&](int slot, int height) {
        AgScatterCopy c;
        c.param = p;
        c.first_slot = slot;
        c.height = height;
        c.from_resident = from_resident;
        c.src_offset = (from_resident ? 0 : stage_slot_offset(slot)) + pl.offset;
        c.src_pitch = stage_pitch;
        c.dst_offset = layout_.landing_offset(p, topo.rank(source_node(node, slot), local));
        c.dst_pitch = topo.gpus_per_node() * pl.shard_bytes;
        c.width = pl.shard_bytes;
        copies.push_back(c);
      };
      if (count >= options_.min_strided_run) {
        make(first, count);
      } else {
        for (int i = 0; i < count; ++i)
          make(first + i, 1);
      }
    }
  };

  emit_run(0, 1, !options_.shard_in_stage());
  for (const AgSlotGroup& g : groups_) {
    // Slot i holds node (node + i) mod M: the run wraps to node 0 at slot M - node.
    const int wrap = m - node;
    const int end = g.first_slot + g.slot_count;
    if (node != 0 && wrap > g.first_slot && wrap < end) {
      emit_run(g.first_slot, wrap - g.first_slot, false);
      emit_run(wrap, end - wrap, false);
    } else {
      emit_run(g.first_slot, g.slot_count, false);
    }
  }
  return copies;
}

AgDescriptorCounts AgPlan::descriptor_counts(int node) const {
  const std::int64_t l = layout_.topology().gpus_per_node();
  const std::int64_t flat = std::int64_t{layout_.topology().nodes()} * layout_.param_count();
  AgDescriptorCounts c;
  c.per_destination = static_cast<std::int64_t>(scatter_copies(node, 0).size());
  c.unicast = c.per_destination * l;
  c.multicast = c.per_destination;
  c.flat_unicast = flat * l;
  c.flat_multicast = flat;
  return c;
}

AgDescriptorCounts AgPlan::max_descriptor_counts() const {
  AgDescriptorCounts best;
  for (int n = 0; n < layout_.topology().nodes(); ++n) {
    const AgDescriptorCounts c = descriptor_counts(n);
    if (c.per_destination > best.per_destination) best = c;
  }
  return best;
}

}  // namespace tide
