// Probe (not a test): how fast can one CTA pull global memory into shared memory with the bulk
// copy engine (cp.async.bulk + mbarrier transaction counts) on this GPU? The evidence behind
// the Level 1 sum's pipeline shape (docs/kernels.md).
//
// One producer warp streams 32 MB per CTA (contiguous) into a ring of `depth` stages; each
// stage is `k` bulk requests of `req` bytes completing on one full mbarrier; 4 consumer warps
// wait, touch one word per thread and release the stage (empty mbarrier, 128 arrivals).
// Waits use mbarrier.try_wait (may suspend) or mbarrier.test_wait (pure spin).
// Prints GB/s per CTA for 1 and 4 CTAs.
//
// Timeline mode (after the table; alone with --timeline): one CTA, one bulk copy per stage,
// depth 2/4/8, 2 KB and 8 KB requests; the producer lane stamps %globaltimer and %clock64 when
// it issues stage j's copy, a consumer lane when it sees stage j full, for 256 stages. Printed:
// issue-to-full latency, spacing of issues and of completions, stages in flight at each issue.
// Reading it: with `depth` stages in flight, a copy engine that overlaps requests keeps the
// issue-to-full latency flat and the completion spacing falls as latency / depth; one that
// serialises them keeps the completion spacing flat (one copy time) and the latency grows as
// depth x that spacing. In-flight counts near 1 mean the producer loop itself (its empty
// wait, or the consumer's release) is what serialises.
//
// Issuer mode (after the timeline; alone with --issuers): bulk copies issued by 1..16 warps, or
// by 4..16 lanes of one warp, each issuer with its own slots and barriers (run_issuers).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ptx.cuh"
#include "tide/cuda/check.hpp"

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

constexpr int kTimelineStages = 256;

struct Stamp {
  unsigned long long issue_ns, full_ns, issue_clk, full_clk;
};

__device__ __forceinline__ unsigned long long clock64_now() {
  unsigned long long c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}

// One CTA: warp 0 lane 0 issues stage j's single bulk copy of `req` bytes into slot j % depth
// (after the consumers released it) and stamps the issue; warp 1 waits for each stage, lane 0
// stamps the moment it sees the stage full, and all 32 lanes release it (empty, 32 arrivals).
__global__ void __launch_bounds__(64, 1)
    timeline_probe(const unsigned char* src, int req, int depth, Stamp* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long full[8], empty[8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int b = 0; b < depth; ++b) {
      ptx::mbar_init(ptx::smem_addr(&full[b]), 1);
      ptx::mbar_init(ptx::smem_addr(&empty[b]), 32);
    }
    ptx::fence_mbar_init();
  }
  __syncthreads();
  if (warp == 0) {
    if (lane != 0) return;
    for (int j = 0; j < kTimelineStages; ++j) {
      const int b = j % depth;
      const unsigned use = j / depth;
      if (use > 0) ptx::mbar_wait(ptx::smem_addr(&empty[b]), (use - 1) & 1u, "timeline empty");
      const unsigned long long t = ptx::globaltimer();
      const unsigned long long c = clock64_now();
      const std::uint32_t fb = ptx::smem_addr(&full[b]);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(fb), "r"(req)
                   : "memory");
      ptx::bulk_g2s(ptx::smem_addr(smem + static_cast<std::size_t>(b) * req),
                    src + static_cast<std::int64_t>(j) * req, static_cast<std::uint32_t>(req), fb);
      out[j].issue_ns = t;
      out[j].issue_clk = c;
    }
  } else {
    unsigned acc = 0;
    for (int j = 0; j < kTimelineStages; ++j) {
      const int b = j % depth;
      ptx::mbar_wait(ptx::smem_addr(&full[b]), (j / depth) & 1u, "timeline full");
      if (lane == 0) {
        out[j].full_ns = ptx::globaltimer();
        out[j].full_clk = clock64_now();
      }
      acc += reinterpret_cast<const unsigned*>(smem + static_cast<std::size_t>(b) * req)[lane];
      ptx::mbar_arrive(ptx::smem_addr(&empty[b]));
    }
    if (acc == 0x12345678u) out[0].full_clk = acc;
  }
}

// Issuer mode (--issuers): do bulk copies issued by different warps, or by different lanes of
// one warp, overlap? One CTA of `warps` warps; lanes 0..lanes-1 of each warp are independent
// issuers, each with its own ring of `depth` slots of `req` bytes and its own full barriers:
// it issues copies into its slots, and before reusing a slot waits for that slot's copy and
// reads one word of it (a self-consuming stream; no consumer warps, no empty barriers). Each
// issuer streams `per_issuer` bytes from its own contiguous range. If copies from different
// issuers overlap, GB/s per CTA grows with the number of issuers at a fixed req and depth.
constexpr int kMaxIssuers = 16;
constexpr int kMaxIssuerDepth = 4;

__global__ void __launch_bounds__(512, 1)
    issuer_probe(const unsigned char* src, std::int64_t per_issuer, int req, int depth, int lanes,
                 unsigned* sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long full[kMaxIssuers * kMaxIssuerDepth];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int issuers = static_cast<int>(blockDim.x / 32) * lanes;
  if (threadIdx.x == 0) {
    for (int b = 0; b < issuers * depth; ++b)
      ptx::mbar_init(ptx::smem_addr(&full[b]), 1);
    ptx::fence_mbar_init();
  }
  __syncthreads();
  if (lane >= lanes) return;
  const int me = warp * lanes + lane;
  const unsigned char* from =
      src + (static_cast<std::int64_t>(blockIdx.x) * issuers + me) * per_issuer;
  unsigned char* slots = smem + static_cast<std::size_t>(me) * depth * req;
  const int n = static_cast<int>(per_issuer / req);
  unsigned acc = 0;
  for (int j = 0; j < n + depth; ++j) {
    const int b = j % depth;
    const std::uint32_t fb = ptx::smem_addr(&full[me * depth + b]);
    if (j >= depth) {
      ptx::mbar_wait(fb, static_cast<std::uint32_t>((j / depth - 1) & 1), "issuer full");
      acc += *reinterpret_cast<const unsigned*>(slots + static_cast<std::size_t>(b) * req);
    }
    if (j < n) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(fb), "r"(req)
                   : "memory");
      ptx::bulk_g2s(ptx::smem_addr(slots + static_cast<std::size_t>(b) * req),
                    from + static_cast<std::int64_t>(j) * req, static_cast<std::uint32_t>(req), fb);
    }
  }
  if (acc == 0x12345678u) sink[0] = acc;
}

// Prints GB/s per CTA (1 CTA and 4 CTAs) for issuers = warps x lanes in {1, 2, 4, 8, 16 warps of
// 1 lane; 1 warp of 4, 8, 16 lanes}, req 4 KB and 16 KB, depth 2 and 4 (where it fits), from
// `src` (>= 3 GB: every launch reads bytes the previous 60 MB of launches did not).
void run_issuers(const unsigned char* src, unsigned* sink) {
  TIDE_CUDA_CHECK(
      cudaFuncSetAttribute(&issuer_probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  cudaEvent_t e0, e1;
  TIDE_CUDA_CHECK(cudaEventCreate(&e0));
  TIDE_CUDA_CHECK(cudaEventCreate(&e1));
  std::printf(
      "\nissuers: bulk copies from W warps x I lanes per CTA, each issuer its own ring of depth "
      "slots and barriers, 16 MB per CTA (from HBM); GB/s per CTA\n");
  std::printf("%6s %6s %5s %5s %8s | %8s %8s\n", "warps", "lanes", "req", "depth", "inflight",
              "1 CTA", "4 CTAs");
  struct Cfg {
    int warps, lanes;
  };
  const Cfg cfgs[] = {{1, 1}, {2, 1}, {4, 1}, {8, 1}, {16, 1}, {1, 4}, {1, 8}, {1, 16}};
  std::int64_t offset = 0;
  for (int req : {4096, 16384}) {
    for (int depth : {2, 4}) {
      for (const Cfg& c : cfgs) {
        const int issuers = c.warps * c.lanes;
        const std::size_t smem = static_cast<std::size_t>(issuers) * depth * req;
        if (smem > 200 * 1024) continue;
        const std::int64_t per_cta = 16ll << 20;
        const std::int64_t per_issuer = per_cta / issuers;
        double gbps[2] = {0, 0};
        int idx = 0;
        for (int ctas : {1, 4}) {
          std::vector<float> t;
          for (int rep = 0; rep < 3; ++rep) {
            // Fresh bytes every launch (the L2 holds 60 MB): walk a 3 GB window.
            const std::int64_t bytes = ctas * per_cta;
            if (offset + bytes > (3ll << 30)) offset = 0;
            TIDE_CUDA_CHECK(cudaEventRecord(e0));
            issuer_probe<<<ctas, 32 * c.warps, smem>>>(src + offset, per_issuer, req, depth,
                                                       c.lanes, sink);
            offset += bytes;
            TIDE_CUDA_CHECK_LAUNCH();
            TIDE_CUDA_CHECK(cudaEventRecord(e1));
            TIDE_CUDA_CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms);
          }
          std::sort(t.begin(), t.end());
          gbps[idx++] = static_cast<double>(per_cta) / (t[1] * 1e-3) / 1e9;
        }
        std::printf("%6d %6d %5d %5d %7zuK | %8.1f %8.1f\n", c.warps, c.lanes, req, depth,
                    smem / 1024, gbps[0], gbps[1]);
      }
    }
  }
  TIDE_CUDA_CHECK(cudaEventDestroy(e0));
  TIDE_CUDA_CHECK(cudaEventDestroy(e1));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Runs the timeline for depth 2/4/8 and 2 KB/8 KB requests and prints one line each; stages
// [depth, 256) are the steady state (the first `depth` issues do not wait).
void run_timeline(const unsigned char* src) {
  Stamp* dev = nullptr;
  TIDE_CUDA_CHECK(cudaMalloc(&dev, kTimelineStages * sizeof(Stamp)));
  TIDE_CUDA_CHECK(cudaFuncSetAttribute(&timeline_probe, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       64 * 1024));
  std::printf(
      "\ntimeline: 1 CTA, 1 bulk copy per stage, %d stages from HBM; medians over stages "
      "[depth, %d) in ns (globaltimer | clock64 scaled by the run's cycles per ns)\n",
      kTimelineStages, kTimelineStages);
  std::printf("%6s %5s | %17s | %17s | %17s | %9s %9s | %8s | %s\n", "req", "depth", "issue->full",
              "issue spacing", "full spacing", "inflight", "max", "GB/s", "globaltimer step");
  std::int64_t offset = 0;
  for (int req : {2048, 8192}) {
    for (int depth : {2, 4, 8}) {
      TIDE_CUDA_CHECK(cudaMemset(dev, 0, kTimelineStages * sizeof(Stamp)));
      timeline_probe<<<1, 64, static_cast<std::size_t>(req) * depth>>>(src + offset, req, depth,
                                                                       dev);
      TIDE_CUDA_CHECK_LAUNCH();
      TIDE_CUDA_CHECK(cudaDeviceSynchronize());
      offset += static_cast<std::int64_t>(kTimelineStages) * req;  // fresh bytes: not in L2
      std::vector<Stamp> st(kTimelineStages);
      TIDE_CUDA_CHECK(
          cudaMemcpy(st.data(), dev, st.size() * sizeof(Stamp), cudaMemcpyDeviceToHost));
      const int n = kTimelineStages;
      const double cyc_per_ns =
          static_cast<double>(st[n - 1].full_clk - st[0].issue_clk) /
          static_cast<double>(std::max<unsigned long long>(1, st[n - 1].full_ns - st[0].issue_ns));
      std::vector<double> lat, lat_c, iss, iss_c, ful, ful_c, infl;
      unsigned long long step = ~0ull;
      int max_infl = 0;
      for (int j = depth; j < n; ++j) {
        lat.push_back(static_cast<double>(st[j].full_ns - st[j].issue_ns));
        lat_c.push_back(static_cast<double>(st[j].full_clk - st[j].issue_clk) / cyc_per_ns);
        iss.push_back(static_cast<double>(st[j].issue_ns - st[j - 1].issue_ns));
        iss_c.push_back(static_cast<double>(st[j].issue_clk - st[j - 1].issue_clk) / cyc_per_ns);
        ful.push_back(static_cast<double>(st[j].full_ns - st[j - 1].full_ns));
        ful_c.push_back(static_cast<double>(st[j].full_clk - st[j - 1].full_clk) / cyc_per_ns);
        // Stages issued but not yet seen full when stage j is issued (clock64: same SM).
        int k = 0;
        for (int i = 0; i <= j; ++i)
          k += st[i].issue_clk <= st[j].issue_clk && st[i].full_clk > st[j].issue_clk;
        infl.push_back(k);
        max_infl = std::max(max_infl, k);
        for (const unsigned long long d :
             {st[j].issue_ns - st[j - 1].issue_ns, st[j].full_ns - st[j - 1].full_ns}) {
          if (d > 0) step = std::min(step, d);
        }
      }
      const double gbps = req / median(ful_c);
      std::printf(
          "%6d %5d | %7.0f | %7.0f | %7.0f | %7.0f | %7.0f | %7.0f | %9.1f %9d | %8.1f | %llu ns\n",
          req, depth, median(lat), median(lat_c), median(iss), median(iss_c), median(ful),
          median(ful_c), median(infl), max_infl, gbps, step);
    }
  }
  TIDE_CUDA_CHECK(cudaFree(dev));
}

}  // namespace

int main(int argc, char** argv) {
  const bool timeline_only = argc > 1 && std::strcmp(argv[1], "--timeline") == 0;
  const bool issuers_only = argc > 1 && std::strcmp(argv[1], "--issuers") == 0;
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
    // The timeline reads bytes the table never touches (stream 7 past its first 256 MB).
    const unsigned char* fresh =
        static_cast<const unsigned char*>(src) + 7 * stream_bytes + (384ll << 20);
    if (timeline_only) {
      run_timeline(fresh);
      return 0;
    }
    if (issuers_only) {
      run_issuers(static_cast<const unsigned char*>(src), sink);
      return 0;
    }
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
    run_timeline(fresh);
    run_issuers(static_cast<const unsigned char*>(src), sink);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "copy_probe: %s\n", e.what());
    return 1;
  }
}
