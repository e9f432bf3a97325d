// TIDE-RS's two memory modes (Sec. 5.3), In-Place and Slot-Reuse, as one choice: RsOptions::
// mode picks a MemoryMode here, and every part of program/ that differs between the modes asks
// it. What each mode decides:
//   1. The outbox (Sec. 5.3, Eq. 9): In-Place keeps a full outbox, a block per remote
//      destination; Slot-Reuse keeps max_i (k_i + k_{i-1}) blocks and refills a block after
//      its previous send (the sum waits SENT). RsPlan::outbox_depth() (core) computes n_out,
//      since the plan's geometry needs it; the read phase waits where that depth is exceeded.
//   2. Where the read phase reads the gradients: In-Place from FSDP2's gradient tensors until
//      READ_DONE; Slot-Reuse from the group's vacated landing slot, where the runtime copies
//      them first (NOTE [runtime] 8). On one node (with RsOptions::one_node_pull) Slot-Reuse's
//      owners pull their rows from that gradient area instead of the peers pushing them into
//      staging (NOTE [one-node TIDE-RS]).
//   3. The staging bound of the memory model (Eq. 10-12): each mode's staging blocks.
//   4. What a step holds (NOTE [step memory]): In-Place reads the previous group's gradients in
//      place until its reads complete, so two gradient groups are briefly live; Slot-Reuse
//      moves them into the vacated slot.
#pragma once

#include <cstdint>
#include <string_view>

#include "tide/core/memory_model.hpp"
#include "tide/core/rs_plan.hpp"

namespace tide::program {

struct MemoryMode {
  RsMode mode = RsMode::kInPlace;
  std::string_view name;  // "in-place", "slot-reuse"
  // 1: the outbox holds a block per remote destination (no refill)
  bool full_outbox = true;
  // 2: on one node, the owners may pull from a gradient area in the vacated slot
  bool gradients_in_vacated_slot = false;
  // 4: a step holds the previous group's gradients beside the arena
  bool holds_previous_gradients = true;
  // 3: the staging blocks the memory model bounds this mode by
  double staging_blocks(const MemoryModel& model) const;
};

const MemoryMode& memory_mode(RsMode mode);
inline const MemoryMode& memory_mode(const RsPlan& plan) {
  return memory_mode(plan.options().mode);
}

}  // namespace tide::program
