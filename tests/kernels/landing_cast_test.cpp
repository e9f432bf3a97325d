// Landing (paper Sec. 4.2) and cast (Sec. 3.1) kernels: bitwise equality with
// tide::arith::wave_sum / land and tide::arith::float_to_bf16 on fresh random data with
// specials, every wave width, first and later waves, accumulate, odd lengths, misaligned and
// incongruent pointers, poisoned outputs. The multimem landing is only checked to refuse.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/error.hpp"
#include "tide/kernels/cast.hpp"
#include "tide/kernels/landing.hpp"

namespace tide::kernels {
namespace {

using testing::DeviceBuffer;

struct LandingCase {
  int w;
  std::int64_t n;
  int wave_index;
  bool accumulate;
  int out_misalign;  // elements
  bool incongruent;  // partial k offset by k % 4 elements more
  int ctas;
};

std::string landing_name(const LandingCase& c) {
  // Appended piecewise: GCC 12 warns (-Wrestrict, a false positive) on literal + string chains.
  std::string s = "W";
  s += std::to_string(c.w);
  s += "_n";
  s += std::to_string(c.n);
  s += "_wave";
  s += std::to_string(c.wave_index);
  if (c.accumulate) s += "_acc";
  s += "_mis";
  s += std::to_string(c.out_misalign);
  if (c.incongruent) s += "_incongruent";
  s += "_ctas";
  s += std::to_string(c.ctas);
  return s;
}

void run_landing_case(const LandingCase& c, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t pad = 8;
  const std::int64_t len = c.n + pad;
  std::vector<std::vector<float>> parts(static_cast<std::size_t>(c.w));
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  LandingArgs a;
  std::vector<std::int64_t> offs(static_cast<std::size_t>(c.w));
  for (int k = 0; k < c.w; ++k) {
    auto& h = parts[static_cast<std::size_t>(k)];
    h.resize(static_cast<std::size_t>(len));
    for (auto& v : h)
      v = testing::random_float(rng, 0.02);
    bufs.push_back(std::make_unique<DeviceBuffer>(static_cast<std::size_t>(len * 4)));
    bufs.back()->upload(h.data(), h.size() * 4);
    const std::int64_t off = c.out_misalign + (c.incongruent ? k % 4 : 0);
    offs[static_cast<std::size_t>(k)] = off;
    a.partials[k] = bufs.back()->as<float>() + off;
  }
  std::vector<float> out0(static_cast<std::size_t>(len),
                          std::bit_cast<float>(testing::kPoisonFp32));
  const bool read_out = c.wave_index > 0 || c.accumulate;
  if (read_out) {
    for (std::int64_t i = 0; i < c.n; ++i)
      out0[static_cast<std::size_t>(c.out_misalign + i)] = testing::random_float(rng, 0.02);
  }
  DeviceBuffer out(static_cast<std::size_t>(len * 4));
  out.upload(out0.data(), out0.size() * 4);
  a.out = out.as<float>() + c.out_misalign;
  a.n = c.n;
  a.num_partials = c.w;
  a.wave_index = c.wave_index;
  a.accumulate = c.accumulate;
  a.ctas = c.ctas;
  launch_landing(a, nullptr);
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(out0.size());
  out.download(got.data(), got.size() * 4);

  std::vector<float> want = out0;
  std::vector<float> wave_in(static_cast<std::size_t>(c.w));
  for (std::int64_t i = 0; i < c.n; ++i) {
    for (int k = 0; k < c.w; ++k) {
      wave_in[static_cast<std::size_t>(k)] =
          parts[static_cast<std::size_t>(k)]
               [static_cast<std::size_t>(offs[static_cast<std::size_t>(k)] + i)];
    }
    const std::size_t oi = static_cast<std::size_t>(c.out_misalign + i);
    want[oi] = arith::land(out0[oi], arith::wave_sum(wave_in), c.wave_index, c.accumulate);
  }
  const std::int64_t bad = testing::first_bit_difference(got.data(), want.data(), len);
  ASSERT_EQ(bad, -1) << landing_name(c) << ": element " << bad - c.out_misalign << " got "
                     << testing::bits_hex(got[static_cast<std::size_t>(bad)]) << " want "
                     << testing::bits_hex(want[static_cast<std::size_t>(bad)]);
}

TEST(Landing, BitwiseEqualToReference) {
  TIDE_REQUIRE_GPU();
  const bool quick = testing::quick_mode();
  std::vector<std::int64_t> sizes = {1, 3, 17, 4099};
  if (!quick) sizes.push_back(1000003);
  int seed = 0;
  for (int w = 1; w <= kMaxWave; ++w) {
    for (std::int64_t n : sizes) {
      for (int wave : {0, 2}) {
        for (bool acc : {false, true}) {
          for (int mis : {0, 3}) {
            for (bool incongruent : {false, true}) {
              if (incongruent && w == 1) continue;
              const LandingCase c{w, n, wave, acc, mis, incongruent, n > 100000 ? 8 : 3};
              SCOPED_TRACE(landing_name(c));
              run_landing_case(c, 1000 + static_cast<std::uint64_t>(seed++));
              if (HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(Landing, RejectsBadArguments) {
  float dummy[8] = {};
  LandingArgs a;
  a.out = dummy;
  a.n = 4;
  a.num_partials = 0;
  EXPECT_THROW(launch_landing(a, nullptr), InvalidArgument);
  a.num_partials = 9;
  EXPECT_THROW(launch_landing(a, nullptr), InvalidArgument);
  a.num_partials = 2;
  a.partials[0] = dummy;
  a.partials[1] = nullptr;
  EXPECT_THROW(launch_landing(a, nullptr), InvalidArgument);
  a.partials[1] = dummy;
  a.ctas = 0;
  EXPECT_THROW(launch_landing(a, nullptr), InvalidArgument);
}

// The multimem landing must refuse unless explicitly enabled; it is never run here (NVLink
// multicast is forbidden on the lent machines). Checked without touching the GPU.
TEST(Landing, MultimemRefusesWithoutOptIn) {
  ASSERT_FALSE(multimem_enabled_by_environment())
      << "TIDE_ENABLE_MULTIMEM must not be set where the tests run";
  float dummy[8] = {};
  MultimemLandingArgs a;
  a.out = dummy;
  a.multicast = dummy;
  a.n = 4;
  EXPECT_THROW(launch_landing_multimem(a, nullptr, /*opt_in=*/false), Unsupported);
  EXPECT_THROW(launch_landing_multimem(a, nullptr, /*opt_in=*/true), Unsupported);
}

// ---------------------------------------------------------------------------------------

void run_cast(const std::vector<float>& src_h, int src_mis, int dst_mis, int ctas) {
  const std::int64_t n = static_cast<std::int64_t>(src_h.size());
  DeviceBuffer src(static_cast<std::size_t>((n + 4) * 4));
  DeviceBuffer dst(static_cast<std::size_t>((n + 8) * 2));
  src.upload_at(static_cast<std::size_t>(src_mis * 4), src_h.data(), src_h.size() * 4);
  std::vector<std::uint16_t> poison(static_cast<std::size_t>(n + 8), testing::kPoisonBf16);
  dst.upload(poison.data(), poison.size() * 2);
  launch_cast_fp32_to_bf16(dst.as<std::uint16_t>() + dst_mis, src.as<float>() + src_mis, n, nullptr,
                           ctas);
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint16_t> got(poison.size());
  dst.download(got.data(), got.size() * 2);
  std::vector<std::uint16_t> want = poison;
  for (std::int64_t i = 0; i < n; ++i) {
    want[static_cast<std::size_t>(dst_mis + i)] =
        arith::float_to_bf16(src_h[static_cast<std::size_t>(i)]);
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "n " << n << " src_mis " << src_mis << " dst_mis " << dst_mis
                               << ": element " << static_cast<std::int64_t>(i) - dst_mis
                               << " of input bits "
                               << (static_cast<std::int64_t>(i) - dst_mis >= 0 &&
                                           static_cast<std::int64_t>(i) - dst_mis < n
                                       ? testing::bits_hex(
                                             src_h[i - static_cast<std::size_t>(dst_mis)])
                                       : std::string("(outside)"));
  }
}

TEST(Cast, BitwiseEqualToReference) {
  TIDE_REQUIRE_GPU();
  std::mt19937_64 rng(42);
  std::vector<std::int64_t> sizes = {1, 2, 3, 7, 64, 1001};
  if (!testing::quick_mode()) sizes.push_back(3000017);
  for (std::int64_t n : sizes) {
    for (int sm = 0; sm < 4; ++sm) {
      for (int dm = 0; dm < 4; ++dm) {
        std::vector<float> src(static_cast<std::size_t>(n));
        for (auto& v : src)
          v = testing::random_float(rng, 0.05);
        run_cast(src, sm, dm, n > 100000 ? 0 : 3);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Rounding boundaries: every exponent with mantissa tails around the tie points, plus random
// bit patterns (NaN payloads, subnormals, infinities included).
TEST(Cast, RoundingBoundariesAndRandomBits) {
  TIDE_REQUIRE_GPU();
  std::vector<float> src;
  const std::uint32_t tails[] = {0x0000u, 0x0001u, 0x7FFFu, 0x8000u,
                                 0x8001u, 0xFFFFu, 0x7FFEu, 0xC000u};
  for (std::uint32_t sign = 0; sign < 2; ++sign) {
    for (std::uint32_t exp = 0; exp < 256; ++exp) {
      for (std::uint32_t hi : {0u, 1u, 0x7Eu, 0x7Fu}) {
        for (std::uint32_t t : tails) {
          src.push_back(std::bit_cast<float>((sign << 31) | (exp << 23) | (hi << 16) | t));
        }
      }
    }
  }
  std::mt19937_64 rng(7);
  const std::size_t random_count = testing::quick_mode() ? 1u << 14 : 1u << 24;
  for (std::size_t i = 0; i < random_count; ++i)
    src.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  run_cast(src, 0, 0, 0);
}

TEST(Cast, RejectsBadArguments) {
  EXPECT_THROW(launch_cast_fp32_to_bf16(nullptr, nullptr, -1, nullptr), InvalidArgument);
  EXPECT_THROW(launch_cast_fp32_to_bf16(nullptr, nullptr, 4, nullptr), InvalidArgument);
  EXPECT_NO_THROW(launch_cast_fp32_to_bf16(nullptr, nullptr, 0, nullptr));
}

}  // namespace
}  // namespace tide::kernels
