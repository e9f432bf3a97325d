// One-node TIDE-RS and TIDE-AG (NOTE [one-node TIDE-RS], NOTE [one-node TIDE-AG]) on the CPU
// reference executor: bitwise against the plan's reference order and within float64's
// tolerance on fresh seeded data (poisoned outputs: a call that overwrites never reads them),
// race-free under jittered schedules, every new happens-before edge's fault caught for its
// reason, and the areas the layout promises (no spare, landing, outbox, inbox or receive stage;
// a staging ring of at most kOneNodeStagingNs).
#include "tide/program/rs_one_node.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "program_test_support.hpp"
#include "test_seed.hpp"
#include "tide/core/ag_plan.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/error.hpp"
#include "tide/core/models.hpp"
#include "tide/core/rs_defaults.hpp"
#include "tide/exec/fault_detection.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/ag_builder.hpp"
#include "tide/program/call_sequence.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide {
namespace {

using program::Buffer;
using program::Detection;
using program::Fault;
using program::OpKind;
using program::Space;

RsOptions one_node_options(RsMode mode) {
  RsOptions o;
  o.one_node = true;
  o.mode = mode;
  return o;
}

struct RsCase {
  int l = 4;
  RsMode mode = RsMode::kInPlace;
  bool accumulate = false;
  float alpha = 1.0f;
  std::int64_t chunk_elems = 0;  // 0: the sizing solver's
  int passes = 1;
  int staging_slots = 2;
  std::vector<ParamShape> shapes;
  std::string describe() const {
    std::string s = "1 x " + std::to_string(l) + " " + std::string(mode_name(mode)) +
                    (accumulate ? " accumulate" : "") + " alpha " + std::to_string(alpha) +
                    " chunk " + std::to_string(chunk_elems) + " passes " + std::to_string(passes) +
                    " slots " + std::to_string(staging_slots) + " shapes";
    for (const ParamShape& p : shapes)
      s += " " + std::to_string(p.rows) + "x" + std::to_string(p.cols);
    return s;
  }
};

// Builds, runs and checks one call; `data_seed` picks gradients and the initial output.
void run_rs(const RsCase& c, std::uint64_t data_seed, std::uint64_t schedule_seed) {
  SCOPED_TRACE(c.describe() + " data seed " + std::to_string(data_seed) + " schedule seed " +
               std::to_string(schedule_seed));
  const GroupLayout layout(Topology(1, c.l), c.shapes, DType::kBf16, DType::kBf16);
  RsOptions o = one_node_options(c.mode);
  o.passes = c.passes;
  o.staging_slots = c.staging_slots;
  o.staging_chunk_elems = c.chunk_elems;
  o = with_solver_defaults(o, layout);
  const RsPlan plan(layout, o);
  ASSERT_TRUE(plan.one_node());
  EXPECT_EQ(plan.geometry(), RsSubSlices::kPerRank);
  program::RsProgramOptions po;
  po.alpha = c.alpha;
  po.accumulate = c.accumulate;
  const program::Program prog = program::build_rs_program(plan, po);
  for (const program::Op& op : prog.ops) {  // no landing, no rail
    ASSERT_NE(op.kind(), OpKind::kLand) << op.label;
    ASSERT_NE(op.kind(), OpKind::kRailPut) << op.label;
  }
  std::mt19937_64 rng(data_seed);
  const std::vector<RankGrads> grads = random_grads(rng, layout);
  std::vector<std::vector<float>> initial(static_cast<std::size_t>(c.l),
                                          std::vector<float>(layout.shard_elems()));
  for (auto& rank : initial) {
    for (float& v : rank)
      v = random_value(rng, DType::kFp32);
  }
  exec::ReferenceExecutor ex(prog);
  for (int r = 0; r < c.l; ++r) {
    for (int p = 0; p < layout.param_count(); ++p) {
      store_values(grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)], DType::kBf16,
                   ex.input(Buffer{r, Space::kTensor, p}));
    }
    if (c.accumulate) {  // else the output stays poisoned: the call must not read it
      auto out = ex.input(Buffer{r, Space::kOutput, 0});
      std::memcpy(out.data(), initial[static_cast<std::size_t>(r)].data(), out.size());
    }
  }
  const exec::RunResult run = ex.run(schedule(schedule_seed));
  ASSERT_TRUE(run.clean()) << first_errors(run);
  const auto expected = rs_expected(plan, grads, c.alpha, c.accumulate, initial);
  const auto exact = rs_float64(layout, grads, c.alpha, c.accumulate, initial);
  for (int r = 0; r < c.l; ++r) {
    const auto out = ex.memory(Buffer{r, Space::kOutput, 0});
    std::vector<float> got(static_cast<std::size_t>(layout.shard_elems()));
    std::memcpy(got.data(), out.data(), out.size());
    const auto& want = expected[static_cast<std::size_t>(r)];
    ASSERT_EQ(std::memcmp(got.data(), want.data(), out.size()), 0)
        << "rank " << r << " not bitwise";
    for (std::size_t e = 0; e < got.size(); ++e) {
      if (grad_at(layout, grads, r, r, static_cast<std::int64_t>(e)) == nullptr) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[e]), 0u) << "padding is +0";
        continue;
      }
      const double ref = exact[static_cast<std::size_t>(r)][e];
      ASSERT_LE(std::abs(static_cast<double>(got[e]) - ref),
                1e-5 * c.l * std::max(1.0, std::abs(ref)))
          << "rank " << r << " element " << e;
    }
  }
}

TEST(OneNodeRs, BitwiseAndRaceFreeOnRandomGroups) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int l : {1, 2, 3, 4, 8}) {
    for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
      for (int trial = 0; trial < 3; ++trial) {
        RsCase c;
        c.l = l;
        c.mode = mode;
        c.accumulate = pick(rng, 0, 1) == 1;
        c.alpha = trial == 0 ? 1.0f : 1.0f / static_cast<float>(pick(rng, 2, 64));
        c.chunk_elems = trial == 2 ? pick(rng, 1, 16) : 0;  // a small ring reused many times
        c.passes = pick(rng, 1, 2);
        c.staging_slots = pick(rng, 1, 3);
        c.shapes = random_shapes(rng);
        run_rs(c, rng(), rng());
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(OneNodeRs, AreasAreTheStagingRingAlone) {
  const GroupLayout layout(Topology(1, 4), {{"a", 37, 5}, {"b", 9, 11}}, DType::kBf16,
                           DType::kBf16);
  for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
    const RsPlan plan(layout, with_solver_defaults(one_node_options(mode), layout));
    const RsMemory mem = plan.memory();
    EXPECT_EQ(mem.inbox_bytes, 0);
    EXPECT_EQ(mem.outbox_bytes, 0);
    EXPECT_EQ(mem.spare_bytes, 0);
    EXPECT_EQ(mem.total(), mem.staging_bytes);
    const program::RsArenaLayout a = program::rs_arena_layout(plan, program::LandingStyle::kPull);
    EXPECT_EQ(a.inbox_generations, 0);
    EXPECT_EQ(a.outbox_blocks, 0);
    EXPECT_EQ(a.spare_blocks, 0);
    const std::int64_t gradients = program::rs_gradient_area_bytes(plan);
    EXPECT_EQ(gradients, mode == RsMode::kSlotReuse ? layout.unsharded_bytes() : 0);
    EXPECT_LE(a.arena_bytes, mem.staging_bytes + gradients + 256);
    // In a communicator's arena the gradient area is the group's landing slot.
    const program::RsArenaLayout shared =
        program::rs_arena_layout({&plan}, program::LandingStyle::kPull, false);
    EXPECT_EQ(shared.arena_bytes, mem.staging_bytes);
  }
  // The multi-node layout at M = 1 is still there when asked for.
  RsOptions multi;
  multi.one_node = false;
  EXPECT_FALSE(RsPlan(layout, multi).one_node());
  EXPECT_GT(RsPlan(layout, multi).memory().spare_bytes, 0);
  // And at M >= 2 the option changes nothing.
  const GroupLayout two(Topology(2, 4), {{"a", 37, 5}, {"b", 9, 11}}, DType::kBf16, DType::kBf16);
  EXPECT_FALSE(RsPlan(two, one_node_options(RsMode::kInPlace)).one_node());
  EXPECT_EQ(RsPlan(two, one_node_options(RsMode::kInPlace)).memory().total(),
            RsPlan(two, RsOptions{}).memory().total());
}

// Contract 8 of rs_defaults.hpp: the ring holds at most kOneNodeStagingNs of the unsharded bf16
// layer, at every L, for the Llama-3.1 layers.
TEST(OneNodeRs, StagingRingWithinItsBoundForLlamaLayers) {
  for (const char* model : {"llama3.1-8b", "llama3.1-70b"}) {
    for (int l : {2, 4, 8}) {
      SCOPED_TRACE(std::string(model) + " 1 x " + std::to_string(l));
      const GroupLayout layout(Topology(1, l), find_model_group(model).params, DType::kBf16,
                               DType::kBf16);
      for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
        const RsPlan plan(layout, with_solver_defaults(one_node_options(mode), layout));
        const double ns = 2.0 * static_cast<double>(layout.shard_elems() * l);
        EXPECT_LE(static_cast<double>(plan.memory().staging_bytes), kOneNodeStagingNs * ns);
        EXPECT_GT(plan.memory().staging_bytes, 0);
        EXPECT_LT(plan.chunk_elems(), plan.pass_elems());  // a ring, not a whole shard
      }
    }
  }
}

// Contract 10 of rs_defaults.hpp: the forecast favours TIDE for the Llama layers at the library's
// defaults (the simulator agrees: bench/results/onenode), and stock where TIDE would be cut
// into thousands of fills, with a reason.
TEST(OneNodeRs, ForecastPicksStockWhereTideWouldLose) {
  for (const char* model : {"llama3.1-8b", "llama3.1-70b"}) {
    for (int l : {2, 4, 8}) {
      const GroupLayout layout(Topology(1, l), find_model_group(model).params, DType::kBf16,
                               DType::kBf16);
      const RsPlan plan(layout, with_solver_defaults(one_node_options(RsMode::kInPlace), layout));
      const OneNodeForecast f = one_node_rs_forecast(plan);
      EXPECT_TRUE(f.tide_wins()) << model << " 1 x " << l << ": " << f.tide_us << " vs "
                                 << f.stock_us;
      EXPECT_GE(f.stock_us / f.tide_us, 2.0) << model << " 1 x " << l;
      EXPECT_TRUE(f.reason().empty());
    }
  }
  const GroupLayout small(Topology(1, 8), {{"w", 4096, 64}}, DType::kBf16, DType::kBf16);
  RsOptions o = one_node_options(RsMode::kInPlace);
  o.staging_chunk_elems = 4;  // 8192 fills of 7 copies each
  const OneNodeForecast f = one_node_rs_forecast(RsPlan(small, o));
  EXPECT_FALSE(f.tide_wins());
  EXPECT_NE(f.reason().find("stock"), std::string::npos);
  RsOptions multi;
  EXPECT_THROW(one_node_rs_forecast(RsPlan(small, multi)), InvalidArgument);
}

// Writes the gradients of `layout` (bf16) as inputs; the same bytes for every run.
std::function<void(exec::ReferenceExecutor&)> gradient_inputs(const GroupLayout& layout,
                                                              std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto grads = random_grads(rng, layout);
  return [layout, grads](exec::ReferenceExecutor& ex) {
    for (int r = 0; r < layout.topology().world(); ++r) {
      for (int p = 0; p < layout.param_count(); ++p) {
        store_values(grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)], DType::kBf16,
                     ex.input(Buffer{r, Space::kTensor, p}));
      }
    }
  };
}

TEST(OneNodeRs, FaultsOfTheNewEdgesShowForTheirReason) {
  const tide::testing::TestSeed seed;
  for (int l : {2, 4}) {
    const GroupLayout layout(Topology(1, l), {{"a", 37, 5}, {"b", 9, 11}}, DType::kBf16,
                             DType::kBf16);
    const auto inputs = gradient_inputs(layout, seed.value() + static_cast<std::uint64_t>(l));
    for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
      SCOPED_TRACE("1 x " + std::to_string(l) + " " + std::string(mode_name(mode)));
      RsOptions o = one_node_options(mode);
      o.staging_chunk_elems = 8;  // several fills per slot: the ring is reused
      const RsPlan plan(layout, with_solver_defaults(o, layout));
      program::RsProgramOptions po;
      po.alpha = 0.25f;
      const program::Program clean = program::build_rs_program(plan, po);
      int shown = 0;
      for (Fault fault : faults_of("reduce-scatter")) {
        po.fault = fault;
        const std::string why = program::rs_fault_inapplicable(fault, plan, po);
        const bool pull_only =
            fault == Fault::kRsPullBeforeReady || fault == Fault::kRsReleaseBeforePeerReads;
        const bool applies = fault == Fault::kRsStagingReuse ||
                             fault == Fault::kRsReleaseBeforeRead ||
                             (pull_only && mode == RsMode::kSlotReuse);
        ASSERT_EQ(why.empty(), applies) << program::fault_info(fault).name << ": " << why;
        if (!applies) continue;
        const program::Program faulty = program::build_rs_program(plan, po);
        const program::FaultInfo& info = program::fault_info(fault);
        for (std::uint64_t s : {1u, 2u, 3u}) {
          exec::ReferenceExecutor good(clean);
          inputs(good);
          ASSERT_TRUE(good.run(schedule(s)).clean());
          exec::ReferenceExecutor bad(faulty);
          inputs(bad);
          const exec::RunResult run = bad.run(schedule(s));
          const Detection d = exec::classify_run(run, true, true);
          EXPECT_EQ(program::detection_name(d), program::detection_name(info.expected))
              << info.name << " (schedule seed " << s << "): " << info.mechanism;
          EXPECT_FALSE(exec::detection_evidence(run, d).empty()) << info.name;
        }
        ++shown;
      }
      EXPECT_EQ(shown, mode == RsMode::kSlotReuse ? 4 : 2);
    }
  }
}

// Consecutive calls sharing the ring (cumulative STAGED / FREE counters) and, in Slot-Reuse,
// the gradient area: a call sequence expanded over several calls stays race-free and bitwise.
TEST(OneNodeRs, CallSequencesShareTheRing) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
    SCOPED_TRACE(std::string(mode_name(mode)));
    const GroupLayout layout(Topology(1, 4), random_shapes(rng), DType::kBf16, DType::kBf16);
    RsOptions o = one_node_options(mode);
    o.staging_chunk_elems = 4;
    const RsPlan plan(layout, with_solver_defaults(o, layout));
    program::RsProgramOptions po;
    po.alpha = 0.5f;
    const program::RsArenaLayout areas =
        program::rs_arena_layout(plan, program::LandingStyle::kPull);
    const program::CallSequence seq = program::rs_call_sequence(plan, po, areas, {});
    constexpr int kCalls = 4;
    const program::Program prog = program::expand_calls(seq, kCalls);
    std::vector<std::vector<RankGrads>> grads;
    exec::ReferenceExecutor ex(prog);
    for (int e = 0; e < kCalls; ++e) {
      grads.push_back(random_grads(rng, layout));
      for (int r = 0; r < 4; ++r) {
        for (int p = 0; p < layout.param_count(); ++p) {
          store_values(grads.back()[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)],
                       DType::kBf16,
                       ex.input(Buffer{r, Space::kTensor, e * layout.param_count() + p}));
        }
      }
    }
    const exec::RunResult run = ex.run(schedule(rng()));
    ASSERT_TRUE(run.clean()) << first_errors(run);
    const std::vector<std::vector<float>> none(4, std::vector<float>(layout.shard_elems()));
    for (int e = 0; e < kCalls; ++e) {
      const auto want = rs_expected(plan, grads[static_cast<std::size_t>(e)], 0.5f, false, none);
      for (int r = 0; r < 4; ++r) {
        const auto out = ex.memory(Buffer{r, Space::kOutput, e});
        ASSERT_EQ(std::memcmp(out.data(), want[static_cast<std::size_t>(r)].data(), out.size()), 0)
            << "call " << e << " rank " << r;
      }
    }
  }
}

// NOTE [one-node TIDE-AG]: no receive stage at M = 1 for shards given per call; the stage is
// unchanged from M = 2 on and for a resident shard.
TEST(OneNodeAg, NoReceiveStage) {
  for (int l : {2, 4, 8}) {
    const GroupLayout one(Topology(1, l), {{"a", 37, 5}, {"b", 9, 11}}, DType::kBf16, DType::kBf16);
    const GroupLayout two(Topology(2, l), {{"a", 37, 5}, {"b", 9, 11}}, DType::kBf16, DType::kBf16);
    AgOptions staged;
    staged.staged_shards = true;
    AgOptions cast;
    cast.mixed_precision_cast = true;
    EXPECT_EQ(AgPlan(one, staged).stage_bytes(), 0);
    EXPECT_EQ(AgPlan(one, cast).stage_bytes(), 0);
    EXPECT_TRUE(AgPlan(one, staged).one_node());
    EXPECT_FALSE(AgPlan(one, AgOptions{}).one_node());
    EXPECT_EQ(AgPlan(two, staged).stage_bytes(), 2 * two.shard_bytes());
    EXPECT_FALSE(AgPlan(two, staged).one_node());
  }
}

}  // namespace
}  // namespace tide
