// Expert-parallel lanes (App. F, L_sub = 1; program/ep_lane.hpp) on the CPU reference
// executor: groups of random shapes on M x 1 with random data from a printed seed, every run
// race-free; the all-gather bit for bit at Eq. 2 for every M (powers of two or not), the
// reduce-scatter bit for bit in the lane's arithmetic order (NOTE [arithmetic order]) and
// within the float64 tolerance of Eq. 5; every lane fault shows as its expected detection.
#include "tide/program/ep_lane.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "program_test_support.hpp"
#include "test_seed.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/error.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/exec/fault_detection.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide {
namespace {

using program::Buffer;
using program::Detection;
using program::Fault;
using program::Space;

// Random bf16 words (standard normal values, never all zero).
std::vector<std::byte> random_bf16(std::mt19937_64& rng, std::int64_t bytes) {
  std::vector<std::byte> out(static_cast<std::size_t>(bytes));
  for (std::int64_t i = 0; i + 1 < bytes; i += 2) {
    const std::uint16_t w = arith::float_to_bf16(random_value(rng, DType::kFp32));
    std::memcpy(out.data() + i, &w, 2);
  }
  return out;
}

// --- All-gather --------------------------------------------------------------------------------

TEST(EpLane, RoundsDeliverEveryShardOnceForEveryM) {
  for (int m = 1; m <= 130; ++m) {
    const auto rounds = program::ep_ag_rounds(m);
    ASSERT_EQ(static_cast<int>(rounds.size()),
              m == 1 ? 0 : static_cast<int>(std::ceil(std::log2(m))))
        << "M = " << m;
    // What node 0 receives: round d brings nodes [2^d, 2^d + c_d) from node 2^d, which holds
    // them after rounds < d (its first c_d nodes, which it received or owns).
    std::set<int> held = {0};
    for (const auto& r : rounds) {
      ASSERT_EQ(r.distance, 1 << r.index);
      for (int k = 0; k < r.count; ++k) {
        ASSERT_TRUE(held.insert((r.distance + k) % m).second)
            << "M = " << m << ", round " << r.index;
      }
    }
    EXPECT_EQ(static_cast<int>(held.size()), m) << "M = " << m;
  }
}

struct AgCase {
  GroupLayout layout;
  std::vector<std::vector<std::byte>> shards, previous;
};

AgCase random_ag_case(std::mt19937_64& rng, int m) {
  AgCase c{GroupLayout(Topology(m, 1), random_shapes(rng), DType::kBf16, DType::kBf16), {}, {}};
  for (int r = 0; r < m; ++r) {
    c.shards.push_back(random_bf16(rng, c.layout.shard_bytes()));
    c.previous.push_back(random_bf16(rng, c.layout.unsharded_bytes()));
  }
  return c;
}

void ag_inputs(exec::ReferenceExecutor& ex, const AgCase& c) {
  const program::EpAgArenaLayout arena = program::ep_ag_arena_layout(c.layout);
  for (int r = 0; r < c.layout.topology().world(); ++r) {
    put(ex, Buffer{r, Space::kArena, 0}, arena.resident, c.shards[static_cast<std::size_t>(r)]);
    put(ex, Buffer{r, Space::kArena, 0}, arena.landing, c.previous[static_cast<std::size_t>(r)]);
  }
}

TEST(EpLane, AllGatherLandsEveryShardBitwiseForAnyM) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  std::vector<int> ms = {2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17};
  for (int i = 0; i < 3; ++i)
    ms.push_back(pick(rng, 2, 33));
  for (int m : ms) {
    const AgCase c = random_ag_case(rng, m);
    SCOPED_TRACE("M = " + std::to_string(m) + ", " + std::to_string(c.layout.param_count()) +
                 " parameters");
    program::EpAgProgramIds ids;
    const program::Program p = program::build_ep_ag_program(c.layout, {}, &ids);
    // No receive stage: the arena is the resident shard and the landing.
    const program::EpAgArenaLayout arena = program::ep_ag_arena_layout(c.layout);
    EXPECT_EQ(arena.arena_bytes - arena.landing, c.layout.unsharded_bytes());
    EXPECT_LT(arena.landing, c.layout.shard_bytes() + 256);
    // R rail puts per rank, landing to landing, and no other copy into the landing but the own.
    int puts = 0;
    for (const program::Op& op : p.ops) {
      if (op.rank == 0 && op.is<program::RailPutOp>()) {
        ++puts;
        for (const auto& d : op.as<program::RailPutOp>().copies) {
          EXPECT_GE(d.src.offset, arena.landing);
          EXPECT_EQ(d.src.offset, d.dst.offset);
        }
      }
    }
    EXPECT_EQ(puts, static_cast<int>(program::ep_ag_rounds(m).size()));
    exec::ReferenceExecutor ex(p);
    ag_inputs(ex, c);
    const exec::RunResult run = ex.run(schedule(seed.value() + static_cast<std::uint64_t>(m)));
    ASSERT_TRUE(run.clean()) << first_errors(run);
    // Eq. 2: rank u's shard of parameter p at Landing(p, u), as each rank's layer saw it.
    for (int r = 0; r < m; ++r) {
      const auto seen = ex.memory(Buffer{r, Space::kOutput, 0});
      for (int u = 0; u < m; ++u) {
        for (int q = 0; q < c.layout.param_count(); ++q) {
          const ParamLayout& pl = c.layout.param(q);
          const auto& shard = c.shards[static_cast<std::size_t>(u)];
          EXPECT_EQ(std::memcmp(seen.data() + c.layout.landing_offset(q, u),
                                shard.data() + pl.offset, static_cast<std::size_t>(pl.shard_bytes)),
                    0)
              << "rank " << r << " sees rank " << u << "'s shard of p" << q << " wrong";
        }
      }
    }
  }
}

// --- Reduce-scatter ----------------------------------------------------------------------------

struct RsCase {
  GroupLayout layout;
  std::vector<RankGrads> grads;
  std::vector<std::vector<float>> initial;
};

// Standard-normal bf16 gradients scaled by 2^k, k uniform in [-24, 24] (still exact bf16): sums
// of such values round in fp32, so a sum in another order than the lane's shows in the bits
// (standard-normal bf16 values alone add up exactly in fp32 at M <= 8).
std::vector<RankGrads> wide_grads(std::mt19937_64& rng, const GroupLayout& layout) {
  std::vector<RankGrads> grads = random_grads(rng, layout);
  for (RankGrads& rank : grads) {
    for (auto& param : rank) {
      for (float& v : param)
        v = std::ldexp(v, pick(rng, -24, 24));
    }
  }
  return grads;
}

RsCase random_rs_case(std::mt19937_64& rng, int m) {
  RsCase c{GroupLayout(Topology(m, 1), random_shapes(rng), DType::kBf16, DType::kBf16), {}, {}};
  c.grads = wide_grads(rng, c.layout);
  for (int r = 0; r < m; ++r) {
    std::vector<float> init(static_cast<std::size_t>(c.layout.shard_elems()));
    for (float& v : init)
      v = random_value(rng, DType::kFp32);
    c.initial.push_back(init);
  }
  return c;
}

void rs_inputs(exec::ReferenceExecutor& ex, const RsCase& c, bool accumulate) {
  for (int r = 0; r < c.layout.topology().world(); ++r) {
    for (int p = 0; p < c.layout.param_count(); ++p) {
      store_values(c.grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)], DType::kBf16,
                   ex.input(Buffer{r, Space::kTensor, p}));
    }
    if (accumulate) {
      const auto& init = c.initial[static_cast<std::size_t>(r)];
      auto bytes = ex.input(Buffer{r, Space::kOutput, 0});
      std::memcpy(bytes.data(), init.data(), bytes.size());
    }
  }
}

std::vector<std::vector<float>> outputs(exec::ReferenceExecutor& ex, const GroupLayout& layout) {
  std::vector<std::vector<float>> out;
  for (int r = 0; r < layout.topology().world(); ++r) {
    const auto bytes = ex.memory(Buffer{r, Space::kOutput, 0});
    std::vector<float> row(bytes.size() / 4);
    std::memcpy(row.data(), bytes.data(), bytes.size());
    out.push_back(row);
  }
  return out;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

TEST(EpLane, ReduceScatterIsBitwiseTheLaneOrderAndWithinFloat64) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int trial = 0; trial < 24; ++trial) {
    const int m = trial < 7 ? trial + 2 : pick(rng, 2, program::kEpSumSources);
    const RsCase c = random_rs_case(rng, m);
    program::EpRsProgramOptions options;
    options.accumulate = trial % 2 == 1;
    options.alpha = trial % 3 == 0 ? 1.0f / static_cast<float>(m) : random_value(rng, DType::kFp32);
    options.parts = pick(rng, 1, 6);
    const program::EpRsArenaLayout arena = program::ep_rs_arena_layout(c.layout, options);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": M = " + std::to_string(m) + ", " +
                 std::to_string(c.layout.param_count()) + " parameters, " +
                 std::to_string(arena.parts) + " parts, accumulate " +
                 std::to_string(options.accumulate) + ", alpha " + std::to_string(options.alpha));
    EXPECT_EQ(arena.generations, std::min(2, arena.parts));
    const program::Program p = program::build_ep_rs_program(c.layout, options);
    // No Level 1 staging: each rank's puts read its gradients in place.
    for (const program::Op& op : p.ops) {
      if (const auto* put = op.get_if<program::RailPutOp>()) {
        for (const auto& d : put->copies)
          EXPECT_EQ(d.src.buffer.space, Space::kTensor) << op.label;
      }
      if (const auto* sum = op.get_if<program::SumOp>()) {
        EXPECT_EQ(static_cast<int>(sum->staged.size()), m - 1) << op.label;
      }
    }
    exec::ReferenceExecutor ex(p);
    rs_inputs(ex, c, options.accumulate);
    const exec::RunResult run = ex.run(schedule(seed.value() + static_cast<std::uint64_t>(trial)));
    ASSERT_TRUE(run.clean()) << first_errors(run);
    const auto got = outputs(ex, c.layout);
    const auto want =
        ep_rs_expected(c.layout, c.grads, options.alpha, options.accumulate, c.initial);
    const auto ref = rs_float64(c.layout, c.grads, static_cast<double>(options.alpha),
                                options.accumulate, c.initial);
    double norm = 1;
    for (const auto& row : ref) {
      for (double y : row)
        norm = std::max(norm, std::abs(y));
    }
    int wrong = 0;
    double worst = 0;
    for (int r = 0; r < m; ++r) {
      for (std::size_t e = 0; e < got[static_cast<std::size_t>(r)].size(); ++e) {
        const float g = got[static_cast<std::size_t>(r)][e];
        wrong += !same_bits(g, want[static_cast<std::size_t>(r)][e]);
        worst =
            std::max(worst, std::abs(static_cast<double>(g) - ref[static_cast<std::size_t>(r)][e]));
      }
    }
    EXPECT_EQ(wrong, 0) << "elements off the lane's arithmetic order";
    EXPECT_LE(worst, 1e-5 * norm) << "max |out - float64|";
  }
}

// The lane order is TIDE-RS's M x 1 order when alpha = 1 without accumulation (NOTE
// [arithmetic order]): the two programs give the same bits.
TEST(EpLane, ReduceScatterEqualsTideRsOnMx1AtUnitAlpha) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int m = 2; m <= program::kEpSumSources; ++m) {
    const RsCase c = random_rs_case(rng, m);
    SCOPED_TRACE("M = " + std::to_string(m));
    const program::Program lane_program = program::build_ep_rs_program(c.layout, {});
    exec::ReferenceExecutor lane(lane_program);
    rs_inputs(lane, c, false);
    ASSERT_TRUE(lane.run(schedule(seed.value())).clean());
    const RsPlan plan(c.layout, RsOptions{});
    program::RsProgramOptions options;
    options.alpha = 1.0f;
    const program::Program general = program::build_rs_program(plan, options);
    exec::ReferenceExecutor tide_rs(general);
    rs_inputs(tide_rs, c, false);
    ASSERT_TRUE(tide_rs.run(schedule(seed.value())).clean());
    const auto a = outputs(lane, c.layout);
    const auto b = outputs(tide_rs, c.layout);
    for (int r = 0; r < m; ++r) {
      for (std::size_t e = 0; e < a[static_cast<std::size_t>(r)].size(); ++e) {
        ASSERT_TRUE(same_bits(a[static_cast<std::size_t>(r)][e], b[static_cast<std::size_t>(r)][e]))
            << "rank " << r << " element " << e;
      }
    }
  }
}

// --- Refusals and faults -----------------------------------------------------------------------

TEST(EpLane, RefusesGroupsThatAreNotLanes) {
  const std::vector<ParamShape> shapes = {{"a", 37, 5}};
  const GroupLayout two_per_node(Topology(4, 2), shapes, DType::kBf16, DType::kBf16);
  EXPECT_NE(program::ep_lane_inapplicable(two_per_node), "");
  EXPECT_THROW(program::build_ep_ag_program(two_per_node), Unsupported);
  EXPECT_THROW(program::build_ep_rs_program(two_per_node), Unsupported);
  const GroupLayout nine(Topology(9, 1), shapes, DType::kBf16, DType::kBf16);
  EXPECT_EQ(program::ep_lane_inapplicable(nine), "");
  EXPECT_NE(program::ep_rs_inapplicable(nine).find("M <= 8"), std::string::npos);
  EXPECT_THROW(program::build_ep_rs_program(nine), Unsupported);
  const GroupLayout three(Topology(3, 1), shapes, DType::kBf16, DType::kBf16);
  EXPECT_NE(program::ep_ag_fault_inapplicable(Fault::kEpAgForwardBeforeArrival, three), "");
  EXPECT_NE(program::ep_ag_fault_inapplicable(Fault::kAgNoCompletionFence, three), "");
  program::EpRsProgramOptions one_part;
  one_part.parts = 2;
  EXPECT_NE(program::ep_rs_fault_inapplicable(Fault::kEpRsInboxReuse, three, one_part), "");
}

// Runs the clean and the faulty program on the same inputs under three schedule seeds: the
// clean one must be clean and the faulty one show as its catalog's detection.
void expect_fault(Fault fault, const program::Program& clean, const program::Program& faulty,
                  const std::function<void(exec::ReferenceExecutor&)>& inputs, std::uint64_t base) {
  const program::FaultInfo& info = program::fault_info(fault);
  for (std::uint64_t s = 0; s < 3; ++s) {
    exec::ReferenceExecutor good(clean);
    inputs(good);
    const exec::RunResult good_run = good.run(schedule(base + s));
    EXPECT_TRUE(good_run.clean()) << info.name << first_errors(good_run);
    exec::ReferenceExecutor bad(faulty);
    inputs(bad);
    const exec::RunResult bad_run = bad.run(schedule(base + s));
    const Detection d = exec::classify_run(bad_run, false, false);
    EXPECT_EQ(program::detection_name(d), program::detection_name(info.expected))
        << info.name << " (schedule seed " << base + s << "): " << info.mechanism;
    EXPECT_FALSE(exec::detection_evidence(bad_run, d).empty()) << info.name;
  }
}

TEST(EpLane, EveryLaneFaultIsDetected) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  const std::vector<Fault> ag_faults = faults_of("ep-all-gather");
  const std::vector<Fault> rs_faults = faults_of("ep-reduce-scatter");
  ASSERT_EQ(ag_faults.size(), 3u);
  ASSERT_EQ(rs_faults.size(), 3u);
  for (int m : {4, 5, pick(rng, 6, 13)}) {
    SCOPED_TRACE("all-gather on M = " + std::to_string(m));
    const AgCase c = random_ag_case(rng, m);
    const program::Program clean = program::build_ep_ag_program(c.layout);
    for (Fault fault : ag_faults) {
      ASSERT_EQ(program::ep_ag_fault_inapplicable(fault, c.layout), "");
      program::EpAgProgramOptions options;
      options.fault = fault;
      expect_fault(
          fault, clean, program::build_ep_ag_program(c.layout, options),
          [&](exec::ReferenceExecutor& ex) { ag_inputs(ex, c); }, seed.value());
    }
  }
  for (int m : {2, 5, pick(rng, 3, program::kEpSumSources)}) {
    SCOPED_TRACE("reduce-scatter on M = " + std::to_string(m));
    // Enough elements for three parts or more, so that an inbox generation is reused.
    RsCase c{
        GroupLayout(Topology(m, 1), {{"a", 8 * m + 3, 5}, {"b", 9, 3}}, DType::kBf16, DType::kBf16),
        {},
        {}};
    c.grads = wide_grads(rng, c.layout);
    program::EpRsProgramOptions options;
    options.alpha = 0.375f;
    const program::Program clean = program::build_ep_rs_program(c.layout, options);
    for (Fault fault : rs_faults) {
      ASSERT_EQ(program::ep_rs_fault_inapplicable(fault, c.layout, options), "");
      program::EpRsProgramOptions faulty = options;
      faulty.fault = fault;
      expect_fault(
          fault, clean, program::build_ep_rs_program(c.layout, faulty),
          [&](exec::ReferenceExecutor& ex) { rs_inputs(ex, c, false); }, seed.value());
    }
  }
}

}  // namespace
}  // namespace tide
