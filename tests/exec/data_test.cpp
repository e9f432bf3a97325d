// Data semantics of the reference executor: 1-D and 2-D copies land the right bytes; the
// Level 1 sum, landings and the cast are bitwise equal to tide::arith on fresh random data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "exec_test_util.hpp"

namespace tide::exec::testing {
namespace {

TEST(ReferenceData, Copy1DLandsBytesOnPeer) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  Program p = make_program(2, 1024);
  add(p, copy_op(0, 0, "put to rank 1", bytes(arena(0), 0, 256), bytes(arena(1), 512, 256)));
  ReferenceExecutor ex(p);
  fill_random(ex.input(arena(0), 0, 256), rng);
  const std::vector<std::byte> src(ex.memory(arena(0)).begin(), ex.memory(arena(0)).begin() + 256);
  const RunResult r = ex.run();
  ASSERT_TRUE(r.clean()) << error_list(r);
  const auto dst = ex.memory(arena(1));
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin() + 512));
  // Everything else on rank 1 is still poison.
  EXPECT_TRUE(std::all_of(dst.begin(), dst.begin() + 512,
                          [](std::byte b) { return b == std::byte{0xFF}; }));
  EXPECT_TRUE(
      std::all_of(dst.begin() + 768, dst.end(), [](std::byte b) { return b == std::byte{0xFF}; }));
}

TEST(ReferenceData, Copy2DStridedRowsAndBatch) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  Program p = make_program(1, 4096);
  // Rows of 24 bytes: 5 rows 40 apart at 100 -> 5 rows 64 apart at 2000, plus a 1-D run.
  Op op = copy_op(0, 0, "2-D scatter", Region{arena(0), 100, 24, 40, 5},
                  Region{arena(0), 2000, 24, 64, 5});
  op.as<program::CopyOp>().copies.push_back(
      program::CopyDescriptor{bytes(arena(0), 400, 32), bytes(arena(0), 3500, 32)});
  add(p, op);
  ReferenceExecutor ex(p);
  fill_random(ex.input(arena(0), 0, 1000), rng);
  std::vector<std::byte> before(ex.memory(arena(0)).begin(), ex.memory(arena(0)).end());
  const RunResult r = ex.run();
  ASSERT_TRUE(r.clean()) << error_list(r);
  std::vector<std::byte> expect = before;
  for (int row = 0; row < 5; ++row)
    std::memcpy(&expect[static_cast<std::size_t>(2000 + 64 * row)],
                &before[static_cast<std::size_t>(100 + 40 * row)], 24);
  std::memcpy(&expect[3500], &before[400], 32);
  const auto after = ex.memory(arena(0));
  EXPECT_TRUE(std::equal(expect.begin(), expect.end(), after.begin()));
  // The gaps between destination rows stay poison.
  EXPECT_EQ(after[2000 + 24], std::byte{0xFF});
  EXPECT_EQ(after[2000 + 63], std::byte{0xFF});
}

class Level1Sum : public ::testing::TestWithParam<DType> {};

TEST_P(Level1Sum, BitwiseEqualToArithReference) {
  const DType dtype = GetParam();
  const std::int64_t item = item_bytes(dtype);
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  constexpr int kStaged = 3;  // L = 4
  constexpr std::int64_t kRows = 3, kRowElems = 40;
  const std::int64_t staged_pitch = kRowElems * item + 16;
  const std::int64_t staged_bytes = staged_pitch * kRows;
  const std::int64_t dst_offset = kStaged * staged_bytes;
  const std::int64_t dst_pitch = kRowElems * 4 + 32;
  Program p = make_program(1, dst_offset + dst_pitch * kRows, {300 * item, 100 * item});

  Op op;
  auto& sum = op.payload.emplace<program::SumOp>();
  op.label = "level1 sum";
  sum.in_dtype = dtype;
  sum.ctas = 2;
  sum.alpha = 1.0f / 3.0f;
  sum.dst = Region{arena(0), dst_offset, kRowElems * 4, dst_pitch, kRows};
  for (int i = 0; i < kStaged; ++i)
    sum.staged.push_back(Region{arena(0), i * staged_bytes, kRowElems * item, staged_pitch, kRows});
  sum.segments = {{0, 0, 0, 5, 10}, {0, 20, 1, 0, 15}, {2, 3, 0, 100, 37}};
  add(p, op);

  ReferenceExecutor ex(p);
  std::vector<std::vector<float>> staged;
  for (int i = 0; i < kStaged; ++i)
    staged.push_back(fill_normal(ex.input(arena(0), i * staged_bytes, staged_bytes), dtype, rng));
  const std::vector<float> g0 = fill_normal(ex.input(tensor(0, 0)), dtype, rng);
  const std::vector<float> g1 = fill_normal(ex.input(tensor(0, 1)), dtype, rng);
  const RunResult r = ex.run(seeded(seed.value()));
  ASSERT_TRUE(r.clean()) << error_list(r);

  // Reference: per element, staged in order then own, times alpha; +0 outside segments.
  std::vector<float> expect(static_cast<std::size_t>(kRows * kRowElems), 0.0f);
  for (const program::SumSegment& s : sum.segments) {
    const std::vector<float>& g = s.param == 0 ? g0 : g1;
    for (std::int64_t e = 0; e < s.elems; ++e) {
      const std::int64_t col = s.out_elem + e;
      // Staged element (row, col) sits at staged_pitch * row + col * item bytes.
      const std::size_t at = static_cast<std::size_t>((s.row * staged_pitch) / item + col);
      const float x[kStaged] = {staged[0][at], staged[1][at], staged[2][at]};
      expect[static_cast<std::size_t>(s.row * kRowElems + col)] =
          arith::level1_partial(x, g[static_cast<std::size_t>(s.src_elem + e)], sum.alpha);
    }
  }
  const auto mem = ex.memory(arena(0));
  int nonzero = 0;
  for (std::int64_t row = 0; row < kRows; ++row) {
    const std::vector<float> got =
        read_fp32(mem.subspan(static_cast<std::size_t>(dst_offset + row * dst_pitch),
                              static_cast<std::size_t>(kRowElems * 4)));
    for (std::int64_t c = 0; c < kRowElems; ++c) {
      const float want = expect[static_cast<std::size_t>(row * kRowElems + c)];
      ASSERT_EQ(bits(got[static_cast<std::size_t>(c)]), bits(want))
          << "row " << row << " col " << c;
      nonzero += want != 0.0f;
    }
    // The pitch gap after each row is untouched.
    EXPECT_EQ(mem[static_cast<std::size_t>(dst_offset + row * dst_pitch + kRowElems * 4)],
              std::byte{0xFF});
  }
  EXPECT_GT(nonzero, 50);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Level1Sum, ::testing::Values(DType::kBf16, DType::kFp32));

TEST(ReferenceData, LandingWavesAccumulateAndCastBitwise) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  constexpr std::int64_t kN = 96, kB = kN * 4;
  // arena: 4 partials of kB, then the bf16 cast target. output: kB.
  Program p = make_program(1, 4 * kB + kN * 2, {}, kB);
  auto land = [&](std::string label, std::vector<int> parts, int wave, bool acc) {
    Op op;
    auto& land_op = op.payload.emplace<program::LandOp>();
    op.label = std::move(label);
    land_op.dst = bytes(output(0), 0, kB);
    for (int j : parts)
      land_op.sources.push_back(bytes(arena(0), j * kB, kB));
    land_op.wave_index = wave;
    land_op.accumulate = acc;
    land_op.ctas = 4;
    return op;
  };
  add(p, land("wave 0", {0, 1}, 0, true));
  add(p, land("wave 1", {2, 3}, 1, true));
  Op cast;
  auto& cast_op = cast.payload.emplace<program::CastOp>();
  cast.label = "cast";
  cast_op.src = {bytes(output(0), 0, kB)};
  cast_op.dst = bytes(arena(0), 4 * kB, kN * 2);
  add(p, cast);

  ReferenceExecutor ex(p);
  std::vector<std::vector<float>> part;
  for (int j = 0; j < 4; ++j)
    part.push_back(fill_normal(ex.input(arena(0), j * kB, kB), DType::kFp32, rng));
  const std::vector<float> init = fill_normal(ex.input(output(0)), DType::kFp32, rng);
  const RunResult r = ex.run(seeded(seed.value()));
  ASSERT_TRUE(r.clean()) << error_list(r);

  const std::vector<float> out = read_fp32(ex.memory(output(0)));
  const auto cast_mem = ex.memory(arena(0)).subspan(4 * kB, kN * 2);
  for (std::size_t k = 0; k < kN; ++k) {
    const float w0[] = {part[0][k], part[1][k]};
    const float w1[] = {part[2][k], part[3][k]};
    float want = arith::land(init[k], arith::wave_sum(w0), 0, true);
    want = arith::land(want, arith::wave_sum(w1), 1, true);
    ASSERT_EQ(bits(out[k]), bits(want)) << k;
    std::uint16_t got;
    std::memcpy(&got, &cast_mem[2 * k], 2);
    ASSERT_EQ(got, arith::float_to_bf16(want)) << k;
  }
}

TEST(ReferenceData, FirstWaveWithoutAccumulateIgnoresPoisonedOutput) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  constexpr std::int64_t kB = 64 * 4;
  Program p = make_program(1, 2 * kB, {}, kB);
  Op op;
  auto& land_op = op.payload.emplace<program::LandOp>();
  op.label = "wave 0";
  land_op.dst = bytes(output(0), 0, kB);
  land_op.sources = {bytes(arena(0), 0, kB), bytes(arena(0), kB, kB)};
  add(p, op);
  ReferenceExecutor ex(p);
  const auto a = fill_normal(ex.input(arena(0), 0, kB), DType::kFp32, rng);
  const auto b = fill_normal(ex.input(arena(0), kB, kB), DType::kFp32, rng);
  const RunResult r = ex.run();
  ASSERT_TRUE(r.clean()) << error_list(r);  // the output is never read, so poison is fine
  const auto out = read_fp32(ex.memory(output(0)));
  for (std::size_t k = 0; k < out.size(); ++k) {
    const float w[] = {a[k], b[k]};
    ASSERT_EQ(bits(out[k]), bits(arith::wave_sum(w)));
  }
}

TEST(ReferenceData, NanAndInfinityKeepTheirClassesAndCanonicalBits) {
  // Sources: a NaN with a payload, +inf, -inf, +inf + -inf, and a finite value.
  const std::uint32_t a_bits[] = {0x7FC01234u, 0x7F800000u, 0xFF800000u, 0x7F800000u, 0x3F800000u};
  const std::uint32_t b_bits[] = {0x3F800000u, 0x3F800000u, 0x3F800000u, 0xFF800000u, 0x40000000u};
  constexpr std::int64_t kB = 5 * 4;
  Program p = make_program(1, 2 * kB + 10, {}, kB);
  Op op;
  auto& land_op = op.payload.emplace<program::LandOp>();
  op.label = "land specials";
  land_op.dst = bytes(output(0), 0, kB);
  land_op.sources = {bytes(arena(0), 0, kB), bytes(arena(0), kB, kB)};
  add(p, op);
  Op cast;
  auto& cast_op = cast.payload.emplace<program::CastOp>();
  cast.label = "cast specials";
  cast_op.src = {bytes(output(0), 0, kB)};
  cast_op.dst = bytes(arena(0), 2 * kB, 10);
  add(p, cast);
  ReferenceExecutor ex(p);
  std::memcpy(ex.input(arena(0), 0, kB).data(), a_bits, kB);
  std::memcpy(ex.input(arena(0), kB, kB).data(), b_bits, kB);
  const RunResult r = ex.run();
  ASSERT_TRUE(r.clean()) << error_list(r);
  std::uint32_t out[5];
  std::memcpy(out, ex.memory(output(0)).data(), kB);
  EXPECT_EQ(out[0], arith::kCanonicalNanFp32);  // NaN + 1: canonical NaN
  EXPECT_EQ(out[1], 0x7F800000u);               // +inf + 1
  EXPECT_EQ(out[2], 0xFF800000u);               // -inf + 1
  EXPECT_EQ(out[3], arith::kCanonicalNanFp32);  // +inf + -inf
  EXPECT_EQ(out[4], 0x40400000u);               // 1 + 2 = 3
  std::uint16_t words[5];
  std::memcpy(words, ex.memory(arena(0)).data() + 2 * kB, 10);
  EXPECT_EQ(words[0], arith::kCanonicalNanBf16);
  EXPECT_EQ(words[1], 0x7F80u);
  EXPECT_EQ(words[2], 0xFF80u);
  EXPECT_EQ(words[3], arith::kCanonicalNanBf16);
  EXPECT_EQ(words[4], 0x4040u);
}

TEST(ReferenceData, ZeroAndReleaseAndUnwrittenRead) {
  Program p = make_program(1, 256, {128});
  Op zero;
  auto& zero_op = zero.payload.emplace<program::ZeroOp>();
  zero.label = "zero";
  zero_op.dst = bytes(arena(0), 0, 64);
  add(p, zero);
  add(p, copy_op(0, 0, "read unset", bytes(arena(0), 32, 64), bytes(arena(0), 128, 64)));
  Op rel;
  auto& release = rel.payload.emplace<program::ReleaseOp>();
  rel.label = "free grad";
  release.dst = bytes(tensor(0, 0), 0, 128);
  add(p, rel);
  ReferenceExecutor ex(p);
  ex.input(tensor(0, 0))[0] = std::byte{1};
  const RunResult r = ex.run();
  ASSERT_EQ(r.count(ErrorKind::kUnwrittenRead), 1) << error_list(r);
  const ExecError& e = r.errors[0];
  EXPECT_EQ(e.begin, 64);  // [32, 64) was zeroed, [64, 96) never written
  EXPECT_EQ(e.end, 96);
  EXPECT_NE(e.message.find("read unset"), std::string::npos);
  const auto mem = ex.memory(arena(0));
  EXPECT_EQ(mem[0], std::byte{0});
  EXPECT_EQ(mem[63], std::byte{0});
  EXPECT_EQ(ex.memory(tensor(0, 0))[0], std::byte{0xFF});  // released: poisoned
}

TEST(ReferenceData, MalformedOpIsReportedAndSkipped) {
  Program p = make_program(1, 64);
  add(p, copy_op(0, 0, "too far", bytes(arena(0), 0, 32), bytes(arena(0), 48, 32)));
  add(p, copy_op(0, 3, "no such stream", bytes(arena(0), 0, 8), bytes(arena(0), 8, 8)));
  add(p, sync_op(OpKind::kSignal, 0, 0, "no such counter", 0, 5, 1));
  ReferenceExecutor ex(p);
  ex.input(arena(0));
  const RunResult r = ex.run();
  EXPECT_EQ(r.count(ErrorKind::kInvalidOp), 3) << error_list(r);
  EXPECT_TRUE(r.completed);
  EXPECT_FALSE(r.deadlock);
}

}  // namespace
}  // namespace tide::exec::testing
