// Topology and layout (Sec. 2.1, Eqs. 2-3): hand-computed cases, bad input, and a property
// test that every shard byte has exactly one landing address.
#include "tide/core/layout.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "test_seed.hpp"
#include "tide/core/error.hpp"

namespace tide {
namespace {

TEST(Topology, NodeMajorRanks) {
  const Topology t(3, 4);
  EXPECT_EQ(t.world(), 12);
  EXPECT_EQ(t.rank(2, 1), 9);
  EXPECT_EQ(t.node_of(9), 2);
  EXPECT_EQ(t.local_of(9), 1);
  EXPECT_EQ(mod(-1, 5), 4);
  EXPECT_EQ(mod(-6, 5), 4);
}

TEST(Topology, RejectsOutOfRange) {
  EXPECT_THROW(Topology(1, 9), InvalidArgument);
  EXPECT_THROW(Topology(1, 0), InvalidArgument);
  EXPECT_THROW(Topology(0, 8), InvalidArgument);
  EXPECT_THROW(Topology(-3, 8), InvalidArgument);
  try {
    Topology(2, 9);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("L = 9"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1..8"), std::string::npos) << e.what();
  }
}

// NOTE [runtime] 9: M x L from the ranks' host ids.
TEST(Topology, FromHostIds) {
  const std::vector<std::string> one(6, "a");
  HostTopology t = topology_of_hosts(one, 6);
  ASSERT_TRUE(t.topology) << t.refusal;
  EXPECT_EQ(*t.topology, Topology(1, 6));
  EXPECT_EQ(t.hosts, std::vector<int>(6, 0));
  t = topology_of_hosts(one, 2);  // emulated nodes inside one host
  ASSERT_TRUE(t.topology) << t.refusal;
  EXPECT_EQ(*t.topology, Topology(3, 2));

  const std::vector<std::string> three{"x", "x", "y", "y", "z", "z"};
  t = topology_of_hosts(three, 8);  // L is capped by the ranks per host
  ASSERT_TRUE(t.topology) << t.refusal;
  EXPECT_EQ(*t.topology, Topology(3, 2));
  EXPECT_EQ(t.hosts, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  t = topology_of_hosts(three, 1);
  ASSERT_TRUE(t.topology) << t.refusal;
  EXPECT_EQ(*t.topology, Topology(6, 1));
}

TEST(Topology, FromHostIdsRefusesWhatItCannotServe) {
  const auto refusal = [](std::vector<std::string> ids, int l) {
    const HostTopology t = topology_of_hosts(ids, l);
    EXPECT_FALSE(t.topology);
    return t.refusal;
  };
  EXPECT_NE(refusal({"x", "y", "x", "y"}, 2).find("ranks 0 and 2 share a host"), std::string::npos);
  EXPECT_NE(refusal({"x", "x", "x", "y"}, 1).find("3 on host 0, 1 on host 1"), std::string::npos);
  EXPECT_NE(refusal({"x", "x", "x", "y", "y", "y"}, 2).find("does not divide the 3 ranks"),
            std::string::npos);
  EXPECT_NE(refusal(std::vector<std::string>(12, "x"), 12).find("L = 12"), std::string::npos);
  EXPECT_NE(refusal({}, 1).find("no ranks"), std::string::npos);
}

// N = 4 (M = 2, L = 2); D_p < N, K_p = 1 and a padded last rank, computed by hand.
TEST(Layout, HandComputedOddShapes) {
  const GroupLayout g(Topology(2, 2), {{"a", 10, 3}, {"b", 3, 5}, {"c", 8, 1}}, DType::kBf16,
                      DType::kFp32);
  ASSERT_EQ(g.param_count(), 3);
  EXPECT_EQ(g.param(0).rows_per_rank, 3);  // ceil(10 / 4)
  EXPECT_EQ(g.param(1).rows_per_rank, 1);  // ceil(3 / 4): D < N
  EXPECT_EQ(g.param(2).rows_per_rank, 2);
  EXPECT_EQ(g.param(0).shard_bytes, 18);  // 3 * 3 * 2
  EXPECT_EQ(g.param(1).shard_bytes, 10);
  EXPECT_EQ(g.param(2).shard_bytes, 4);
  EXPECT_EQ(g.param(1).offset, 18);
  EXPECT_EQ(g.param(2).offset, 28);
  EXPECT_EQ(g.param(2).out_offset, 14);  // 9 + 5 elements
  EXPECT_EQ(g.shard_bytes(), 32);        // S
  EXPECT_EQ(g.shard_elems(), 16);
  EXPECT_EQ(g.grad_shard_bytes(), 64);  // fp32 gradients
  EXPECT_EQ(g.fp32_shard_bytes(), 64);
  EXPECT_EQ(g.unsharded_bytes(), 128);    // N S
  EXPECT_EQ(g.pack_buffer_bytes(), 256);  // 4 * N * 16 = (4 / b_grad) N S_grad
  // Eq. 2: o_p N + r s_p.
  EXPECT_EQ(g.landing_offset(0, 0), 0);
  EXPECT_EQ(g.landing_offset(0, 3), 54);
  EXPECT_EQ(g.landing_offset(1, 3), 18 * 4 + 3 * 10);
  EXPECT_EQ(g.landing_offset(2, 1), 28 * 4 + 4);
  // Rows past D_p are padding.
  EXPECT_EQ(g.valid_rows(0, 3), 1);  // rows 9..11 of 10
  EXPECT_EQ(g.valid_rows(1, 2), 1);
  EXPECT_EQ(g.valid_rows(1, 3), 0);  // D_p = 3 < N = 4
  EXPECT_EQ(g.valid_rows(2, 3), 2);
}

TEST(Layout, Eq3PackBufferIsTwiceNSGradForBf16) {
  const GroupLayout g(Topology(4, 8), {{"w", 4096, 4096}, {"b", 4096, 1}}, DType::kBf16,
                      DType::kBf16);
  EXPECT_EQ(g.pack_buffer_bytes(), 2 * g.topology().world() * g.grad_shard_bytes());
}

TEST(Layout, RejectsBadGroups) {
  const Topology t(1, 8);
  EXPECT_THROW(GroupLayout(t, {}, DType::kBf16, DType::kBf16), InvalidArgument);
  EXPECT_THROW(GroupLayout(t, {{"z", 0, 4}}, DType::kBf16, DType::kBf16), InvalidArgument);
  EXPECT_THROW(GroupLayout(t, {{"n", 4, -1}}, DType::kBf16, DType::kBf16), InvalidArgument);
  std::vector<ParamShape> many(257, ParamShape{"x", 8, 8});
  try {
    GroupLayout(t, many, DType::kBf16, DType::kBf16);
    FAIL();
  } catch (const Unsupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("257"), std::string::npos) << what;
    EXPECT_NE(what.find("256"), std::string::npos) << what;
    EXPECT_NE(what.find("stock"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(GroupLayout(t, std::vector<ParamShape>(256, ParamShape{"x", 8, 8}), DType::kBf16,
                              DType::kBf16));
  EXPECT_THROW(GroupLayout(t, {{"huge", std::int64_t{1} << 40, std::int64_t{1} << 30}},
                           DType::kFp32, DType::kFp32),
               Unsupported);
}

TEST(Layout, ParseDtype) {
  EXPECT_EQ(parse_dtype("bf16", "--ag-dtype"), DType::kBf16);
  EXPECT_EQ(parse_dtype("fp32", "--ag-dtype"), DType::kFp32);
  EXPECT_EQ(parse_dtype("fp8", "--ag-dtype"), DType::kFp8);
  EXPECT_EQ(parse_dtype("u8", "--ag-dtype"), DType::kU8);
  EXPECT_THROW(parse_dtype("fp16", "--ag-dtype"), InvalidArgument);
  EXPECT_THROW(parse_dtype("FP8", "--ag-dtype"), InvalidArgument);
  try {
    parse_dtype("e4m3", "--ag-dtype");
    FAIL();
  } catch (const InvalidArgument& e) {  // the message lists every dtype
    const std::string what = e.what();
    EXPECT_NE(what.find("--ag-dtype 'e4m3'"), std::string::npos) << what;
    EXPECT_NE(what.find("bf16, fp32, fp8 or u8"), std::string::npos) << what;
  }
}

// NOTE [1-byte all-gather items]: names, item sizes, which dtypes reduce, and the serialised
// values (capability descriptions hold the enum as u8: appended, never renumbered).
TEST(Dtype, NamesItemBytesAndReductionDtypes) {
  for (const DType t : {DType::kBf16, DType::kFp32, DType::kFp8, DType::kU8})
    EXPECT_EQ(parse_dtype(dtype_name(t), "x"), t);
  EXPECT_EQ(dtype_name(DType::kFp8), "fp8");
  EXPECT_EQ(dtype_name(DType::kU8), "u8");
  EXPECT_EQ(item_bytes(DType::kBf16), 2);
  EXPECT_EQ(item_bytes(DType::kFp32), 4);
  EXPECT_EQ(item_bytes(DType::kFp8), 1);
  EXPECT_EQ(item_bytes(DType::kU8), 1);
  EXPECT_TRUE(is_reduction_dtype(DType::kBf16));
  EXPECT_TRUE(is_reduction_dtype(DType::kFp32));
  EXPECT_FALSE(is_reduction_dtype(DType::kFp8));
  EXPECT_FALSE(is_reduction_dtype(DType::kU8));
  EXPECT_EQ(static_cast<int>(DType::kBf16), 0);
  EXPECT_EQ(static_cast<int>(DType::kFp32), 1);
  EXPECT_EQ(static_cast<int>(DType::kFp8), 2);
  EXPECT_EQ(static_cast<int>(DType::kU8), 3);
  EXPECT_EQ(kLastDType, DType::kU8);
  EXPECT_NO_THROW(require_gradient_dtype(DType::kBf16, "grad_dtype"));
  EXPECT_NO_THROW(require_gradient_dtype(DType::kFp32, "grad_dtype"));
  EXPECT_THROW(require_gradient_dtype(DType::kU8, "grad_dtype"), InvalidArgument);
}

// An fp8 all-gather holds and moves half the bytes of a bf16 one: s_p, o_p, S, N S and Eq. 2
// in 1-byte items, while the gradient side (S_grad, S_fp32, e_p, Eq. 3) is unchanged.
TEST(Layout, OneByteAllGatherShardsAreHalfOfBf16) {
  const Topology t(2, 2);  // N = 4
  const std::vector<ParamShape> shapes = {{"w", 10, 3}, {"b", 3, 1}, {"m", 7, 5}};
  const GroupLayout bf16(t, shapes, DType::kBf16, DType::kBf16);
  for (const DType one : {DType::kFp8, DType::kU8}) {
    const GroupLayout g(t, shapes, one, DType::kBf16);
    EXPECT_EQ(g.ag_dtype(), one);
    // R = 3, 1, 2: s_p = 9, 1, 10 bytes; o_p = 0, 9, 10; S = 20.
    EXPECT_EQ(g.param(0).shard_bytes, 9);
    EXPECT_EQ(g.param(1).shard_bytes, 1);
    EXPECT_EQ(g.param(2).shard_bytes, 10);
    EXPECT_EQ(g.param(1).offset, 9);  // odd: no alignment past one byte
    EXPECT_EQ(g.param(2).offset, 10);
    EXPECT_EQ(g.shard_bytes(), 20);
    EXPECT_EQ(2 * g.shard_bytes(), bf16.shard_bytes());
    EXPECT_EQ(2 * g.unsharded_bytes(), bf16.unsharded_bytes());
    EXPECT_EQ(g.unsharded_bytes(), 80);
    for (int p = 0; p < g.param_count(); ++p) {
      EXPECT_EQ(2 * g.param(p).shard_bytes, bf16.param(p).shard_bytes);
      for (int r = 0; r < t.world(); ++r)
        EXPECT_EQ(2 * g.landing_offset(p, r), bf16.landing_offset(p, r)) << p << " " << r;
    }
    EXPECT_EQ(g.landing_offset(2, 3), 10 * 4 + 3 * 10);  // Eq. 2: o_p N + r s_p
    EXPECT_EQ(g.grad_shard_bytes(), bf16.grad_shard_bytes());
    EXPECT_EQ(g.grad_shard_bytes(), 40);
    EXPECT_EQ(g.fp32_shard_bytes(), 80);
    EXPECT_EQ(g.param(2).out_offset, 10);
    EXPECT_EQ(g.pack_buffer_bytes(), bf16.pack_buffer_bytes());
  }
}

// TIDE-RS reduces bf16 or fp32 gradients: a 1-byte gradient dtype is refused, naming the fix.
TEST(Layout, RefusesOneByteGradients) {
  const Topology t(1, 8);
  for (const DType grad : {DType::kFp8, DType::kU8}) {
    try {
      GroupLayout(t, {{"w", 8, 8}}, DType::kFp8, grad);
      FAIL() << dtype_name(grad);
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string(dtype_name(grad)) + " is an all-gather-only dtype"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("bf16 or fp32"), std::string::npos) << what;
    }
  }
  EXPECT_NO_THROW(GroupLayout(t, {{"w", 8, 8}}, DType::kFp8, DType::kFp32));
}

// Property: for random topologies and shapes, the landing intervals [Landing(p, r),
// Landing(p, r) + s_p) tile [0, N S) exactly, and each parameter's N shards are contiguous,
// so the unsharded parameter is one (N R_p, K_p) view whose first D_p rows are real.
TEST(Layout, PropertyLandingsTileTheParameterMajorBuffer) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int trial = 0; trial < 300; ++trial) {
    const Topology t(static_cast<int>(rng() % 9) + 1, static_cast<int>(rng() % 8) + 1);
    std::vector<ParamShape> shapes(rng() % 12 + 1);
    for (auto& s : shapes) {
      s.rows = static_cast<std::int64_t>(rng() % 40) + 1;
      s.cols = static_cast<std::int64_t>(rng() % 7) + 1;
    }
    const GroupLayout g(t, shapes, rng() % 2 ? DType::kBf16 : DType::kFp32, DType::kBf16);
    std::vector<std::pair<std::int64_t, std::int64_t>> intervals;
    for (int p = 0; p < g.param_count(); ++p) {
      std::int64_t valid = 0;
      for (int r = 0; r < t.world(); ++r) {
        intervals.emplace_back(g.landing_offset(p, r), g.param(p).shard_bytes);
        valid += g.valid_rows(p, r);
      }
      EXPECT_EQ(valid, g.param(p).rows);
      EXPECT_EQ(g.landing_offset(p, 0), g.param(p).offset * t.world());
    }
    std::sort(intervals.begin(), intervals.end());
    std::int64_t cursor = 0;
    for (const auto& [start, length] : intervals) {
      ASSERT_EQ(start, cursor);
      cursor += length;
    }
    EXPECT_EQ(cursor, g.unsharded_bytes());
  }
}

}  // namespace
}  // namespace tide
