// Signal kernels: the generation-relative waits of a call inside a CUDA graph (NOTE [CUDA call
// sequences] 3-4). A 1-warp kernel holds its stream until each of its waits is met, then
// fences at system scope (later work sees what the signalling peers wrote before adding). The
// thresholds follow a device generation word, so a graph replays unpatched (arithmetic:
// src/exec/cuda/sequence_generations.hpp; why not the driver's waits: docs/kernels.md).
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

// Sets the wait kernel's carveout on the current device (once, outside any capture), so a
// spinner never holds an SM a Level 1 sum's CTA cannot share.
void prepare_generation_waits();

// Enqueues on `stream` one kernel per kMaxGenerationWaitsPerLaunch waits, each with the contract
// above (copies after it start after it completes). Nothing for an empty span. Checks the launches.
void launch_generation_waits(std::span<const GenerationWait> waits, const std::uint64_t* generation,
                             cudaStream_t stream);

}  // namespace tide::kernels
