// Signal kernels: the generation-relative waits of a call inside a CUDA graph (NOTE [CUDA call
// sequences] 3-4). Contract: a 1-warp kernel holds its stream until, for each of its waits,
// *word >= first + step * generation (signed 64-bit; `generation` read once per launch), then
// fences at system scope, so that the stream's later work sees what the signalling peers wrote
// before their additions. The thresholds follow the call from a device generation word, so a
// graph replays with nothing patched (the runner's arithmetic: src/exec/cuda/
// sequence_generations.hpp).
//
// Why not the driver's waits: a cuStreamWaitValue64 captured into a graph keeps the threshold
// it was captured with (with cumulative counters every later replay's wait is already met),
// and explicit batch-mem-op nodes, which can be re-targeted, cost 1.3-2.3 us of host time per
// node to launch plus a patch per node per launch (bench/results/runtime/primitives_*.json:
// 80 such waits, 185 us to launch; 80 of these kernels and their links, 2.1 us).
//
// Host-compilable: raw pointers, values and a cudaStream_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace tide::kernels {

// One wait: *word >= first + step * generation, compared as signed 64-bit values (a threshold
// <= 0 is met at once). `generation` is read once per launch.
struct GenerationWait {
  const std::uint64_t* word = nullptr;
  std::int64_t first = 0;
  std::int64_t step = 0;
};

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

}  // namespace tide::kernels
