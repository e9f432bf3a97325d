// The 1-thread counter-addition kernel of kSignal / kRailPut (see counter_add.hpp).
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

}  // namespace

void launch_counter_add(std::uint64_t* counter, std::uint64_t add, cudaStream_t stream) {
  static_assert(sizeof(unsigned long long) == sizeof(std::uint64_t));
  counter_add_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<unsigned long long*>(counter),
                                          static_cast<unsigned long long>(add));
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace tide::exec::cuda_detail
