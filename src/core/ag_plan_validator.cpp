// TIDE-AG plan validation (Sec. 3.1). See tide/core/plan_validator.hpp for the properties.
#include <string>
#include <vector>

#include "tide/core/plan_validator.hpp"

namespace tide {
namespace {

ValidationResult reject(std::string reason) {
  return ValidationResult{false, std::move(reason)};
}

// Bruck rounds: round d receives slots [2^d, 2^d + c_d) from distance 2^d and sends the
// first c_d <= 2^d slots, which the sender holds after rounds 0..d-1; together they receive
// 1..M-1 once each. Slot groups tile the rounds in arrival order.
ValidationResult check_rounds(const AgPlan& plan) {
  const int m = plan.layout().topology().nodes();
  const std::int64_t s = plan.layout().shard_bytes();
  int held = 1;  // slots [0, held) are on every node
  for (const AgRound& round : plan.rounds()) {
    const std::string name = "round " + std::to_string(round.index);
    if (round.first_slot != held || round.peer_distance != held) {
      return reject(name + " receives from slot " + std::to_string(round.first_slot) +
                    " at distance " + std::to_string(round.peer_distance) + ", expected " +
                    std::to_string(held));
    }
    if (round.slot_count < 1 || round.slot_count > held || held + round.slot_count > m) {
      return reject(name + " forwards " + std::to_string(round.slot_count) +
                    " slots; its sender holds " + std::to_string(held) +
                    " of M = " + std::to_string(m));
    }
    if (round.bytes != round.slot_count * s || round.head_bytes < 0 || round.tail_bytes < 0 ||
        round.head_bytes + round.tail_bytes != round.bytes) {
      return reject(name + " moves the wrong number of bytes");
    }
    held += round.slot_count;
  }
  if (held != m) {
    return reject("the rounds deliver " + std::to_string(held - 1) +
                  " slots of M - 1 = " + std::to_string(m - 1));
  }
  std::size_t group = 0;
  for (const AgRound& round : plan.rounds()) {
    int next = round.first_slot;
    const int end = round.first_slot + round.slot_count;
    while (next < end) {
      if (group >= plan.slot_groups().size()) return reject("slot groups end before the rounds");
      const AgSlotGroup& g = plan.slot_groups()[group++];
      if (g.round != round.index || g.first_slot != next || g.slot_count < 1 ||
          next + g.slot_count > end) {
        return reject("slot group " + std::to_string(group - 1) + " does not continue round " +
                      std::to_string(round.index));
      }
      next += g.slot_count;
    }
  }
  if (group != plan.slot_groups().size()) return reject("slot groups outside every round");
  return {};
}

// Every node's scatter places each (parameter, slot) once, reading it from its stage slot (or
// the resident shard) and writing it at Landing(p, rank of the slot's source node).
ValidationResult check_scatter(const AgPlan& plan) {
  const GroupLayout& layout = plan.layout();
  const Topology& topo = layout.topology();
  const int m = topo.nodes();
  const int params = layout.param_count();
  const bool cast = plan.options().shard_in_stage();
  std::vector<char> placed;
  for (int node = 0; node < m; ++node) {
    placed.assign(static_cast<std::size_t>(m) * static_cast<std::size_t>(params), 0);
    for (const AgScatterCopy& c : plan.scatter_copies(node, 0)) {
      if (c.param < 0 || c.param >= params || c.height < 1 || c.first_slot < 0 ||
          c.first_slot + c.height > m) {
        return reject("node " + std::to_string(node) + " has a scatter copy outside its slots");
      }
      const ParamLayout& pl = layout.param(c.param);
      for (int i = 0; i < c.height; ++i) {
        const int slot = c.first_slot + i;
        auto what = [&] {
          return "node " + std::to_string(node) + ", parameter " + std::to_string(c.param) +
                 ", slot " + std::to_string(slot);
        };
        char& seen = placed[static_cast<std::size_t>(slot) * static_cast<std::size_t>(params) +
                            static_cast<std::size_t>(c.param)];
        if (seen) return reject(what() + " is scattered twice");
        seen = 1;
        const bool resident = slot == 0 && !cast;
        if (c.from_resident != resident || c.width != pl.shard_bytes) {
          return reject(what() + " is read from the wrong source");
        }
        const std::int64_t src = c.src_offset + i * c.src_pitch;
        const std::int64_t want_src = (resident ? 0 : plan.stage_slot_offset(slot)) + pl.offset;
        const std::int64_t dst = c.dst_offset + i * c.dst_pitch;
        const std::int64_t want_dst =
            layout.landing_offset(c.param, topo.rank(plan.source_node(node, slot), 0));
        if (src != want_src || dst != want_dst) {
          return reject(what() + " lands at byte " + std::to_string(dst) + " from " +
                        std::to_string(src) + ", expected " + std::to_string(want_dst) + " from " +
                        std::to_string(want_src) + " (Eq. 2)");
        }
      }
    }
    for (std::size_t i = 0; i < placed.size(); ++i) {
      if (!placed[i]) {
        return reject("node " + std::to_string(node) + " never scatters parameter " +
                      std::to_string(static_cast<int>(i) % params) + " of slot " +
                      std::to_string(static_cast<int>(i) / params));
      }
    }
  }
  return {};
}

}  // namespace

ValidationResult validate_ag_plan(const AgPlan& plan) {
  for (auto check : {check_rounds, check_scatter}) {
    ValidationResult result = check(plan);
    if (!result.accepted) return result;
  }
  return {};
}

}  // namespace tide
