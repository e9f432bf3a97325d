// Thin wrappers over the Hopper PTX that TIDE's kernels use: mbarriers with transaction
// counts, the bulk copy engine (cp.async.bulk), proxy fences and bounded waits.
// Private to the kernels (and the copy probe, through the tide_ptx target); include only from
// .cu files.
#pragma once

#include <cstdint>
#include <cstdio>

#include "tide/version_gates.hpp"

namespace tide::kernels::ptx {

// Bound on every device-side wait (style.md, habit 8): a wait that outlasts it prints what it
// waited for and traps, so a protocol bug fails loudly instead of hanging the stream.
inline constexpr unsigned long long kWaitTimeoutNs = 20ull * 1000 * 1000 * 1000;

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

#if TIDE_HAS_TMA_BULK || !defined(__CUDA_ARCH__)

__device__ __forceinline__ void mbar_init(std::uint32_t bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes barrier initialisation visible to the async proxy (the bulk copy engine).
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Orders this thread's earlier generic-proxy shared-memory accesses before later
// async-proxy (bulk copy) accesses.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Adds `bytes` to the barrier's expected transaction count of the current phase.
__device__ __forceinline__ void mbar_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Arrives (release, CTA scope): this thread's earlier writes are visible to the waiters.
__device__ __forceinline__ void mbar_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Non-blocking test (acquire, CTA scope): never suspends the thread (the copy probe's spin
// mode, bench/kernels/copy_probe.cu).
__device__ __forceinline__ bool mbar_test_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Waits (acquire, CTA scope) until the phase with parity `parity` of `bar` has completed.
// The time bound is checked only every 4096 failed polls: the hot path is try_wait alone.
__device__ __forceinline__ void mbar_wait(std::uint32_t bar, std::uint32_t parity,
                                          const char* what) {
  std::uint32_t spins = 0;
  unsigned long long start = 0;
  while (!mbar_try_wait(bar, parity)) {
    if ((++spins & 4095u) == 0) {
      const unsigned long long now = globaltimer();
      if (start == 0) {
        start = now;
      } else if (now - start > kWaitTimeoutNs) {
        printf("tide: timed out after 20 s waiting for %s (block %d, thread %d, parity %u)\n", what,
               static_cast<int>(blockIdx.x), static_cast<int>(threadIdx.x), parity);
        __trap();
      }
    }
  }
}

// Bulk copy global -> shared through the copy engine; completes `bytes` transactions on
// `bar`. dst, src and bytes must be multiples of 16.
__device__ __forceinline__ void bulk_g2s(std::uint32_t dst, const void* src, std::uint32_t bytes,
                                         std::uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

#endif

__device__ __forceinline__ float canonical(float x) {
  return (x != x) ? __int_as_float(0x7FFFFFFF) : x;
}

}  // namespace tide::kernels::ptx
