// The CUDA kernels against the golden vectors of NOTE [arithmetic order]
// (tests/golden/arithmetic_order.json, derived in float64 by
// tests/golden/derive_arithmetic_order.py): the Level 1 sum, the pull landing and the cast
// must produce the golden bits, as the reference executor does on the CPU
// (tests/program/golden_order_test.cpp). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "tide/kernels/cast.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"

namespace tide::kernels {
namespace {

using nlohmann::json;
using testing::DeviceBuffer;

const json& golden() {
  static const json vectors = [] {
    std::ifstream in(TIDE_GOLDEN_DIR "/arithmetic_order.json");
    if (!in) throw std::runtime_error("cannot read " TIDE_GOLDEN_DIR "/arithmetic_order.json");
    return json::parse(in);
  }();
  return vectors;
}

constexpr std::int64_t kColumns = 4;  // each vector repeated over one vector-width row

// One Level 1 vector on the kernel: a 1-row block of kColumns identical columns, the staged
// contributions in the staging area and the owner's value read through a one-run table.
std::uint32_t level1_on_gpu(const json& c, const Level1Tuning& tuning, int ctas) {
  const bool bf16 = c["dtype"] == "bf16";
  const std::int64_t item = bf16 ? 2 : 4;
  const std::vector<std::uint32_t> staged_words = c["staged"].get<std::vector<std::uint32_t>>();
  const int staged = static_cast<int>(staged_words.size());
  auto bytes_of = [&](const std::vector<std::uint32_t>& words) {
    std::vector<unsigned char> out(words.size() * static_cast<std::size_t>(kColumns * item));
    for (std::size_t k = 0; k < words.size(); ++k) {
      for (std::int64_t col = 0; col < kColumns; ++col) {
        const std::size_t at = (k * kColumns + static_cast<std::size_t>(col)) * item;
        if (bf16) {
          const auto w = static_cast<std::uint16_t>(words[k]);
          std::memcpy(out.data() + at, &w, 2);
        } else {
          std::memcpy(out.data() + at, &words[k], 4);
        }
      }
    }
    return out;
  };
  const std::vector<unsigned char> staged_bytes = bytes_of(staged_words);
  const std::vector<unsigned char> own_bytes = bytes_of({c["own"].get<std::uint32_t>()});
  DeviceBuffer staged_dev(staged_bytes.size());
  if (!staged_bytes.empty()) staged_dev.upload(staged_bytes.data(), staged_bytes.size());
  DeviceBuffer own_dev(own_bytes.size());
  own_dev.upload(own_bytes.data(), own_bytes.size());
  const std::vector<Level1RunSpec> runs = {Level1RunSpec{0, 0, kColumns, 0, 0}};
  const Level1SegmentTable table(1, kColumns, runs);
  std::vector<float> poison(kColumns, std::bit_cast<float>(testing::kPoisonFp32));
  DeviceBuffer out(kColumns * 4);
  out.upload(poison.data(), poison.size() * 4);
  const void* gradients[1] = {own_dev.as()};
  Level1SumArgs a;
  a.out = out.as<float>();
  a.out_pitch = kColumns;
  a.dtype = bf16 ? DType::kBf16 : DType::kFp32;
  a.staged = staged > 0 ? staged_dev.as() : nullptr;
  a.num_staged = staged;
  a.staged_stride = kColumns;
  a.staged_pitch = kColumns;
  a.gradients = gradients;
  a.num_gradients = 1;
  a.table = table.view();
  a.alpha = std::bit_cast<float>(c["alpha"].get<std::uint32_t>());
  a.ctas = ctas;
  launch_level1_sum(a, nullptr, tuning);
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(kColumns);
  out.download(got.data(), got.size() * 4);
  for (std::int64_t col = 1; col < kColumns; ++col) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got[static_cast<std::size_t>(col)]),
              std::bit_cast<std::uint32_t>(got[0]));
  }
  return std::bit_cast<std::uint32_t>(got[0]);
}

TEST(GoldenOrder, Level1SumKernel) {
  TIDE_REQUIRE_GPU();
  for (int variant = 0; variant < 2; ++variant) {
    const Level1Tuning tuning = variant == 0 ? Level1Tuning{} : recommended_level1_tuning(4);
    int index = 0;
    for (const json& c : golden()["level1"]) {
      EXPECT_EQ(level1_on_gpu(c, tuning, variant == 0 ? 1 : 4), c["part"].get<std::uint32_t>())
          << "level1 vector " << index << (variant == 0 ? " (default tuning)" : " (recommended)");
      ++index;
    }
  }
}

// One landing vector: its waves of W partials landed one launch each, in order.
TEST(GoldenOrder, LandingKernel) {
  TIDE_REQUIRE_GPU();
  int index = 0;
  for (const json& c : golden()["landing"]) {
    const std::vector<std::uint32_t> partials = c["partials"].get<std::vector<std::uint32_t>>();
    const int width = c["wave_width"].get<int>();
    std::vector<std::unique_ptr<DeviceBuffer>> parts;
    for (std::uint32_t bits : partials) {
      const std::vector<std::uint32_t> row(kColumns, bits);
      parts.push_back(std::make_unique<DeviceBuffer>(kColumns * 4));
      parts.back()->upload(row.data(), kColumns * 4);
    }
    const std::vector<std::uint32_t> init(kColumns, c["out_init"].get<std::uint32_t>());
    DeviceBuffer out(kColumns * 4);
    out.upload(init.data(), kColumns * 4);
    int wave = 0;
    for (std::size_t first = 0; first < partials.size(); first += width, ++wave) {
      LandingArgs a;
      a.out = out.as<float>();
      a.n = kColumns;
      a.num_partials = static_cast<int>(std::min<std::size_t>(width, partials.size() - first));
      for (int k = 0; k < a.num_partials; ++k)
        a.partials[k] = parts[first + static_cast<std::size_t>(k)]->as<float>();
      a.wave_index = wave;
      a.accumulate = c["accumulate"].get<bool>();
      a.ctas = 1;
      launch_landing(a, nullptr);
    }
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<std::uint32_t> got(kColumns);
    out.download(got.data(), kColumns * 4);
    for (std::uint32_t bits : got)
      EXPECT_EQ(bits, c["out"].get<std::uint32_t>()) << "landing vector " << index;
    ++index;
  }
}

TEST(GoldenOrder, CastKernel) {
  TIDE_REQUIRE_GPU();
  std::vector<std::uint32_t> in;
  std::vector<std::uint16_t> want;
  for (const json& c : golden()["cast"]) {
    in.push_back(c["fp32"].get<std::uint32_t>());
    want.push_back(c["bf16"].get<std::uint16_t>());
  }
  DeviceBuffer src(in.size() * 4);
  src.upload(in.data(), in.size() * 4);
  const std::vector<std::uint16_t> poison(in.size(), testing::kPoisonBf16);
  DeviceBuffer dst(in.size() * 2);
  dst.upload(poison.data(), poison.size() * 2);
  launch_cast_fp32_to_bf16(dst.as<std::uint16_t>(), src.as<float>(),
                           static_cast<std::int64_t>(in.size()), nullptr);
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::uint16_t> got(in.size());
  dst.download(got.data(), got.size() * 2);
  for (std::size_t i = 0; i < in.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << "fp32 bits " << in[i];
}

}  // namespace
}  // namespace tide::kernels
