// The 1-thread counter-addition kernels of kSignal / kRailPut (see the header of the same name).
#include <algorithm>

#include "tide/cuda/check.hpp"
#include "tide/kernels/signal/counter_add.hpp"

namespace tide::kernels {
namespace {

// Whether the abort word says the rank's waits were released (NOTE [CUDA call sequences] 5):
// one load of a local word. Every wait this kernel's stream passed because of the release
// was met by a value written after the abort word (the release writes it first, in stream
// order), so an addition that follows such a wait reads it as set.
__device__ bool aborted(const unsigned long long* abort) {
  return abort != nullptr && *static_cast<const volatile unsigned long long*>(abort) != 0;
}

__global__ void counter_add_kernel(unsigned long long* counter, unsigned long long add,
                                   const unsigned long long* abort) {
  // Stream order already put every earlier op of this stream before this kernel; the fence
  // orders this thread's view before the addition a waiting stream observes. System scope,
  // fence and addition: the counter and the data it guards may live on a peer GPU, written
  // and watched through a peer mapping (NOTE [fabric interface]).
  if (aborted(abort)) return;
  __threadfence_system();
  atomicAdd_system(counter, add);
}

__global__ void relayed_counter_add_kernel(unsigned long long* counter, unsigned long long add,
                                           const unsigned long long* token,
                                           unsigned long long* relay,
                                           const unsigned long long* abort,
                                           unsigned long long expected) {
  // Steps (NOTE [abort relay]): 1. nothing once this rank's own waits were released; 2. a
  // system-scope fence, then the token the message carried (received before this kernel on
  // its stream); 3. not `expected` (0; a one-sided message's number, NOTE [one-sided
  // messages]): the relayed-abort word set (system scope: the end-of-call check reads it), no
  // addition; 4. `expected`: the addition, as counter_add_kernel's.
  if (aborted(abort)) return;
  __threadfence_system();
  if (*static_cast<const volatile unsigned long long*>(token) != expected) {
    atomicExch_system(relay, 1ull);
    __threadfence_system();
    return;
  }
  atomicAdd_system(counter, add);
}

// The additions of one launch, passed by value as the kernel's parameter.
struct CounterAddBatch {
  unsigned long long* counter[kMaxCounterAddsPerLaunch];
  unsigned long long add[kMaxCounterAddsPerLaunch];
  int count;
};

__global__ void counter_adds_kernel(CounterAddBatch batch, const unsigned long long* abort) {
  // As counter_add_kernel, once per counter in order: a waiter of any of them sees every
  // write of this stream before the kernel.
  if (aborted(abort)) return;
  for (int i = 0; i < batch.count; ++i) {
    __threadfence_system();
    atomicAdd_system(batch.counter[i], batch.add[i]);
  }
}

}  // namespace

void launch_counter_add(std::uint64_t* counter, std::uint64_t add, cudaStream_t stream,
                        const std::uint64_t* abort) {
  static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t));
  counter_add_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<unsigned long long*>(counter),
                                          static_cast<unsigned long long>(add),
                                          reinterpret_cast<const unsigned long long*>(abort));
  TIDE_CUDA_CHECK_LAUNCH();
}

void launch_relayed_counter_add(std::uint64_t* counter, std::uint64_t add,
                                const std::uint64_t* token, std::uint64_t* relay,
                                cudaStream_t stream, const std::uint64_t* abort,
                                std::uint64_t expected) {
  relayed_counter_add_kernel<<<1, 1, 0, stream>>>(
      reinterpret_cast<unsigned long long*>(counter), static_cast<unsigned long long>(add),
      reinterpret_cast<const unsigned long long*>(token),
      reinterpret_cast<unsigned long long*>(relay),
      reinterpret_cast<const unsigned long long*>(abort),
      static_cast<unsigned long long>(expected));
  TIDE_CUDA_CHECK_LAUNCH();
}

void launch_counter_adds(std::span<const CounterAdd> adds, cudaStream_t stream,
                         const std::uint64_t* abort) {
  for (std::size_t first = 0; first < adds.size(); first += kMaxCounterAddsPerLaunch) {
    const std::size_t n = std::min(kMaxCounterAddsPerLaunch, adds.size() - first);
    if (n == 1) {
      launch_counter_add(adds[first].counter, adds[first].add, stream, abort);
      continue;
    }
    CounterAddBatch batch{};
    for (std::size_t i = 0; i < n; ++i) {
      batch.counter[i] = reinterpret_cast<unsigned long long*>(adds[first + i].counter);
      batch.add[i] = static_cast<unsigned long long>(adds[first + i].add);
    }
    batch.count = static_cast<int>(n);
    counter_adds_kernel<<<1, 1, 0, stream>>>(batch,
                                             reinterpret_cast<const unsigned long long*>(abort));
    TIDE_CUDA_CHECK_LAUNCH();
  }
}

void prepare_counter_adds() {
  cudaFuncAttributes attributes{};  // needs the loaded function: loads it
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, counter_add_kernel));
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, counter_adds_kernel));
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, relayed_counter_add_kernel));
}

}  // namespace tide::kernels
