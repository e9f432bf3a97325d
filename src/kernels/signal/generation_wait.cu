// The generation-relative wait kernel (see the header of the same name).
#include <algorithm>

#include "tide/cuda/check.hpp"
#include "tide/kernels/signal/generation_wait.hpp"

namespace tide::kernels {
namespace {

struct GenerationWaitBatch {
  const unsigned long long* word[kMaxGenerationWaitsPerLaunch];
  long long first[kMaxGenerationWaitsPerLaunch];
  long long step[kMaxGenerationWaitsPerLaunch];
  const unsigned long long* generation;
  int count;
};

__global__ void generation_waits_kernel(GenerationWaitBatch batch) {
  // Steps: thread t < count computes its threshold from the generation (written by an earlier
  // node of the same graph, so ordered before this kernel) and polls its word with volatile
  // loads, backing off; then a system-scope fence, so that nothing this kernel's successors
  // read is older than the additions it observed (the adders fence before adding,
  // counter_add.cu). Contract: the words are this rank's own signal words (peers add to them
  // with atomicAdd_system); a word never decreases, except to the release value of an abort,
  // which meets every threshold.
  const int t = static_cast<int>(threadIdx.x);
  if (t < batch.count) {
    const auto generation =
        static_cast<long long>(*static_cast<const volatile unsigned long long*>(batch.generation));
    const long long threshold = batch.first[t] + batch.step[t] * generation;
    const volatile unsigned long long* word = batch.word[t];
    unsigned backoff = 32;
    while (static_cast<long long>(*word) < threshold) {
      __nanosleep(backoff);
      backoff = backoff < 1024 ? backoff * 2 : 1024;
    }
  }
  __syncthreads();
  __threadfence_system();
}

}  // namespace

void prepare_generation_waits() {
  TIDE_CUDA_CHECK(cudaFuncSetAttribute(generation_waits_kernel,
                                       cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
}

void launch_generation_waits(std::span<const GenerationWait> waits, const std::uint64_t* generation,
                             cudaStream_t stream) {
  static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t));
  for (std::size_t first = 0; first < waits.size(); first += kMaxGenerationWaitsPerLaunch) {
    const std::size_t n = std::min(kMaxGenerationWaitsPerLaunch, waits.size() - first);
    GenerationWaitBatch batch{};
    for (std::size_t i = 0; i < n; ++i) {
      batch.word[i] = reinterpret_cast<const unsigned long long*>(waits[first + i].word);
      batch.first[i] = waits[first + i].first;
      batch.step[i] = waits[first + i].step;
    }
    batch.generation = reinterpret_cast<const unsigned long long*>(generation);
    batch.count = static_cast<int>(n);
    generation_waits_kernel<<<1, 32, 0, stream>>>(batch);
    TIDE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tide::kernels
