// Level 1 sum kernel of TIDE-RS (paper Sec. 4.1 "Keeping pace with the rail", Sec. 2.4
// "Architectural synthesis", Sec. 4.3 numerical semantics, App. G BW_sum).
//
// Work: one outbox block of `rows` x `width` fp32 node partials. The block is cut into tiles of
// `tile_elems` columns of one row; CTA b takes the contiguous tile range
// [b*T/grid, (b+1)*T/grid) and retires when it is done (no persistent polling: Sec. 4.1).
//
// Two kernels compute the same bits (tests/kernels/level1_sum_test.cpp checks both):
//   level1_sum_kernel         the warp-specialised bulk-copy (TMA) pipeline below, the design
//                             of Sec. 4.1; the default Level1Tuning, the faster kernel on a
//                             full grid;
//   level1_sum_direct_kernel  no shared memory: each warp loads its inputs straight into
//                             registers (Level1Tuning::warp_direct), with a lean fast path for
//                             whole, covered, aligned tiles; 3x faster per CTA than the
//                             pipeline at 1..32 CTAs on the H200 (docs/kernels.md), because
//                             one CTA's bulk copies into different stages did not overlap
//                             there. recommended_level1_tuning() picks between them.
//
// Steps, per tile, in a warp-specialised pipeline of `stages` shared-memory stages:
//   1. Producer warp (warp 0) waits until the consumers released the stage (empty barrier),
//      and fences (generic -> async proxy) if its last fill used plain stores.
//   2. It copies into the stage, one slot per input, each slot in tile-column coordinates:
//      the S staged contributions (row r, columns [c0, c0+n)) and, with `accumulate`, the
//      current output row. The 16-byte-aligned middle of each piece goes through the bulk
//      copy engine (cp.async.bulk, completing transaction bytes on the stage's full barrier);
//      heads and tails shorter than 16 bytes, and pieces whose source is not 16-byte
//      congruent with the slot, are copied by the producer's 32 lanes with plain loads.
//   3. It walks the device-resident segment table (built once at registration; a warp-wide
//      search at a row start, then a cursor) and copies every run of the owner's own
//      gradients that meets the tile into the own slot the same way, setting the run's
//      columns in the stage's coverage bitmask. Columns no run covers are padding.
//   4. Each producer lane arrives on the full barrier (count 32) after its plain stores:
//      the phase completes when all lanes arrived and all bulk bytes landed.
//   5. Consumer warps wait on the full barrier, read 8 columns per thread per step with
//      16-byte shared loads, widen bf16 exactly, and compute
//        acc = x[0] + x[1] + ... + x[S-1] + own;  part = alpha * acc;  [out = out + part]
//      with __fadd_rn/__fmul_rn in exactly NOTE [arithmetic order]'s order
//      (include/tide/core/arithmetic.hpp), canonicalise NaN, write +0.0f on padding, and
//      store fp32 straight to global memory (16-byte stores where aligned).
//   6. Every consumer thread arrives on the stage's empty barrier; the producer reuses it.
//
// Synchronisation contract: the caller orders the kernel after the copies that filled the
// staging chunk (stream order or a device-side wait on the same stream) and after the
// gradients were produced; the kernel reads staged data, gradients and (with accumulate) the
// output block, and writes only the output block. Completion is stream order: the staging
// chunk may be reused, and the outbox block sent, after the kernel. Inside the CTA:
// full[s] (32 producer arrivals + bulk transaction bytes) orders stage s's data before the
// consumers' reads; empty[s] (one arrival per consumer thread) orders their reads before the
// next refill of stage s; a proxy fence precedes a bulk copy into bytes last written by plain
// stores (NOTE [proxy fence]). Every wait is bounded (20 s, then a printf and a trap).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ptx.cuh"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/level1_sum.hpp"

namespace tide::kernels {
namespace {

using detail::Level1SumParams;

constexpr int kMaxStages = 4;
constexpr int kMaxConsumerWarps = 12;
constexpr int kChunk = 8;  // columns per consumer thread and step

__device__ __forceinline__ std::uint32_t umin(std::uint32_t a, std::uint32_t b) {
  return a < b ? a : b;
}
__device__ __forceinline__ std::uint32_t umax(std::uint32_t a, std::uint32_t b) {
  return a > b ? a : b;
}

// ---------------------------------------------------------------------------------------
// Producer helpers (warp 0, all 32 lanes call them uniformly).

// Plain element copy of the byte ranges [0, head) and [tail, nbytes) of a piece, spread over
// the warp's lanes; each lane batches 8 loads before its stores.
template <typename E>
__device__ __forceinline__ void plain_copy(unsigned char* dst, const unsigned char* src,
                                           std::uint32_t head, std::uint32_t tail,
                                           std::uint32_t nbytes, int lane) {
  const std::uint32_t n_head = head / sizeof(E);
  const std::uint32_t total = n_head + (nbytes - tail) / sizeof(E);
  for (std::uint32_t base = 0; base < total; base += 32 * 8) {
    E v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const std::uint32_t e = base + u * 32 + lane;
      if (e < total) {
        const std::uint32_t off = e < n_head ? e * sizeof(E) : tail + (e - n_head) * sizeof(E);
        v[u] = *reinterpret_cast<const E*>(src + off);
      }
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const std::uint32_t e = base + u * 32 + lane;
      if (e < total) {
        const std::uint32_t off = e < n_head ? e * sizeof(E) : tail + (e - n_head) * sizeof(E);
        *reinterpret_cast<E*>(dst + off) = v[u];
      }
    }
  }
}

// Copies `nbytes` from global `src` to shared `dst`: the 16-byte-aligned middle by the bulk
// copy engine (lane 0 registers its bytes on `full` first), the rest by plain loads.
// Returns true when it wrote shared memory through the generic proxy (plain stores).
template <typename E>
__device__ __forceinline__ bool copy_piece(unsigned char* dst, const unsigned char* src,
                                           std::uint32_t nbytes, std::uint32_t full, int lane) {
  const std::uint32_t d = ptx::smem_addr(dst);
  const auto a = reinterpret_cast<std::uintptr_t>(src);
  std::uint32_t head = nbytes;
  std::uint32_t mid = 0;
  if (((a ^ d) & 15u) == 0) {
    head = umin((16u - static_cast<std::uint32_t>(a & 15u)) & 15u, nbytes);
    mid = (nbytes - head) & ~15u;
  }
  const std::uint32_t tail = head + mid;
  if (mid != 0 && lane == 0) {
    ptx::mbar_expect_tx(full, mid);
    ptx::bulk_g2s(d + head, src + head, mid, full);
  }
  if (head != 0 || tail != nbytes) {
    plain_copy<E>(dst, src, head, tail, nbytes, lane);
    return true;
  }
  return false;
}

// Sets bits [a, b) of the coverage bitmask.
__device__ __forceinline__ void set_mask(std::uint32_t* mask, std::uint32_t a, std::uint32_t b,
                                         int lane) {
  for (std::uint32_t w = a / 32 + lane; w <= (b - 1) / 32; w += 32) {
    const std::uint32_t lo = umax(a, w * 32) - w * 32;
    const std::uint32_t hi = umin(b, w * 32 + 32) - w * 32;
    const std::uint32_t bits = (hi - lo == 32) ? ~0u : (((1u << (hi - lo)) - 1u) << lo);
    atomicOr(&mask[w], bits);
  }
}

struct RunRef {
  std::int64_t src_offset;
  std::uint32_t dst_col;
  std::uint32_t length;
  std::uint32_t param;
};

// A warp-wide window of 32 consecutive runs: lane l holds run base + l.
struct RunCache {
  std::uint32_t base = 0xFFFFFFFFu;
  RunRef mine{};

  __device__ __forceinline__ RunRef get(const Level1Run* runs, std::uint32_t i, std::uint32_t end,
                                        int lane) {
    if (i - base >= 32u || base == 0xFFFFFFFFu) {
      base = i;
      const std::uint32_t j = i + lane;
      if (j < end) {
        const Level1Run* r = runs + j;
        mine.src_offset = __ldg(&r->src_offset);
        mine.dst_col = __ldg(&r->dst_col);
        mine.length = __ldg(&r->length);
        mine.param = __ldg(&r->param);
      }
    }
    const int from = static_cast<int>(i - base);
    RunRef out;
    out.src_offset = __shfl_sync(~0u, mine.src_offset, from);
    out.dst_col = __shfl_sync(~0u, mine.dst_col, from);
    out.length = __shfl_sync(~0u, mine.length, from);
    out.param = __shfl_sync(~0u, mine.param, from);
    return out;
  }
};

// First run index in [lo, hi) whose end lies after column c (runs sorted, disjoint), or hi.
// Warp-wide: 32 probes per step, two steps for a few hundred runs.
__device__ __forceinline__ std::uint32_t find_first_run(const Level1Run* runs, std::uint32_t lo,
                                                        std::uint32_t hi, std::uint32_t c,
                                                        int lane) {
  while (lo < hi) {
    const std::uint32_t n = hi - lo;
    const std::uint32_t step = (n + 31) / 32;
    const std::uint32_t i = lo + lane * step;
    bool pred = true;
    if (i < hi) pred = __ldg(&runs[i].dst_col) + __ldg(&runs[i].length) > c;
    const std::uint32_t bal = __ballot_sync(~0u, pred);
    if (bal == 0) {
      lo = lo + 31 * step + 1;
      continue;
    }
    const int f = __ffs(bal) - 1;
    if (f == 0) return lo;
    if (step == 1) return umin(lo + f, hi);
    const std::uint32_t new_hi = umin(lo + f * step, hi);
    lo = lo + (f - 1) * step + 1;
    hi = new_hi;
  }
  return lo;
}

// ---------------------------------------------------------------------------------------
// Consumer helpers.

template <typename In>
struct Vec;  // 8 columns of one input slot, as raw registers

template <>
struct Vec<std::uint16_t> {
  uint4 v;
  __device__ __forceinline__ void load(const unsigned char* p) {
    v = *reinterpret_cast<const uint4*>(p);
  }
  // Streaming 16-byte global load (p 16-byte aligned).
  __device__ __forceinline__ void load_global(const unsigned char* p) {
    v = __ldcs(reinterpret_cast<const uint4*>(p));
  }
  // The first n (< 8) elements from global memory, element by element; the rest zero.
  __device__ __forceinline__ void load_global_partial(const unsigned char* p, std::uint32_t n) {
    std::uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (static_cast<std::uint32_t>(e) < n) {
        const std::uint32_t b = __ldcs(reinterpret_cast<const unsigned short*>(p) + e);
        w[e >> 1] |= (e & 1) ? (b << 16) : b;
      }
    }
    v = make_uint4(w[0], w[1], w[2], w[3]);
  }
  __device__ __forceinline__ float get(int e) const {
    const std::uint32_t w = (e >> 1) == 0 ? v.x : (e >> 1) == 1 ? v.y : (e >> 1) == 2 ? v.z : v.w;
    return __uint_as_float((e & 1) ? (w & 0xFFFF0000u) : (w << 16));
  }
  __device__ __forceinline__ void zero() {
    v = make_uint4(0, 0, 0, 0);
  }
  // ORs element e (compile-time after unrolling) loaded from global memory at p.
  __device__ __forceinline__ void or_global_element(int e, const unsigned char* p) {
    const std::uint32_t b =
        static_cast<std::uint32_t>(__ldcs(reinterpret_cast<const unsigned short*>(p)))
        << ((e & 1) * 16);
    if ((e >> 1) == 0)
      v.x |= b;
    else if ((e >> 1) == 1)
      v.y |= b;
    else if ((e >> 1) == 2)
      v.z |= b;
    else
      v.w |= b;
  }
};

template <>
struct Vec<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const unsigned char* p) {
    a = *reinterpret_cast<const float4*>(p);
    b = *reinterpret_cast<const float4*>(p + 16);
  }
  __device__ __forceinline__ void load_global(const unsigned char* p) {
    a = __ldcs(reinterpret_cast<const float4*>(p));
    b = __ldcs(reinterpret_cast<const float4*>(p + 16));
  }
  __device__ __forceinline__ void load_global_partial(const unsigned char* p, std::uint32_t n) {
    float f[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      f[e] =
          static_cast<std::uint32_t>(e) < n ? __ldcs(reinterpret_cast<const float*>(p) + e) : 0.0f;
    }
    a = make_float4(f[0], f[1], f[2], f[3]);
    b = make_float4(f[4], f[5], f[6], f[7]);
  }
  __device__ __forceinline__ float get(int e) const {
    const float4& q = e < 4 ? a : b;
    const int k = e & 3;
    return k == 0 ? q.x : k == 1 ? q.y : k == 2 ? q.z : q.w;
  }
  __device__ __forceinline__ void zero() {
    a = make_float4(0.f, 0.f, 0.f, 0.f);
    b = a;
  }
  __device__ __forceinline__ void or_global_element(int e, const unsigned char* p) {
    const float f = __ldcs(reinterpret_cast<const float*>(p));
    float4& q = e < 4 ? a : b;
    const int k = e & 3;
    if (k == 0)
      q.x = f;
    else if (k == 1)
      q.y = f;
    else if (k == 2)
      q.z = f;
    else
      q.w = f;
  }
};

// NOTE [arithmetic order] on the device, for kChunk columns: the `ns` staged inputs in
// local-rank order, then the owner's own, then one multiply by alpha; round-to-nearest adds
// and multiplies, never contracted. Both Level 1 kernels call this one definition.
// kScale = false skips the multiply and is for alpha == 1 only: 1 * x is x bit for bit except
// for a NaN's payload, which the callers canonicalise (see kArithNanIsCanonical).
template <bool kScale = true, typename In>
__device__ __forceinline__ void level1_combine(const Vec<In> (&staged)[kMaxLevel1Staged],
                                               const Vec<In>& own, int ns, float alpha,
                                               float (&v)[kChunk]) {
  float acc[kChunk];
  if (ns == 0) {
#pragma unroll
    for (int e = 0; e < kChunk; ++e)
      acc[e] = own.get(e);
  } else {
#pragma unroll
    for (int e = 0; e < kChunk; ++e)
      acc[e] = staged[0].get(e);
#pragma unroll
    for (int k = 1; k < kMaxLevel1Staged; ++k) {
      if (k < ns) {
#pragma unroll
        for (int e = 0; e < kChunk; ++e)
          acc[e] = __fadd_rn(acc[e], staged[k].get(e));
      }
    }
#pragma unroll
    for (int e = 0; e < kChunk; ++e)
      acc[e] = __fadd_rn(acc[e], own.get(e));
  }
#pragma unroll
  for (int e = 0; e < kChunk; ++e)
    v[e] = kScale ? __fmul_rn(alpha, acc[e]) : acc[e];
}

// The tiles a worker (CTA, or warp in the warp-direct kernel) processes: a contiguous range
// [first, first + count).
struct TileRange {
  int first, count;
  __device__ __forceinline__ TileRange(std::int64_t worker, std::int64_t workers, int total) {
    first = static_cast<int>(worker * total / workers);
    count = static_cast<int>((worker + 1) * total / workers) - first;
  }
};

struct TileGeom {
  int row;
  std::uint32_t c0;
  std::uint32_t ncols;
};

__device__ __forceinline__ TileGeom tile_geom(const Level1SumParams& p, int t) {
  TileGeom g;
  g.row = t / p.tiles_per_row;
  g.c0 = static_cast<std::uint32_t>(t % p.tiles_per_row) * static_cast<std::uint32_t>(p.tile_elems);
  const std::int64_t rest = p.width - static_cast<std::int64_t>(g.c0);
  g.ncols = static_cast<std::uint32_t>(rest < p.tile_elems ? rest : p.tile_elems);
  return g;
}

template <typename In, bool kAccumulate>
__global__ void __launch_bounds__(32 * (1 + kMaxConsumerWarps), 1)
    level1_sum_kernel(const __grid_constant__ Level1SumParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long full_bar[kMaxStages];
  __shared__ __align__(8) unsigned long long empty_bar[kMaxStages];

  constexpr std::uint32_t esz = sizeof(In);
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int stages = p.stages;
  const std::uint32_t slot_bytes = static_cast<std::uint32_t>(p.tile_elems) * esz;
  // Slots: staged 0..S-1, then own.
  const int own_slot_index = p.num_staged;
  const int nslots_in = own_slot_index + 1;
  const std::uint32_t out_slot_off = static_cast<std::uint32_t>(nslots_in) * slot_bytes;
  const std::uint32_t mask_off =
      out_slot_off + (kAccumulate ? static_cast<std::uint32_t>(p.tile_elems) * 4u : 0u);

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      ptx::mbar_init(ptx::smem_addr(&full_bar[s]), 32);
      ptx::mbar_init(ptx::smem_addr(&empty_bar[s]),
                     static_cast<std::uint32_t>(p.consumer_warps) * 32u);
    }
    ptx::fence_mbar_init();
  }
  __syncthreads();

  const TileRange tiles(blockIdx.x, gridDim.x, p.total_tiles);

  if (warp == 0) {
    // ------------------------------- producer -------------------------------
    RunCache cache;
    int cur_row = -1;
    std::uint32_t seg = 0;
    std::uint32_t seg_end = 0;
    std::uint32_t generic_written = 0;  // bit s: stage s's last fill used plain stores
    for (int j = 0, t = tiles.first; j < tiles.count; ++j, ++t) {
      const int s = j % stages;
      const std::uint32_t use = static_cast<std::uint32_t>(j / stages);
      if (use > 0)
        ptx::mbar_wait(ptx::smem_addr(&empty_bar[s]), (use - 1) & 1u, "level1 stage release");
      // NOTE [proxy fence]
      // The bulk copy engine (async proxy) may overwrite bytes that this warp last wrote with
      // plain stores (generic proxy) only after a proxy fence (MEMBAR.ALL.CTA +
      // FENCE.VIEW.ASYNC.S in SASS), so it is issued after fills that used plain stores, and
      // only then. Consumers' reads need none: the empty barrier (every consumer thread
      // arrives) orders them before the refill.
      if (generic_written & (1u << s)) {
        ptx::fence_proxy_async_smem();
        generic_written &= ~(1u << s);
      }
      bool plain = false;
      unsigned char* st =
          smem + static_cast<std::size_t>(s) * static_cast<std::uint32_t>(p.stage_bytes);
      const std::uint32_t full = ptx::smem_addr(&full_bar[s]);
      const TileGeom g = tile_geom(p, t);
      auto* mask = reinterpret_cast<std::uint32_t*>(st + mask_off);
      for (int w = lane; w < p.tile_elems / 32; w += 32)
        mask[w] = 0;
      __syncwarp();

      // Staged contributions, in local-rank order (slot k).
      for (int k = 0; k < p.num_staged; ++k) {
        const unsigned char* src = p.staged + k * p.staged_stride_bytes +
                                   g.row * p.staged_pitch_bytes +
                                   static_cast<std::int64_t>(g.c0) * esz;
        plain |= copy_piece<In>(st + k * slot_bytes, src, g.ncols * esz, full, lane);
      }
      if constexpr (kAccumulate) {
        const auto* src = reinterpret_cast<const unsigned char*>(p.out + g.row * p.out_pitch +
                                                                 static_cast<std::int64_t>(g.c0));
        plain |= copy_piece<float>(st + out_slot_off, src, g.ncols * 4u, full, lane);
      }

      // Own contribution: the runs of this row that meet [c0, c0 + ncols).
      const Level1Run* runs = p.runs;
      if (g.row != cur_row) {
        cur_row = g.row;
        cache.base = 0xFFFFFFFFu;  // its window may hold another row's runs
        seg_end = p.row_begin[g.row + 1];
        seg = find_first_run(runs, p.row_begin[g.row], seg_end, g.c0, lane);
      } else {
        while (seg < seg_end) {
          const RunRef r = cache.get(runs, seg, seg_end, lane);
          if (r.dst_col + r.length > g.c0) break;
          ++seg;
        }
      }
      unsigned char* own_slot = st + static_cast<std::uint32_t>(own_slot_index) * slot_bytes;
      const std::uint32_t c1 = g.c0 + g.ncols;
      for (std::uint32_t i = seg; i < seg_end; ++i) {
        const RunRef r = cache.get(runs, i, seg_end, lane);
        if (r.dst_col >= c1) break;
        const std::uint32_t a = umax(r.dst_col, g.c0);
        const std::uint32_t b = umin(r.dst_col + r.length, c1);
        if (a >= b) continue;
        const auto* src = static_cast<const unsigned char*>(p.grads[r.param]) +
                          (r.src_offset + (a - r.dst_col)) * static_cast<std::int64_t>(esz);
        plain |= copy_piece<In>(own_slot + (a - g.c0) * esz, src, (b - a) * esz, full, lane);
        set_mask(mask, a - g.c0, b - g.c0, lane);
      }
      if (plain) generic_written |= 1u << s;
      ptx::mbar_arrive(full);
    }
  } else if (warp <= p.consumer_warps) {
    // ------------------------------- consumers ------------------------------
    const int ct = (warp - 1) * 32 + lane;
    const int nct = p.consumer_warps * 32;
    const int ns = p.num_staged;
    const float alpha = p.alpha;
    for (int j = 0, t = tiles.first; j < tiles.count; ++j, ++t) {
      const int s = j % stages;
      const std::uint32_t use = static_cast<std::uint32_t>(j / stages);
      ptx::mbar_wait(ptx::smem_addr(&full_bar[s]), use & 1u, "level1 stage fill");
      const unsigned char* st =
          smem + static_cast<std::size_t>(s) * static_cast<std::uint32_t>(p.stage_bytes);
      const TileGeom g = tile_geom(p, t);
      const auto* mask = reinterpret_cast<const std::uint32_t*>(st + mask_off);
      float* orow = p.out + g.row * p.out_pitch + static_cast<std::int64_t>(g.c0);
      const bool vec_out = (reinterpret_cast<std::uintptr_t>(orow) & 15u) == 0;
      const int nchunks = static_cast<int>((g.ncols + kChunk - 1) / kChunk);
      // kU chunks per thread and trip (2 for bf16, 1 for fp32, whose vectors are twice as
      // wide): all their loads are issued before any arithmetic.
      constexpr int kU = sizeof(In) == 2 ? 2 : 1;
      for (int q0 = ct; q0 < nchunks; q0 += kU * nct) {
        Vec<In> x[kU][kMaxLevel1Staged];
        Vec<In> own[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int q = q0 + u * nct;
          if (q < nchunks) {
            const std::uint32_t off = static_cast<std::uint32_t>(q) * kChunk * esz;
#pragma unroll
            for (int k = 0; k < kMaxLevel1Staged; ++k) {
              if (k < ns) x[u][k].load(st + k * slot_bytes + off);
            }
            own[u].load(st + static_cast<std::uint32_t>(own_slot_index) * slot_bytes + off);
          }
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int q = q0 + u * nct;
          if (q >= nchunks) break;
          const std::uint32_t c = static_cast<std::uint32_t>(q) * kChunk;
          const std::uint32_t m = (mask[c / 32] >> (c & 31u)) & 0xFFu;
          float v[kChunk];
          level1_combine(x[u], own[u], ns, alpha, v);
          if constexpr (kAccumulate) {
            Vec<float> o;
            o.load(st + out_slot_off + c * 4u);
#pragma unroll
            for (int e = 0; e < kChunk; ++e)
              v[e] = __fadd_rn(o.get(e), v[e]);
          }
#pragma unroll
          for (int e = 0; e < kChunk; ++e)
            v[e] = ((m >> e) & 1u) ? ptx::canonical(v[e]) : 0.0f;
          if (vec_out && c + kChunk <= g.ncols) {
            reinterpret_cast<float4*>(orow + c)[0] = make_float4(v[0], v[1], v[2], v[3]);
            reinterpret_cast<float4*>(orow + c)[1] = make_float4(v[4], v[5], v[6], v[7]);
          } else {
#pragma unroll
            for (int e = 0; e < kChunk; ++e) {
              if (c + e < g.ncols) orow[c + e] = v[e];
            }
          }
        }
      }
      // Every consumer thread arrives (count 32 x consumer warps): each releases its own reads.
      ptx::mbar_arrive(ptx::smem_addr(&empty_bar[s]));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Warp-direct variant (Level1Tuning::warp_direct): no shared memory, no barriers.

// NaN results of FADD/FMUL on the GPU are the canonical 0x7FFFFFFF (NOTE [arithmetic order]
// states it; the NaN-payload tests of tests/kernels/level1_sum_test.cpp check it on every
// path). So a result that went through at least one add or multiply needs no select; only a
// value no arithmetic touched (one input, alpha == 1 specialised away, no accumulate) does.
// Setting this to false restores a select on every element of the fast path.
constexpr bool kArithNanIsCanonical = true;

// Fast path of the warp-direct kernel (Sec. 4.1, App. G BW_sum): `nchunks` consecutive warp
// chunks (32 lanes x 8 columns) of one row that are all real columns, all covered by one run
// of the owner's gradients, with every staged row, the own source and the output 16-byte
// aligned. Pointers are this lane's first column: s0 + k * stride staged contribution k, own,
// out.
// Steps: kD chunks of loads are kept in flight (a rolling window over the stretch): compute
// the oldest chunk in NOTE [arithmetic order], store it with two 16-byte stores, then reuse
// its registers for the chunk kD ahead. No coverage masks, padding selects, tile geometry or
// 64-bit index arithmetic per element; three pointers advance once per kD chunks. kNs is the
// staged count when known at compile time (7: L = 8), else -1; kScale = false for alpha == 1.
// kDepth is kD: 4 chunks of 8 x 16 B per thread for bf16, L = 8, no accumulate (a kernel of
// 8 warps: up to 255 registers per thread); 1 elsewhere (fp32's chunk is 64 registers; accumulate
// and a staged count known only at run time spill with 2).
// Synchronisation: none inside (each lane reads and writes its own columns); the kernel's
// stream-order contract covers the rest.
template <typename In, bool kAccumulate, int kNs, bool kScale, int kDepth>
__device__ __forceinline__ void direct_fast_stretch(const unsigned char* s0, std::uint32_t stride,
                                                    const unsigned char* own, float* out,
                                                    int nchunks, int ns_rt, float alpha) {
  constexpr int kD = kDepth;
  constexpr std::uint32_t kInBytes = 32 * kChunk * sizeof(In);  // one warp chunk, one input
  constexpr int kOutElems = 32 * kChunk;
  const int ns = kNs >= 0 ? kNs : ns_rt;
  // A NaN that no add or multiply produced keeps its payload: canonicalise it.
  const bool select_nan = !kArithNanIsCanonical || (!kScale && !kAccumulate && ns == 0);

  Vec<In> x[kD][kMaxLevel1Staged];
  Vec<In> ow[kD];
  Vec<float> old[kD];
  // Loads chunk slot b from byte offset `off` (bf16/fp32 inputs) of the current pointers.
  auto load = [&](int b, std::uint32_t off) {
#pragma unroll
    for (int k = 0; k < kMaxLevel1Staged; ++k) {
      // s0 + k * stride is one IMAD.WIDE.U32; off is the load's immediate.
      if (k < ns) x[b][k].load_global(s0 + static_cast<std::uint64_t>(stride) * k + off);
    }
    ow[b].load_global(own + off);
    if constexpr (kAccumulate) {
      const float* o = out + off / sizeof(In);
      old[b].a = reinterpret_cast<const float4*>(o)[0];
      old[b].b = reinterpret_cast<const float4*>(o)[1];
    }
  };
#pragma unroll
  for (int b = 0; b < kD; ++b) {
    if (b < nchunks) load(b, b * kInBytes);
  }
  for (int i0 = 0; i0 < nchunks; i0 += kD) {
#pragma unroll
    for (int b = 0; b < kD; ++b) {
      if (i0 + b >= nchunks) break;
      float v[kChunk];
      level1_combine<kScale>(x[b], ow[b], ns, alpha, v);
      if constexpr (kAccumulate) {
#pragma unroll
        for (int e = 0; e < kChunk; ++e)
          v[e] = __fadd_rn(old[b].get(e), v[e]);
      }
      if (select_nan) {
#pragma unroll
        for (int e = 0; e < kChunk; ++e)
          v[e] = ptx::canonical(v[e]);
      }
      float4* o = reinterpret_cast<float4*>(out + b * kOutElems);
      o[0] = make_float4(v[0], v[1], v[2], v[3]);
      o[1] = make_float4(v[4], v[5], v[6], v[7]);
      if (i0 + b + kD < nchunks) load(b, (b + kD) * kInBytes);
    }
    s0 += kD * kInBytes;
    own += kD * kInBytes;
    out += kD * kOutElems;
  }
}

// The warp-direct kernel (Sec. 4.1; App. G BW_sum at small CTA budgets). Each warp streams its own
// contiguous range of warp tiles (32 lanes x kU chunks x 8 columns of one row), keeps its own
// cursor into the segment table, and loads every input straight from global memory into
// registers. Steps, per tile:
//   1. tile geometry and the segment-table cursor (warp-wide search at a row start);
//   2. fast path: when the run under the cursor covers this tile and the following ones, and
//      every source and the output are 16-byte aligned, direct_fast_stretch() does all those
//      tiles (as many as the run, the row and the warp's range allow) at once;
//   3. otherwise (padding, run boundaries inside the tile, misaligned data, partial tiles):
//      the general path, one chunk per lane at a time: 7 + 1 loads per chunk (16-byte where
//      aligned, else element by element), the own columns run by run with a coverage mask,
//      then the arithmetic, +0.0f on padding, NaN canonicalised on every element, vector or
//      element stores.
// Same arithmetic, padding and NaN rules as the pipeline above (NOTE [arithmetic order]); the
// fast path is a pure specialisation (the tests compare both with the reference). The host
// picks kNs = 7 when num_staged is 7 (L = 8; else -1, read at run time), kScale = false when
// alpha == 1, and kDepth, the fast path's chunks in flight per thread (4 for bf16, L = 8, no
// accumulate, else 1): one fast loop per kernel keeps every bf16 kernel free of spills.
// kMaxThreads is the launch bound that sets the registers per thread (65536 / kMaxThreads).
// Synchronisation contract: as the pipeline's, without any inside the CTA (no barriers).
template <typename In, bool kAccumulate, int kNs, bool kScale, int kDepth, int kMaxThreads>
__global__ void __launch_bounds__(kMaxThreads)
    level1_sum_direct_kernel(const __grid_constant__ Level1SumParams p) {
  static_assert(kDepth == 1 || (sizeof(In) == 2 && !kAccumulate && kNs == kMaxLevel1Staged),
                "the deeper fast path is for bf16, L = 8, no accumulate");
  constexpr std::uint32_t esz = sizeof(In);
  constexpr int kU = sizeof(In) == 2 ? 2 : 1;
  constexpr std::uint32_t kTile = kU * 32 * kChunk;  // columns per warp tile (p.tile_elems)
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int wpb = static_cast<int>(blockDim.x) / 32;
  const std::int64_t gw = static_cast<std::int64_t>(blockIdx.x) * wpb + threadIdx.x / 32;
  const std::int64_t nw = static_cast<std::int64_t>(gridDim.x) * wpb;
  const TileRange tiles(gw, nw, p.total_tiles);
  const int ns = p.num_staged;
  const float alpha = p.alpha;
  const bool fast_ok = (p.staged_stride_bytes & 15) == 0 && p.staged_stride_bytes <= 0xFFFFFFFFll;
  RunCache cache;
  int cur_row = -1;
  std::uint32_t seg = 0;
  std::uint32_t seg_end = 0;
  for (int j = 0, t = tiles.first; j < tiles.count;) {
    const TileGeom g = tile_geom(p, t);
    const unsigned char* srow =
        p.staged + g.row * p.staged_pitch_bytes + static_cast<std::int64_t>(g.c0) * esz;
    float* orow = p.out + g.row * p.out_pitch + static_cast<std::int64_t>(g.c0);
    // 1. The segment-table cursor: the first run of this row that ends after c0.
    if (g.row != cur_row) {
      cur_row = g.row;
      cache.base = 0xFFFFFFFFu;
      seg_end = p.row_begin[g.row + 1];
      seg = find_first_run(p.runs, p.row_begin[g.row], seg_end, g.c0, lane);
    } else {
      while (seg < seg_end) {
        const RunRef r = cache.get(p.runs, seg, seg_end, lane);
        if (r.dst_col + r.length > g.c0) break;
        ++seg;
      }
    }
    // 2. Fast path: n whole tiles from t inside one run, everything 16-byte aligned.
    const std::uintptr_t srow_bits = ns == 0 ? 0 : reinterpret_cast<std::uintptr_t>(srow);
    if (fast_ok && seg < seg_end && g.ncols == kTile &&
        ((srow_bits | reinterpret_cast<std::uintptr_t>(orow)) & 15u) == 0) {
      const RunRef r = cache.get(p.runs, seg, seg_end, lane);
      const unsigned char* own = r.dst_col <= g.c0
                                     ? static_cast<const unsigned char*>(p.grads[r.param]) +
                                           (r.src_offset + (g.c0 - r.dst_col)) * esz
                                     : nullptr;
      if (own != nullptr && (reinterpret_cast<std::uintptr_t>(own) & 15u) == 0) {
        const std::uint32_t in_run = (r.dst_col + r.length - g.c0) / kTile;
        const std::uint32_t in_row = static_cast<std::uint32_t>((p.width - g.c0) / kTile);
        const std::uint32_t in_range = static_cast<std::uint32_t>(tiles.count - j);
        const int n = static_cast<int>(umin(umin(in_run, in_row), in_range));
        if (n > 0) {
          const std::uint32_t lo = static_cast<std::uint32_t>(lane) * kChunk;
          const unsigned char* s0 = srow + lo * esz;
          const auto sd = static_cast<std::uint32_t>(p.staged_stride_bytes);
          direct_fast_stretch<In, kAccumulate, kNs, kScale, kDepth>(s0, sd, own + lo * esz,
                                                                    orow + lo, n * kU, ns, alpha);
          j += n;
          t += n;
          continue;
        }
      }
    }
    // 3. General path for this one tile, kG = 1 chunk per lane at a time (two would spill
    //    next to the fast loop).
    constexpr int kG = 1;
    const bool svec = ((reinterpret_cast<std::uintptr_t>(srow) |
                        static_cast<std::uintptr_t>(p.staged_stride_bytes)) &
                       15u) == 0;
    const bool vec_out = (reinterpret_cast<std::uintptr_t>(orow) & 15u) == 0;
    const std::uint32_t c1 = g.c0 + g.ncols;
#pragma unroll 1
    for (int u0 = 0; u0 < kU; u0 += kG) {
      Vec<In> x[kG][kMaxLevel1Staged];
      Vec<In> own[kG];
      std::uint32_t m[kG];
      // 3a. Staged contributions (the bulk of the bytes): issue their loads first.
#pragma unroll
      for (int u = 0; u < kG; ++u) {
        own[u].zero();
        m[u] = 0;
        const std::uint32_t c = static_cast<std::uint32_t>((u0 + u) * 32 + lane) * kChunk;
        if (c < g.ncols) {
          const bool whole = svec && c + kChunk <= g.ncols;
#pragma unroll
          for (int k = 0; k < kMaxLevel1Staged; ++k) {
            if (k < ns) {
              const unsigned char* src = srow + k * p.staged_stride_bytes + c * esz;
              if (whole) {
                x[u][k].load_global(src);
              } else {
                x[u][k].load_global_partial(src, umin(g.ncols - c, kChunk));
              }
            }
          }
        }
      }
      // 3b. The owner's contribution: the runs that meet these chunks (warp-uniform loop),
      //     with a coverage mask.
      for (std::uint32_t i = seg; i < seg_end; ++i) {
        const RunRef r = cache.get(p.runs, i, seg_end, lane);
        if (r.dst_col >= c1) break;
        const auto* gbase = static_cast<const unsigned char*>(p.grads[r.param]);
        const std::uint32_t r_end = r.dst_col + r.length;
#pragma unroll
        for (int u = 0; u < kG; ++u) {
          const std::uint32_t cc = g.c0 + static_cast<std::uint32_t>((u0 + u) * 32 + lane) * kChunk;
          if (cc >= c1) continue;
          const std::uint32_t lo = umax(r.dst_col, cc);
          const std::uint32_t hi = umin(umin(r_end, cc + kChunk), c1);
          if (lo >= hi) continue;
          const unsigned char* src0 =
              gbase + (r.src_offset + static_cast<std::int64_t>(cc) - r.dst_col) *
                          static_cast<std::int64_t>(esz);
          if (lo == cc && hi == cc + kChunk &&
              (reinterpret_cast<std::uintptr_t>(src0) & 15u) == 0) {
            own[u].load_global(src0);
            m[u] = 0xFFu;
          } else {
#pragma unroll
            for (int e = 0; e < kChunk; ++e) {
              const std::uint32_t col = cc + static_cast<std::uint32_t>(e);
              if (col >= lo && col < hi) {
                own[u].or_global_element(e, src0 + e * esz);
                m[u] |= 1u << e;
              }
            }
          }
        }
      }
      // 3c. Arithmetic in NOTE [arithmetic order], then store.
#pragma unroll
      for (int u = 0; u < kG; ++u) {
        const std::uint32_t c = static_cast<std::uint32_t>((u0 + u) * 32 + lane) * kChunk;
        if (c >= g.ncols) continue;
        const bool whole_out = vec_out && c + kChunk <= g.ncols;
        float v[kChunk];
        level1_combine(x[u], own[u], ns, alpha, v);
        if constexpr (kAccumulate) {
          Vec<float> o;
          if (whole_out) {
            o.a = reinterpret_cast<const float4*>(orow + c)[0];
            o.b = reinterpret_cast<const float4*>(orow + c)[1];
          } else {
            o.zero();
#pragma unroll
            for (int e = 0; e < kChunk; ++e) {
              if (c + e < g.ncols)
                o.or_global_element(e, reinterpret_cast<const unsigned char*>(orow + c + e));
            }
          }
#pragma unroll
          for (int e = 0; e < kChunk; ++e)
            v[e] = __fadd_rn(o.get(e), v[e]);
        }
#pragma unroll
        for (int e = 0; e < kChunk; ++e)
          v[e] = ((m[u] >> e) & 1u) ? ptx::canonical(v[e]) : 0.0f;
        if (whole_out) {
          reinterpret_cast<float4*>(orow + c)[0] = make_float4(v[0], v[1], v[2], v[3]);
          reinterpret_cast<float4*>(orow + c)[1] = make_float4(v[4], v[5], v[6], v[7]);
        } else {
#pragma unroll
          for (int e = 0; e < kChunk; ++e) {
            if (c + e < g.ncols) orow[c + e] = v[e];
          }
        }
      }
    }
    ++j;
    ++t;
  }
}

// ---------------------------------------------------------------------------------------
// Host side.

[[noreturn]] void invalid(const std::string& what) {
  throw InvalidArgument("launch_level1_sum: " + what);
}

// The warp-direct kernel's warps per CTA: 8 for its deeper fast path (bf16, L = 8, no
// accumulate; 4 chunks in flight per thread), 16 elsewhere (their launch bounds).
// Level1Tuning::direct_warps = 8 selects 8 warps (255 registers a thread) for the other
// instances too.
constexpr int kDeepDirectWarps = 8;
constexpr int kDirectWarps = 16;
// fp32 inputs, when the tuning leaves it to the launcher: 16 warps spill 168-296 bytes a thread
// and still beat 8 spill-free warps by 1.1-1.7x (measured: docs/kernels.md).
constexpr int kFp32DirectWarps = 16;

template <typename In>
constexpr int default_direct_warps() {
  return sizeof(In) == 4 ? kFp32DirectWarps : kDirectWarps;
}

bool deep_direct_applies(DType dt, int num_staged, bool accumulate) {
  return dt == DType::kBf16 && num_staged == kMaxLevel1Staged && !accumulate;
}

int direct_warps_for(const Level1SumArgs& a, const Level1Tuning& tu) {
  if (deep_direct_applies(a.dtype, a.num_staged, a.accumulate)) return kDeepDirectWarps;
  if (tu.direct_warps != 0) return tu.direct_warps;
  return a.dtype == DType::kFp32 ? kFp32DirectWarps : kDirectWarps;
}

// The warp-direct kernel for these parameters: L = 8 (kNs = 7) or a run-time staged count,
// alpha == 1 (no multiply) or not, kThreads a CTA, and the deeper fast path for bf16, L = 8,
// no accumulate.
template <typename In, bool kAccumulate, int kThreads>
auto pick_direct_kernel(const Level1SumParams& p) {
  const bool scale = p.alpha != 1.0f;
  if (p.num_staged != kMaxLevel1Staged) {
    return scale ? &level1_sum_direct_kernel<In, kAccumulate, -1, true, 1, kThreads>
                 : &level1_sum_direct_kernel<In, kAccumulate, -1, false, 1, kThreads>;
  }
  constexpr int k7 = kMaxLevel1Staged;
  if constexpr (sizeof(In) == 2 && !kAccumulate) {
    constexpr int kDeepThreads = 32 * kDeepDirectWarps;
    return scale ? &level1_sum_direct_kernel<In, false, k7, true, 4, kDeepThreads>
                 : &level1_sum_direct_kernel<In, false, k7, false, 4, kDeepThreads>;
  } else {
    return scale ? &level1_sum_direct_kernel<In, kAccumulate, k7, true, 1, kThreads>
                 : &level1_sum_direct_kernel<In, kAccumulate, k7, false, 1, kThreads>;
  }
}

// Host-side caches of the launcher (per-launch driver queries are off the enqueue path):
// the opt-in shared memory limit per device, and the largest dynamic shared memory size
// already granted per (kernel, device). Granting a size allows every smaller launch.
constexpr int kCachedDevices = 64;

int max_smem_optin(int device) {
  static std::atomic<int> cache[kCachedDevices] = {};
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached) {
    const int v = cache[device].load(std::memory_order_relaxed);
    if (v > 0) return v;
  }
  int value = 0;
  TIDE_CUDA_CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (cached) cache[device].store(value, std::memory_order_relaxed);
  return value;
}

void allow_dynamic_smem(const void* kernel, int smem_bytes) {
  struct Grant {
    const void* kernel;
    int device;
    int bytes;
  };
  static std::mutex mutex;
  static std::vector<Grant> grants;
  int device = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  for (Grant& g : grants) {
    if (g.kernel != kernel || g.device != device) continue;
    if (g.bytes >= smem_bytes) return;
    TIDE_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    g.bytes = smem_bytes;
    return;
  }
  TIDE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  grants.push_back({kernel, device, smem_bytes});
}

template <typename In, bool kAccumulate>
void launch_typed(const Level1SumParams& p, int grid, int threads, int smem_bytes,
                  cudaStream_t stream, bool warp_direct) {
  if (warp_direct) {
    // 8 warps only for fp32 inputs: the bf16 instances use no spill at 16 (docs/kernels.md).
    auto kernel = (sizeof(In) == 4 && threads == 32 * 8)
                      ? pick_direct_kernel<In, kAccumulate, 32 * 8>(p)
                      : pick_direct_kernel<In, kAccumulate, 32 * kDirectWarps>(p);
    kernel<<<grid, threads, 0, stream>>>(p);
    TIDE_CUDA_CHECK_LAUNCH();
    return;
  }
  auto kernel = &level1_sum_kernel<In, kAccumulate>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem_bytes);
  kernel<<<grid, threads, static_cast<std::size_t>(smem_bytes), stream>>>(p);
  TIDE_CUDA_CHECK_LAUNCH();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Segment table.

Level1SegmentTable::Level1SegmentTable(int rows, std::int64_t width,
                                       std::span<const Level1RunSpec> runs,
                                       std::optional<cudaStream_t> upload) {
  const std::string who = "Level1SegmentTable: ";
  if (rows < 1 || rows > kMaxLevel1Rows) {
    throw InvalidArgument(who + "rows = " + std::to_string(rows) + " is outside [1, 8]");
  }
  if (width < 1 || width > 0x7FFFFFFFll) {
    throw InvalidArgument(who + "width = " + std::to_string(width) + " is outside [1, 2^31)");
  }
  std::vector<Level1RunSpec> sorted(runs.begin(), runs.end());
  std::sort(sorted.begin(), sorted.end(), [](const Level1RunSpec& a, const Level1RunSpec& b) {
    return a.row != b.row ? a.row < b.row : a.dst_col < b.dst_col;
  });
  int max_param = -1;
  host_runs_.reserve(sorted.size());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const Level1RunSpec& r = sorted[i];
    const std::string at = "run " + std::to_string(i) + " (row " + std::to_string(r.row) +
                           ", col " + std::to_string(r.dst_col) + ", length " +
                           std::to_string(r.length) + ")";
    if (r.row < 0 || r.row >= rows) throw InvalidArgument(who + at + ": row outside the block");
    if (r.length < 1) throw InvalidArgument(who + at + ": empty run");
    if (r.dst_col < 0 || r.dst_col + r.length > width) {
      throw InvalidArgument(who + at + ": columns outside [0, " + std::to_string(width) + ")");
    }
    if (r.param < 0 || r.param >= kMaxLevel1Gradients) {
      throw InvalidArgument(who + at + ": param " + std::to_string(r.param) +
                            " is outside [0, 256)");
    }
    if (r.src_offset < 0) throw InvalidArgument(who + at + ": negative source offset");
    if (i > 0 && sorted[i - 1].row == r.row &&
        sorted[i - 1].dst_col + sorted[i - 1].length > r.dst_col) {
      throw InvalidArgument(who + at + ": overlaps the previous run of its row");
    }
    max_param = std::max(max_param, r.param);
    host_runs_.push_back(Level1Run{r.src_offset, static_cast<std::uint32_t>(r.dst_col),
                                   static_cast<std::uint32_t>(r.length),
                                   static_cast<std::uint32_t>(r.param), 0u});
  }
  view_.rows = rows;
  view_.width = width;
  view_.num_params = max_param + 1;
  std::size_t k = 0;
  for (int row = 0; row <= rows; ++row) {
    while (k < sorted.size() && sorted[k].row < row)
      ++k;
    view_.row_begin[row] = static_cast<std::uint32_t>(k);
  }
  for (int row = rows + 1; row <= kMaxLevel1Rows; ++row) {
    view_.row_begin[row] = static_cast<std::uint32_t>(sorted.size());
  }
  if (!host_runs_.empty()) {
    const std::size_t bytes = host_runs_.size() * sizeof(Level1Run);
    TIDE_CUDA_CHECK(cudaMalloc(&device_, bytes));
    if (upload) {
      TIDE_CUDA_CHECK(
          cudaMemcpyAsync(device_, host_runs_.data(), bytes, cudaMemcpyHostToDevice, *upload));
    } else {
      TIDE_CUDA_CHECK(cudaMemcpy(device_, host_runs_.data(), bytes, cudaMemcpyHostToDevice));
    }
    view_.runs = static_cast<const Level1Run*>(device_);
  }
}

Level1SegmentTable::~Level1SegmentTable() {
  if (device_ != nullptr) cudaFree(device_);
}

Level1SegmentTable::Level1SegmentTable(Level1SegmentTable&& other) noexcept
    : view_(other.view_), host_runs_(std::move(other.host_runs_)), device_(other.device_) {
  other.device_ = nullptr;
  other.view_ = Level1TableView{};
}

Level1SegmentTable& Level1SegmentTable::operator=(Level1SegmentTable&& other) noexcept {
  if (this != &other) {
    if (device_ != nullptr) cudaFree(device_);
    view_ = other.view_;
    host_runs_ = std::move(other.host_runs_);
    device_ = other.device_;
    other.device_ = nullptr;
    other.view_ = Level1TableView{};
  }
  return *this;
}

// ---------------------------------------------------------------------------------------
// Launcher.

void launch_level1_sum(const Level1SumArgs& a, cudaStream_t stream, const Level1Tuning& tu) {
  const Level1TableView& tb = a.table;
  const int rows = tb.rows;
  const std::int64_t width = tb.width;
  if (!is_reduction_dtype(a.dtype)) {  // NOTE [1-byte all-gather items]
    invalid("the Level 1 sum reads bf16 or fp32 contributions, not " +
            std::string(dtype_name(a.dtype)));
  }
  const std::int64_t esz = item_bytes(a.dtype);
  if (rows < 1 || rows > kMaxLevel1Rows || width < 1) {
    invalid("the segment table is empty or unregistered (rows = " + std::to_string(rows) +
            ", width = " + std::to_string(width) + ")");
  }
  if (tb.row_begin[rows] > 0 && tb.runs == nullptr) invalid("the segment table has no device runs");
  if (a.out == nullptr) invalid("out is null");
  if (reinterpret_cast<std::uintptr_t>(a.out) % 4 != 0) invalid("out is not 4-byte aligned");
  if (a.out_pitch < width) {
    invalid("out_pitch = " + std::to_string(a.out_pitch) + " < width = " + std::to_string(width));
  }
  if (a.num_staged < 0 || a.num_staged > kMaxLevel1Staged) {
    invalid("num_staged = " + std::to_string(a.num_staged) + " is outside [0, 7]");
  }
  if (a.num_staged > 0) {
    if (a.staged == nullptr) invalid("staged is null with num_staged > 0");
    if (reinterpret_cast<std::uintptr_t>(a.staged) % static_cast<std::uintptr_t>(esz) != 0) {
      invalid("staged is not aligned to its element size");
    }
    if (a.staged_pitch < width) {
      invalid("staged_pitch = " + std::to_string(a.staged_pitch) +
              " < width = " + std::to_string(width));
    }
    if (a.num_staged > 1 && a.staged_stride < (rows - 1) * a.staged_pitch + width) {
      invalid("staged_stride = " + std::to_string(a.staged_stride) +
              " makes contributions overlap (rows x pitch needs " +
              std::to_string((rows - 1) * a.staged_pitch + width) + ")");
    }
  }
  if (a.num_gradients < tb.num_params || a.num_gradients > kMaxLevel1Gradients) {
    invalid("num_gradients = " + std::to_string(a.num_gradients) +
            " is outside [table params = " + std::to_string(tb.num_params) + ", 256]");
  }
  if (a.num_gradients > 0 && a.gradients == nullptr) invalid("gradients is null");
  if (a.ctas < 1 || a.ctas > kMaxLevel1Ctas) {
    invalid("ctas = " + std::to_string(a.ctas) + " is outside [1, " +
            std::to_string(kMaxLevel1Ctas) + "]");
  }
  const bool tile_pow2 = tu.tile_bytes > 0 && (tu.tile_bytes & (tu.tile_bytes - 1)) == 0;
  if (tu.stages < 2 || tu.stages > kMaxStages || tu.tile_bytes < 512 || tu.tile_bytes > 65536 ||
      !tile_pow2 ||
      (!tu.warp_direct && (tu.consumer_warps < 1 || tu.consumer_warps > kMaxConsumerWarps))) {
    invalid("tuning (stages " + std::to_string(tu.stages) + ", tile_bytes " +
            std::to_string(tu.tile_bytes) + ", consumer_warps " +
            std::to_string(tu.consumer_warps) + ") is outside [2,4] x 2^[9,16] x [1,12]");
  }
  if (tu.direct_warps != 0 && tu.direct_warps != kDirectWarps &&
      !(tu.direct_warps == 8 && a.dtype == DType::kFp32)) {
    invalid("tuning direct_warps = " + std::to_string(tu.direct_warps) +
            " is not 0 or 16 (or 8 for fp32 inputs)");
  }

  Level1SumParams p;
  std::memset(&p, 0, sizeof(p));
  for (int i = 0; i < a.num_gradients; ++i) {
    const void* g = a.gradients[i];
    if (i < tb.num_params && g == nullptr) invalid("gradient " + std::to_string(i) + " is null");
    if (reinterpret_cast<std::uintptr_t>(g) % static_cast<std::uintptr_t>(esz) != 0) {
      invalid("gradient " + std::to_string(i) + " is not aligned to its element size");
    }
    p.grads[i] = g;
  }

  int device = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  int max_smem = max_smem_optin(device);
  max_smem -= 1024;  // static shared memory (barriers) and headroom

  int tile = static_cast<int>(tu.tile_bytes / esz);
  auto total_tiles = [&](int te) {
    return static_cast<std::int64_t>(rows) * ((width + te - 1) / te);
  };
  auto stage_bytes = [&](int te) {
    const int in_slots = a.num_staged + 1;
    std::int64_t b =
        in_slots * static_cast<std::int64_t>(te) * esz + (a.accumulate ? te * 4 : 0) + te / 8;
    return static_cast<int>((b + 127) / 128 * 128);
  };
  if (tu.warp_direct) {
    tile = (esz == 2 ? 2 : 1) * 32 * 8;  // one warp tile: 32 lanes x kU chunks x 8 columns
  } else {
    // Small blocks: smaller tiles, so that every CTA of the budget has work.
    while (tile > 256 && total_tiles(tile) < 2 * static_cast<std::int64_t>(a.ctas))
      tile /= 2;
    while (tile > 256 && tu.stages * stage_bytes(tile) > max_smem)
      tile /= 2;
    if (tu.stages * stage_bytes(tile) > max_smem)
      invalid("the pipeline does not fit in shared memory");
  }
  const std::int64_t tiles = total_tiles(tile);
  if (tiles > 0x7FFFFFFF) invalid("the block has too many tiles");

  p.out = a.out;
  p.out_pitch = a.out_pitch;
  p.staged = static_cast<const unsigned char*>(a.staged);
  p.staged_stride_bytes = a.staged_stride * esz;
  p.staged_pitch_bytes = a.staged_pitch * esz;
  p.runs = tb.runs;
  for (int r = 0; r <= kMaxLevel1Rows; ++r)
    p.row_begin[r] = tb.row_begin[r];
  p.rows = rows;
  p.width = width;
  p.num_staged = a.num_staged;
  p.alpha = a.alpha;
  p.tile_elems = tile;
  p.tiles_per_row = static_cast<int>((width + tile - 1) / tile);
  p.total_tiles = static_cast<int>(tiles);
  p.stages = tu.stages;
  p.stage_bytes = stage_bytes(tile);
  p.consumer_warps = tu.consumer_warps;
  const int direct_warps = direct_warps_for(a, tu);
  const int smem = tu.warp_direct ? 0 : tu.stages * p.stage_bytes;

  const int grid = static_cast<int>(std::min<std::int64_t>(a.ctas, tiles));
  const int threads = 32 * (tu.warp_direct ? direct_warps : 1 + tu.consumer_warps);
  if (a.dtype == DType::kBf16) {
    if (a.accumulate) {
      launch_typed<std::uint16_t, true>(p, grid, threads, smem, stream, tu.warp_direct);
    } else {
      launch_typed<std::uint16_t, false>(p, grid, threads, smem, stream, tu.warp_direct);
    }
  } else {
    if (a.accumulate) {
      launch_typed<float, true>(p, grid, threads, smem, stream, tu.warp_direct);
    } else {
      launch_typed<float, false>(p, grid, threads, smem, stream, tu.warp_direct);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Preloading (NOTE [preloaded kernels]).

namespace {

// cudaFuncGetAttributes needs the loaded function, so it loads it (lazy loading).
void load(const void* kernel) {
  cudaFuncAttributes attributes{};
  TIDE_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
}

template <typename In, bool kAccumulate>
void load_variants() {
  load(reinterpret_cast<const void*>(&level1_sum_kernel<In, kAccumulate>));
  Level1SumParams p;
  std::memset(&p, 0, sizeof(p));
  for (const int staged : {0, kMaxLevel1Staged}) {  // a run-time count, L = 8
    for (const float alpha : {1.0f, 0.5f}) {        // no multiply, a scale
      p.num_staged = staged;
      p.alpha = alpha;
      load(reinterpret_cast<const void*>(
          pick_direct_kernel<In, kAccumulate, 32 * default_direct_warps<In>()>(p)));
    }
  }
}

}  // namespace

void prepare_level1_sum() {
  load_variants<std::uint16_t, false>();
  load_variants<std::uint16_t, true>();
  load_variants<float, false>();
  load_variants<float, true>();
}

}  // namespace tide::kernels
