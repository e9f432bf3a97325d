// What a training step's collectives hold per GPU at their peak, as each system holds it
// (NOTE [step memory] in docs/program.md).
#include <algorithm>

#include "tide/program/memory_mode.hpp"
#include "tide/program/training_step.hpp"

namespace tide::program {
namespace {

// Gradient bytes of one group (FSDP2's unsharded gradients, in their true shapes).
std::int64_t gradient_bytes(const GroupLayout& layout) {
  std::int64_t bytes = 0;
  for (const ParamLayout& pl : layout.params())
    bytes += pl.rows * pl.cols * item_bytes(layout.grad_dtype());
  return bytes;
}

}  // namespace

std::int64_t tide_step_held_bytes(const std::vector<StepGroup>& groups, std::int64_t arena_bytes) {
  std::int64_t previous_gradients = 0;
  for (const StepGroup& g : groups) {
    if (memory_mode(*g.reduce_scatter).holds_previous_gradients) {
      previous_gradients = std::max(previous_gradients, gradient_bytes(g.reduce_scatter->layout()));
    }
  }
  // Only a step with two or more reduce-scatters has a previous group's gradients to hold.
  return arena_bytes + (groups.size() > 1 ? previous_gradients : 0);
}

std::int64_t fsdp2_step_held_bytes(const std::vector<StepGroup>& groups) {
  const int count = static_cast<int>(groups.size());
  auto unsharded = [&](int g) -> std::int64_t {  // U_g, 0 outside the step
    return g < 0 || g >= count
               ? 0
               : groups[static_cast<std::size_t>(g)].all_gather->layout().unsharded_bytes();
  };
  auto pack = [&](int g) -> std::int64_t {  // P_g = N S_fp32, 0 outside the step
    return g < 0 || g >= count
               ? 0
               : groups[static_cast<std::size_t>(g)].reduce_scatter->layout().pack_buffer_bytes();
  };
  std::int64_t sharded = 0;
  for (const StepGroup& g : groups)
    sharded += g.all_gather->layout().shard_bytes();
  std::int64_t peak = 0;
  for (int g = 0; g < count; ++g) {
    const std::int64_t forward = unsharded(g) + unsharded(g + 1);
    const std::int64_t backward = unsharded(g) + unsharded(g - 1) + pack(g + 1);
    peak = std::max({peak, forward, backward});
  }
  return sharded + peak;
}

}  // namespace tide::program
