// Golden vectors pin NOTE [arithmetic order] on the CPU: tests/golden/arithmetic_order.json
// holds small inputs with expected output bits derived once, in float64, by
// tests/golden/derive_arithmetic_order.py (independent of tide::arith). A change of the
// summation order in tide::arith or in the programs fails here, not only on a GPU.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tide/core/arithmetic.hpp"
#include "tide/core/plan_validator.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide {
namespace {

using nlohmann::json;
using program::Buffer;
using program::Space;

const json& golden() {
  static const json vectors = [] {
    std::ifstream in(TIDE_GOLDEN_DIR "/arithmetic_order.json");
    if (!in) throw std::runtime_error("cannot read " TIDE_GOLDEN_DIR "/arithmetic_order.json");
    return json::parse(in);
  }();
  return vectors;
}

float from_bits(std::uint32_t bits) {
  return std::bit_cast<float>(bits);
}

std::uint32_t bits_of(float value) {
  return std::bit_cast<std::uint32_t>(value);
}

float widen(const json& word, bool bf16) {
  return bf16 ? arith::bf16_to_float(word.get<std::uint16_t>())
              : from_bits(word.get<std::uint32_t>());
}

TEST(GoldenOrder, VectorsArePresent) {
  EXPECT_GE(golden()["level1"].size(), 90u);
  EXPECT_GE(golden()["landing"].size(), 50u);
  EXPECT_GE(golden()["cast"].size(), 50u);
  EXPECT_GE(golden()["reduce_scatter"].size(), 4u);
}

TEST(GoldenOrder, Level1Partials) {
  int index = 0;
  for (const json& c : golden()["level1"]) {
    const bool bf16 = c["dtype"] == "bf16";
    std::vector<float> staged;
    for (const json& w : c["staged"])
      staged.push_back(widen(w, bf16));
    const float part = arith::level1_partial(staged, widen(c["own"], bf16),
                                             from_bits(c["alpha"].get<std::uint32_t>()));
    EXPECT_EQ(bits_of(part), c["part"].get<std::uint32_t>()) << "level1 vector " << index;
    ++index;
  }
}

TEST(GoldenOrder, WaveSumsAndLanding) {
  int index = 0;
  for (const json& c : golden()["landing"]) {
    std::vector<float> partials;
    for (const json& p : c["partials"])
      partials.push_back(from_bits(p.get<std::uint32_t>()));
    const int width = c["wave_width"].get<int>();
    const bool accumulate = c["accumulate"].get<bool>();
    float out = from_bits(c["out_init"].get<std::uint32_t>());
    for (std::size_t first = 0, wave = 0; first < partials.size(); first += width, ++wave) {
      const std::size_t count = std::min<std::size_t>(width, partials.size() - first);
      const float sum = arith::wave_sum(std::span<const float>(partials).subspan(first, count));
      out = arith::land(out, sum, static_cast<int>(wave), accumulate);
    }
    EXPECT_EQ(bits_of(out), c["out"].get<std::uint32_t>()) << "landing vector " << index;
    ++index;
  }
}

TEST(GoldenOrder, Bf16Cast) {
  for (const json& c : golden()["cast"]) {
    const std::uint32_t in = c["fp32"].get<std::uint32_t>();
    EXPECT_EQ(arith::float_to_bf16(from_bits(in)), c["bf16"].get<std::uint16_t>())
        << "fp32 bits " << in;
  }
}

// Whole TIDE-RS programs on the reference executor: Level 1 owners and wave boundaries come
// from the plan (Eqs. 6-8), the arithmetic from the executor; the output must be the golden
// bits on every rank.
TEST(GoldenOrder, ReduceScatterProgramsOnTheReferenceExecutor) {
  for (const json& c : golden()["reduce_scatter"]) {
    const int m = c["nodes"].get<int>();
    const int l = c["gpus_per_node"].get<int>();
    const bool accumulate = c["accumulate"].get<bool>();
    SCOPED_TRACE("M = " + std::to_string(m) + ", L = " + std::to_string(l) +
                 ", W_wave = " + std::to_string(c["wave_width"].get<int>()));
    const GroupLayout layout(
        Topology(m, l),
        {ParamShape{"w", c["rows"].get<std::int64_t>(), c["cols"].get<std::int64_t>()}},
        DType::kBf16, DType::kBf16);
    RsOptions options;
    options.wave_width = c["wave_width"].get<int>();
    options.sub_slices = RsSubSlices::kAcrossRanks;  // the golden bits' Level 1 owners
    const RsPlan plan(layout, options);
    ASSERT_TRUE(validate_rs_plan(plan).accepted);
    program::RsProgramOptions po;
    po.alpha = from_bits(c["alpha"].get<std::uint32_t>());
    po.accumulate = accumulate;
    const program::Program prog = program::build_rs_program(plan, po);
    exec::ReferenceExecutor ex(prog);
    for (int r = 0; r < m * l; ++r) {
      const json& grad = c["grads"][static_cast<std::size_t>(r)];
      std::vector<std::uint16_t> words = grad.get<std::vector<std::uint16_t>>();
      auto bytes = ex.input(Buffer{r, Space::kTensor, 0});
      ASSERT_EQ(bytes.size(), words.size() * 2);
      std::memcpy(bytes.data(), words.data(), bytes.size());
      if (accumulate) {
        const std::vector<std::uint32_t> init =
            c["out_init"][static_cast<std::size_t>(r)].get<std::vector<std::uint32_t>>();
        auto out = ex.input(Buffer{r, Space::kOutput, 0});
        ASSERT_EQ(out.size(), init.size() * 4);
        std::memcpy(out.data(), init.data(), out.size());
      }
    }
    const exec::RunResult run = ex.run();
    ASSERT_TRUE(run.clean());
    for (int r = 0; r < m * l; ++r) {
      const std::vector<std::uint32_t> want =
          c["out"][static_cast<std::size_t>(r)].get<std::vector<std::uint32_t>>();
      const auto got = ex.memory(Buffer{r, Space::kOutput, 0});
      ASSERT_EQ(got.size(), want.size() * 4);
      for (std::size_t e = 0; e < want.size(); ++e) {
        std::uint32_t bits = 0;
        std::memcpy(&bits, got.data() + 4 * e, 4);
        ASSERT_EQ(bits, want[e]) << "rank " << r << ", element " << e;
      }
    }
  }
}

}  // namespace
}  // namespace tide
