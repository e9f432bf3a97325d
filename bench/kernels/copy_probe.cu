// Probe (not a test): how fast can one CTA pull global memory into shared memory with the bulk
// copy engine (cp.async.bulk + mbarrier transaction counts) on this GPU? The evidence behind
// the Level 1 sum's pipeline shape (docs/kernels.md).
//
// One producer warp streams 32 MB per CTA (contiguous) into a ring of `depth` stages; each
// stage is `k` bulk requests of `req` bytes completing on one full mbarrier; 4 consumer warps
// wait, touch one word per thread and release the stage (empty mbarrier, 128 arrivals).
// Waits use mbarrier.try_wait (may suspend) or mbarrier.test_wait (pure spin).
// Prints GB/s per CTA for 1 and 4 CTAs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../../src/kernels/ptx.cuh"
#include "tide/kernels/cuda_check.hpp"

namespace {
using namespace tide::kernels;

template <bool kSpin>
__device__ __forceinline__ void wait(std::uint32_t bar, std::uint32_t parity) {
  if (kSpin) {
    while (!ptx::mbar_test_wait(bar, parity)) {
    }
  } else {
    ptx::mbar_wait(bar, parity, "probe");
  }
}

// Issue variants (how the producer registers bytes and arrives):
//   0 lane 0: mbarrier.arrive.expect_tx (release) for the stage, then its k copies;
//   1 lane 0: mbarrier.expect_tx.relaxed before each copy, then mbarrier.arrive (release);
//   2 lane (stage % 32): arrive.expect_tx (release) for the stage, then its k copies;
//   3 lane 0: mbarrier.arrive.expect_tx.relaxed for the stage, then its k copies.
__global__ void __launch_bounds__(160, 1)
    probe(const unsigned char* src, std::int64_t stream_bytes, int req, int k, int depth,
          int stages_per_cta, int variant, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long full[32], empty[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int stage_bytes = req * k;
  if (threadIdx.x == 0) {
    for (int b = 0; b < depth; ++b) {
      ptx::mbar_init(ptx::smem_addr(&full[b]), 1);
      ptx::mbar_init(ptx::smem_addr(&empty[b]), 128);
    }
    ptx::fence_mbar_init();
  }
  __syncthreads();
  // Request i of stage j comes from stream i % 8 (8 streams, like 8 contributions).
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * stages_per_cta * req;
  if (warp == 0) {
    for (int j = 0; j < stages_per_cta; ++j) {
      const int b = j % depth;
      const unsigned use = j / depth;
      const int issuer = variant == 2 ? b : 0;
      if (lane != issuer) continue;
      if (use > 0) ptx::mbar_wait(ptx::smem_addr(&empty[b]), (use - 1) & 1u, "probe empty");
      const std::uint32_t fb = ptx::smem_addr(&full[b]);
      const std::uint32_t d = ptx::smem_addr(smem + static_cast<std::size_t>(b) * stage_bytes);
      if (variant == 0 || variant == 2) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(fb),
                     "r"(stage_bytes)
                     : "memory");
      } else if (variant == 3) {
        asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;" ::"r"(fb),
                     "r"(stage_bytes)
                     : "memory");
      }
      for (int i = 0; i < k; ++i) {
        if (variant == 1) ptx::mbar_expect_tx(fb, static_cast<std::uint32_t>(req));
        ptx::bulk_g2s(d + i * req,
                      src + (i % 8) * stream_bytes + base + static_cast<std::int64_t>(j) * req +
                          (i / 8) * 4096,
                      static_cast<std::uint32_t>(req), fb);
      }
      if (variant == 1) ptx::mbar_arrive(fb);
    }
  } else {
    unsigned acc = 0;
    for (int j = 0; j < stages_per_cta; ++j) {
      const int b = j % depth;
      const unsigned use = j / depth;
      ptx::mbar_wait(ptx::smem_addr(&full[b]), use & 1u, "probe full");
      acc += reinterpret_cast<const unsigned*>(smem + static_cast<std::size_t>(b) *
                                                          stage_bytes)[threadIdx.x - 32];
      ptx::mbar_arrive(ptx::smem_addr(&empty[b]));
    }
    if (acc == 0x12345678u) sink[0] = acc;
  }
}

}  // namespace

int main() {
  try {
    const std::int64_t stream_bytes = 512ll << 20;  // 8 streams x 512 MB: far beyond the L2
    void* src = nullptr;
    unsigned* sink = nullptr;
    TIDE_CUDA_CHECK(cudaMalloc(&src, static_cast<std::size_t>(8 * stream_bytes)));
    TIDE_CUDA_CHECK(cudaMalloc(&sink, 64));
    TIDE_CUDA_CHECK(cudaMemset(src, 1, static_cast<std::size_t>(8 * stream_bytes)));
    TIDE_CUDA_CHECK(
        cudaFuncSetAttribute(&probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
    cudaEvent_t e0, e1;
    TIDE_CUDA_CHECK(cudaEventCreate(&e0));
    TIDE_CUDA_CHECK(cudaEventCreate(&e1));
    std::printf("copy probe: bulk copies global -> shared, 8 streams, 64 MB per CTA (from HBM)\n");
    std::printf("%-34s %6s %3s %6s %9s | %8s %8s | %s\n", "variant", "req", "k", "depth",
                "inflight", "1 CTA", "4 CTAs", "us/stage");
    const char* names[] = {"lane0 arrive.expect_tx, copies", "lane0 expect_tx per copy, arrive",
                           "lane=stage arrive.expect_tx", "lane0 arrive.expect_tx.relaxed"};
    struct Cfg {
      int req, k, depth;
    };
    const Cfg cfgs[] = {{8192, 1, 4}, {8192, 1, 8}, {8192, 8, 2},
                        {8192, 8, 3}, {4096, 8, 4}, {16384, 4, 3}};
    for (int variant = 0; variant < 4; ++variant) {
      for (const Cfg& c : cfgs) {
        const int stage = c.req * c.k;
        if (static_cast<long>(stage) * c.depth > 210 * 1024) continue;
        double gbps[2] = {0, 0};
        double us = 0;
        int idx = 0;
        for (int ctas : {1, 4}) {
          const std::int64_t bytes_per_cta = 64ll << 20;
          const int stages = static_cast<int>(bytes_per_cta / stage);
          std::vector<float> t;
          for (int rep = 0; rep < 3; ++rep) {
            TIDE_CUDA_CHECK(cudaEventRecord(e0));
            probe<<<ctas, 160, static_cast<std::size_t>(stage) * c.depth>>>(
                static_cast<const unsigned char*>(src) + rep * (64ll << 20) * 0, stream_bytes,
                c.req, c.k, c.depth, stages, variant, sink);
            TIDE_CUDA_CHECK_LAUNCH();
            TIDE_CUDA_CHECK(cudaEventRecord(e1));
            TIDE_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms);
          }
          std::sort(t.begin(), t.end());
          gbps[idx++] = static_cast<double>(bytes_per_cta) / (t[1] * 1e-3) / 1e9;
          if (ctas == 1) us = t[1] * 1e3 / stages;
        }
        std::printf("%-34s %6d %3d %6d %8dK | %8.1f %8.1f | %.3f\n", names[variant], c.req, c.k,
                    c.depth, stage * c.depth / 1024, gbps[0], gbps[1], us);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "copy_probe: %s\n", e.what());
    return 1;
  }
}
