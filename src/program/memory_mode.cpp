// TIDE-RS's memory modes as one choice (memory_mode.hpp; Sec. 5.3).
#include "tide/program/memory_mode.hpp"

namespace tide::program {

double MemoryMode::staging_blocks(const MemoryModel& model) const {
  return mode == RsMode::kSlotReuse ? model.slot_reuse_staging_blocks
                                    : model.in_place_staging_blocks;
}

const MemoryMode& memory_mode(RsMode mode) {
  static const MemoryMode in_place{RsMode::kInPlace, "in-place", /*full_outbox=*/true,
                                   /*gradients_in_vacated_slot=*/false,
                                   /*holds_previous_gradients=*/true};
  static const MemoryMode slot_reuse{RsMode::kSlotReuse, "slot-reuse", /*full_outbox=*/false,
                                     /*gradients_in_vacated_slot=*/true,
                                     /*holds_previous_gradients=*/false};
  return mode == RsMode::kSlotReuse ? slot_reuse : in_place;
}

}  // namespace tide::program
