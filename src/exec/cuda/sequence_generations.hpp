// The arithmetic of NOTE [CUDA call sequences] 3 on the host: which generation a call of a
// sequence runs at, and the graph wait (tide/kernels/signal/generation_wait.hpp) that holds for
// every call of the same slot.
#pragma once

#include <cstdint>
#include <vector>

#include "tide/kernels/signal/generation_wait.hpp"

namespace tide::exec::cuda_detail {

using tide::kernels::GenerationWait;

// A call e of a sequence with P templates and Q event slots (Q a multiple of P) runs while its
// slot's generation holds e / Q + 1.
inline std::int64_t generation_of(std::int64_t call, int slots) {
  return call / slots + 1;
}

// What Q consecutive calls add to each counter: Q / P times what one period's templates add
// (`additions[t][i]`: template t, counter index i).
inline std::vector<std::int64_t> slot_period_additions(
    const std::vector<std::vector<std::int64_t>>& additions, int slots) {
  std::vector<std::int64_t> sum(additions.empty() ? 0 : additions[0].size(), 0);
  const auto times = static_cast<std::int64_t>(slots) / static_cast<std::int64_t>(additions.size());
  for (const std::vector<std::int64_t>& t : additions)
    for (std::size_t i = 0; i < t.size(); ++i)
      sum[i] += times * t[i];
  return sum;
}

// The wait of call `call` whose host threshold is `threshold` (base + value), as a wait that
// holds for every call of the same slot: `step` is what Q calls add to its counter (0 for a
// wait on a constant).
inline GenerationWait generation_wait(const std::uint64_t* word, std::int64_t threshold,
                                      std::int64_t step, std::int64_t call, int slots) {
  return {word, threshold - step * generation_of(call, slots), step};
}

}  // namespace tide::exec::cuda_detail
