// The 1-thread counter-addition kernels of kSignal / kRailPut (see counter_add.hpp).
#include <algorithm>

#include "counter_add.hpp"
#include "tide/kernels/cuda_check.hpp"

namespace tide::exec::cuda_detail {
namespace {

__global__ void counter_add_kernel(unsigned long long* counter, unsigned long long add) {
  // Stream order already put every earlier op of this stream before this kernel; the fence
  // orders this thread's view before the addition a waiting stream observes. System scope,
  // fence and addition: the counter and the data it guards may live on a peer GPU, written
  // and watched through a peer mapping (NOTE [fabric interface]).
  __threadfence_system();
  atomicAdd_system(counter, add);
}

// The additions of one launch, passed by value as the kernel's parameter.
struct CounterAddBatch {
  unsigned long long* counter[kMaxCounterAddsPerLaunch];
  unsigned long long add[kMaxCounterAddsPerLaunch];
  int count;
};

__global__ void counter_adds_kernel(CounterAddBatch batch) {
  // As counter_add_kernel, once per counter in order: a waiter of any of them sees every
  // write of this stream before the kernel.
  for (int i = 0; i < batch.count; ++i) {
    __threadfence_system();
    atomicAdd_system(batch.counter[i], batch.add[i]);
  }
}

}  // namespace

void launch_counter_add(std::uint64_t* counter, std::uint64_t add, cudaStream_t stream) {
  static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t));
  counter_add_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<unsigned long long*>(counter),
                                          static_cast<unsigned long long>(add));
  TIDE_CUDA_CHECK_LAUNCH();
}

void launch_counter_adds(std::span<const CounterAdd> adds, cudaStream_t stream) {
  for (std::size_t first = 0; first < adds.size(); first += kMaxCounterAddsPerLaunch) {
    const std::size_t n = std::min(kMaxCounterAddsPerLaunch, adds.size() - first);
    if (n == 1) {
      launch_counter_add(adds[first].counter, adds[first].add, stream);
      continue;
    }
    CounterAddBatch batch{};
    for (std::size_t i = 0; i < n; ++i) {
      batch.counter[i] = reinterpret_cast<unsigned long long*>(adds[first + i].counter);
      batch.add[i] = static_cast<unsigned long long>(adds[first + i].add);
    }
    batch.count = static_cast<int>(n);
    counter_adds_kernel<<<1, 1, 0, stream>>>(batch);
    TIDE_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace tide::exec::cuda_detail
