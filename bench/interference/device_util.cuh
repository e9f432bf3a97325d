// Device helpers of the interference benchmark: %globaltimer, %smid, bounded flag polls.
#pragma once

#include <cstdint>

namespace tide::bench {

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ std::uint32_t sm_id() {
  std::uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ std::uint32_t load_volatile(const std::uint32_t* p) {
  return *reinterpret_cast<const volatile std::uint32_t*>(p);
}

// Polls *flag until pred(value) or `bound_ns` passes; returns whether pred held.
template <typename Pred>
__device__ bool poll(const std::uint32_t* flag, Pred pred, std::uint64_t bound_ns) {
  const std::uint64_t t0 = global_ns();
  while (!pred(load_volatile(flag))) {
    if (global_ns() - t0 > bound_ns) return false;
    __nanosleep(200);
  }
  return true;
}

}  // namespace tide::bench
