// The waits of a call inside a CUDA graph (NOTE [CUDA call sequences] 3-4): a 1-warp kernel
// whose thresholds follow the call from a device generation word, so that a graph replays
// with nothing patched.
//
// Why not the driver's waits: a cuStreamWaitValue64 captured into a graph keeps the threshold
// it was captured with (with cumulative counters every later replay's wait is already met),
// and explicit batch-mem-op nodes, which can be re-targeted, cost 1.3-2.3 us of host time per
// node to launch plus a patch per node per launch (bench/results/runtime/primitives_*.json:
// 80 such waits, 185 us to launch; 80 of these kernels and their links, 2.1 us).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

namespace tide::exec::cuda_detail {

// One wait: *word >= first + step * generation, compared as signed 64-bit values (a threshold
// <= 0 is met at once). `generation` is read once per launch.
struct GenerationWait {
  const std::uint64_t* word = nullptr;
  std::int64_t first = 0;
  std::int64_t step = 0;
};

// The arithmetic of NOTE [CUDA call sequences] 3, on the host. A call e of a sequence with P
// templates and Q event slots (Q a multiple of P) runs while its slot's generation holds
// e / Q + 1.
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

// The threshold the wait kernel computes for generation `g`.
inline std::int64_t generation_threshold(const GenerationWait& w, std::int64_t g) {
  return w.first + w.step * g;
}

// The most waits one launch carries (kernel parameters: 24 bytes each, one thread each).
inline constexpr std::size_t kMaxGenerationWaitsPerLaunch = 32;

// Sets the wait kernel's preferred carveout on the current device (once per runner, outside
// any capture: a resident spinner must not hold its SM in a carveout that a Level 1 sum's
// CTA cannot share).
void prepare_generation_waits();

// Enqueues on `stream` one kernel per kMaxGenerationWaitsPerLaunch waits; each returns when
// every one of its waits is met, after a system-scope fence, so that the stream's later work
// (copies included: they start after the kernel completes) sees what the signalling peers
// wrote before their additions. Nothing for an empty span. Checks the launches.
void launch_generation_waits(std::span<const GenerationWait> waits, const std::uint64_t* generation,
                             cudaStream_t stream);

}  // namespace tide::exec::cuda_detail
