// The expert-parallel lane's fixed 8-source fp32 sum (App. F, L_sub = 1; NOTE [arithmetic
// order], expert-parallel lane) as the runner launches it: the Level 1 kernel with one row,
// the M - 1 arrived bf16 inbox blocks as its staged contributions (contributor order, one
// block stride), the own contribution read in place from several gradients through the
// segment table, times alpha. Checked bitwise against an explicit 8-source reference in which
// the missing sources are -0.0f (x + -0 = x: the count of real sources never changes a bit),
// and against float64 within the fp32 summation bound; outputs poisoned before every launch;
// fresh random inputs (NaN, inf, subnormals, wide exponents) from a printed seed; both kernel
// variants (bulk-copy pipeline, warp-direct) and several grids.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "test_seed.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/kernels/level1_sum.hpp"

namespace tide::kernels {
namespace {

using testing::DeviceBuffer;

constexpr int kSources = 8;                // program::kEpSumSources
constexpr std::int64_t kBlockAlign = 128;  // bf16 elements: the lane's 256-byte blocks

// One lane part: `width` fp32 outputs, M - 1 inbox blocks, the own gradients' runs.
struct LanePart {
  int m = 2;
  std::int64_t width = 0;
  std::int64_t block = 0;            // bf16 elements between inbox blocks
  std::vector<std::uint16_t> inbox;  // (m - 1) x block
  std::vector<std::vector<std::uint16_t>> grads;
  std::vector<Level1RunSpec> runs;  // row 0
  std::vector<int> owner;           // per column: run index, or -1 (padding)
  float alpha = 1.0f;
};

std::uint16_t wide_bf16(std::mt19937_64& rng) {
  if (rng() % 50 == 0) return testing::random_bf16(rng, 1.0);  // a special
  const float v = std::ldexp(testing::random_float(rng, 0.0), static_cast<int>(rng() % 41) - 20);
  return arith::float_to_bf16(v);
}

LanePart make_part(std::mt19937_64& rng, int m) {
  LanePart p;
  p.m = m;
  p.width = 1 + static_cast<std::int64_t>(rng() % 3000);
  p.block = (p.width + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
  p.inbox.resize(static_cast<std::size_t>((m - 1) * p.block));
  for (auto& v : p.inbox)
    v = wide_bf16(rng);
  p.owner.assign(static_cast<std::size_t>(p.width), -1);
  // Runs over the part as a shard's parameters meet it: contiguous pieces with gaps (rows past
  // D_p are padding) from a few gradients at odd source offsets.
  const int params = 1 + static_cast<int>(rng() % 5);
  p.grads.resize(static_cast<std::size_t>(params));
  for (auto& g : p.grads) {
    g.resize(static_cast<std::size_t>(p.width + 64));
    for (auto& v : g)
      v = wide_bf16(rng);
  }
  std::int64_t col = 0;
  while (col < p.width) {
    col += static_cast<std::int64_t>(rng() % 4 == 0 ? rng() % 17 : 0);  // padding gap
    if (col >= p.width) break;
    const std::int64_t len =
        std::min<std::int64_t>(p.width - col, 1 + static_cast<std::int64_t>(rng() % 700));
    const int param = static_cast<int>(rng() % static_cast<std::uint64_t>(params));
    const std::int64_t src = static_cast<std::int64_t>(rng() % 64);
    for (std::int64_t c = col; c < col + len; ++c)
      p.owner[static_cast<std::size_t>(c)] = static_cast<int>(p.runs.size());
    p.runs.push_back({0, col, len, param, src});
    col += len;
  }
  p.alpha = rng() % 2 == 0 ? 1.0f / static_cast<float>(m)
                           : std::ldexp(testing::random_float(rng, 0.0), -3);
  return p;
}

// The own value at column c (a run's column), as float.
float own_value(const LanePart& p, std::int64_t c) {
  const Level1RunSpec& r = p.runs[static_cast<std::size_t>(p.owner[static_cast<std::size_t>(c)])];
  return arith::bf16_to_float(p.grads[static_cast<std::size_t>(r.param)]
                                     [static_cast<std::size_t>(r.src_offset + c - r.dst_col)]);
}

// The fixed 8-source sum: sources 0..6 the arrivals in contributor order, -0.0f where M - 1 < 7,
// then the own value; alpha once; NaN canonical; +0 on padding.
std::vector<float> reference_8_source(const LanePart& p) {
  std::vector<float> out(static_cast<std::size_t>(p.width));
  for (std::int64_t c = 0; c < p.width; ++c) {
    if (p.owner[static_cast<std::size_t>(c)] < 0) {
      out[static_cast<std::size_t>(c)] = 0.0f;
      continue;
    }
    std::array<float, kSources - 1> src{};
    for (int k = 0; k < kSources - 1; ++k)
      src[static_cast<std::size_t>(k)] =
          k < p.m - 1 ? arith::bf16_to_float(p.inbox[static_cast<std::size_t>(k * p.block + c)])
                      : -0.0f;
    float acc = src[0];
    for (int k = 1; k < kSources - 1; ++k)
      acc = arith::add(acc, src[static_cast<std::size_t>(k)]);
    acc = arith::add(acc, own_value(p, c));
    out[static_cast<std::size_t>(c)] = arith::mul(p.alpha, arith::canonical(acc));
  }
  return out;
}

std::vector<float> run_kernel(const LanePart& p, int ctas, const Level1Tuning& tuning) {
  DeviceBuffer inbox(p.inbox.size() * 2);
  inbox.upload(p.inbox.data(), p.inbox.size() * 2);
  std::vector<std::unique_ptr<DeviceBuffer>> grads;
  std::vector<const void*> ptrs;
  for (const auto& g : p.grads) {
    grads.push_back(std::make_unique<DeviceBuffer>(g.size() * 2));
    grads.back()->upload(g.data(), g.size() * 2);
    ptrs.push_back(grads.back()->as());
  }
  DeviceBuffer out(static_cast<std::size_t>(p.width) * 4);
  const std::vector<std::uint32_t> poison(static_cast<std::size_t>(p.width), testing::kPoisonFp32);
  out.upload(poison.data(), poison.size() * 4);
  const Level1SegmentTable table(1, p.width, p.runs);
  Level1SumArgs a;
  a.out = out.as<float>();
  a.out_pitch = p.width;
  a.dtype = DType::kBf16;
  a.staged = inbox.as();
  a.num_staged = p.m - 1;
  a.staged_stride = p.block;
  a.staged_pitch = p.width;
  a.gradients = ptrs.data();
  a.num_gradients = static_cast<int>(ptrs.size());
  a.table = table.view();
  a.alpha = p.alpha;
  a.ctas = ctas;
  launch_level1_sum(a, nullptr, tuning);
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(static_cast<std::size_t>(p.width));
  out.download(got.data(), got.size() * 4);
  return got;
}

TEST(EpLaneSum, EightSourceSumIsBitwiseWithMissingSourcesAsNegativeZero) {
  TIDE_REQUIRE_GPU();
  const tide::testing::TestSeed seed;
  std::printf("%s\n", tide::testing::seed_trace(seed.value()).c_str());
  std::mt19937_64 rng = seed.engine();
  Level1Tuning direct;
  direct.warp_direct = true;
  Level1Tuning pipeline{};
  int checked = 0;
  for (int m = 2; m <= kSources; ++m) {
    for (int trial = 0; trial < 3; ++trial) {
      const LanePart p = make_part(rng, m);
      const std::vector<float> want = reference_8_source(p);
      for (const int ctas : {1, 4, 32}) {
        for (const Level1Tuning* tuning : std::array<const Level1Tuning*, 2>{&direct, &pipeline}) {
          const std::vector<float> got = run_kernel(p, ctas, *tuning);
          const std::int64_t bad = testing::first_bit_difference(got.data(), want.data(), p.width);
          ASSERT_EQ(bad, -1) << "M = " << m << ", width " << p.width << ", " << ctas << " CTAs, "
                             << (tuning->warp_direct ? "warp-direct" : "pipeline") << ": column "
                             << bad << " got "
                             << testing::bits_hex(got[static_cast<std::size_t>(bad)]) << " want "
                             << testing::bits_hex(want[static_cast<std::size_t>(bad)]);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 7 * 3 * 3 * 2);
}

// Against float64 (Eq. 5 without rounding): within the bound of M sequential fp32 additions
// and one multiplication, for every element whose inputs are finite.
TEST(EpLaneSum, EightSourceSumIsWithinTheFloat64Bound) {
  TIDE_REQUIRE_GPU();
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int m = 2; m <= kSources; ++m) {
    const LanePart p = make_part(rng, m);
    const std::vector<float> got = run_kernel(p, 4, Level1Tuning{});
    int finite = 0;
    for (std::int64_t c = 0; c < p.width; ++c) {
      const auto uc = static_cast<std::size_t>(c);
      if (p.owner[uc] < 0) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[uc]), 0u) << "padding is +0, column " << c;
        continue;
      }
      double sum = 0.0, magnitude = 0.0;
      bool all_finite = true;
      for (int k = 0; k <= m - 1; ++k) {
        const float v =
            k < m - 1 ? arith::bf16_to_float(p.inbox[static_cast<std::size_t>(k * p.block + c)])
                      : own_value(p, c);
        all_finite = all_finite && std::isfinite(v);
        sum += static_cast<double>(v);
        magnitude += std::fabs(static_cast<double>(v));
      }
      const double want = static_cast<double>(p.alpha) * sum;
      if (!all_finite || !std::isfinite(want) || std::fabs(want) > 3.0e38) continue;
      const double bound =
          (m + 1) * std::ldexp(1.0, -24) * std::fabs(static_cast<double>(p.alpha)) * magnitude +
          std::ldexp(1.0, -149);
      ASSERT_LE(std::fabs(static_cast<double>(got[uc]) - want), bound)
          << "M = " << m << ", column " << c;
      ++finite;
    }
    EXPECT_GT(finite, 0) << "M = " << m << ": no finite element was checked";
  }
}

}  // namespace
}  // namespace tide::kernels
