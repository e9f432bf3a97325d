// TIDE-RS's two memory modes (Sec. 5.3) as one choice that every part of program/ asks:
//   1. Outbox (Eq. 9; n_out from RsPlan::outbox_depth()): In-Place a block per remote
//      destination; Slot-Reuse max_i (k_i + k_{i-1}) blocks, refilled after their send.
//   2. Gradients: In-Place reads FSDP2's tensors until READ_DONE; Slot-Reuse reads them from
//      the vacated landing slot (NOTE [runtime] 8; one node: owners pull, NOTE [one-node
//      TIDE-RS]).
//   3. The memory model's staging bound (Eq. 10-12) per mode.
//   4. A step (NOTE [step memory]): In-Place holds the previous group's gradients briefly.
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
