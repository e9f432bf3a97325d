// Expert-parallel lane call sequences (program/ep_lane.hpp, NOTE [call sequences]): the
// lane's templates expanded into many consecutive calls with fresh random data per call (seed
// printed), run on the CPU reference executor. Every read and reuse across calls must be
// ordered (App. E, I1-I4: the inbox generations' shared credits, the landing offered only
// after the previous call), the all-gather's landing must hold the last call's shards bit for
// bit over a poisoned landing, and every reduce-scatter output must equal ep_rs_expected with
// that call's alpha and accumulate (bound per call, as the runtime binds them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "program_test_support.hpp"
#include "test_seed.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/ep_lane.hpp"

namespace tide {
namespace {

using exec::ReferenceExecutor;
using program::Buffer;
using program::Space;

// The first unordered read or write of `program` under schedules 0 .. seeds - 1 ("" when none);
// fails the test on any other error (the inputs must be complete).
template <class Inputs>
std::string first_race(const program::Program& program, const Inputs& inputs, int seeds) {
  for (int s = 0; s < seeds; ++s) {
    ReferenceExecutor ex(program);
    inputs(ex);
    const exec::RunResult run = ex.run(schedule(static_cast<std::uint64_t>(s)));
    for (const exec::ExecError& e : run.errors) {
      if (e.kind == exec::ErrorKind::kUnorderedRead || e.kind == exec::ErrorKind::kUnorderedWrite)
        return e.message;
      ADD_FAILURE() << "not a race: " << e.message;
      return "";
    }
  }
  return "";
}

// Three ways the own shard arrives: resident, staged per call, cast from fp32 masters.
AgOptions shard_source(int kind) {
  AgOptions o;
  o.staged_shards = kind == 1;
  o.mixed_precision_cast = kind == 2;
  return o;
}

TEST(EpLaneSequence, AllGatherCallsLandEveryShardBitwise) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int m : {2, 3, 4, 5, 7, 8, 9, pick(rng, 10, 17)}) {
    const int kind = m % 3;
    const GroupLayout layout(Topology(m, 1), random_shapes(rng), DType::kBf16, DType::kBf16);
    const AgPlan plan(layout, shard_source(kind));
    SCOPED_TRACE("M = " + std::to_string(m) + ", shard source " + std::to_string(kind));
    // The areas as a communicator places them: a resident shard, then the landing slot.
    program::EpAgArenaLayout areas;
    areas.resident = 512;
    areas.landing = 4096 + layout.shard_bytes() / 4096 * 4096;
    areas.arena_bytes = areas.landing + layout.unsharded_bytes() + 256;
    const program::CallSequence seq = program::ep_ag_call_sequence(plan, areas);
    EXPECT_EQ(seq.period, 1) << "every counter is the call's own";
    const int calls = 5;
    const program::Program flat = program::expand_calls(seq, calls);  // the executor keeps it
    ReferenceExecutor ex(flat);
    // shards[r]: rank r's packed bf16 shard as the last call sees it.
    std::vector<std::vector<std::uint16_t>> shards(static_cast<std::size_t>(m));
    for (int e = 0; e < (kind == 0 ? 1 : calls); ++e) {
      for (int r = 0; r < m; ++r) {
        auto& shard = shards[static_cast<std::size_t>(r)];
        shard.assign(static_cast<std::size_t>(layout.shard_bytes() / 2), 0);
        for (int p = 0; p < layout.param_count(); ++p) {
          const ParamLayout& pl = layout.param(p);
          const std::vector<float> master =
              random_masters(rng, layout, p, kind == 2 ? DType::kFp32 : DType::kBf16, shard);
          const Buffer tensor{r, Space::kTensor, e * layout.param_count() + p};
          if (kind == 2) store_values(master, DType::kFp32, ex.input(tensor));
          if (kind == 1) {
            auto bytes = ex.input(tensor);
            std::memcpy(bytes.data(), shard.data() + pl.offset / 2, bytes.size());
          }
        }
        if (kind == 0) {
          auto bytes = ex.input(Buffer{r, Space::kArena, 0}, areas.resident, layout.shard_bytes());
          std::memcpy(bytes.data(), shard.data(), bytes.size());
        }
        auto landing =
            ex.input(Buffer{r, Space::kArena, 0}, areas.landing, layout.unsharded_bytes());
        std::fill(landing.begin(), landing.end(), std::byte{0xA5});  // poison
      }
    }
    const exec::RunResult run = ex.run(schedule(seed.value() + static_cast<std::uint64_t>(m)));
    ASSERT_TRUE(run.clean()) << first_errors(run);
    for (int r = 0; r < m; ++r) {
      const auto arena = ex.memory(Buffer{r, Space::kArena, 0});
      for (int p = 0; p < layout.param_count(); ++p) {
        const ParamLayout& pl = layout.param(p);
        for (int u = 0; u < m; ++u) {
          const std::byte* got = arena.data() + areas.landing + layout.landing_offset(p, u);
          ASSERT_EQ(std::memcmp(got, shards[static_cast<std::size_t>(u)].data() + pl.offset / 2,
                                static_cast<std::size_t>(pl.shard_bytes)),
                    0)
              << "rank " << r << " holds rank " << u << "'s shard of p" << p << " wrong";
        }
      }
    }
  }
}

// Without the waits one call back (this rank's previous rounds and arrivals before it offers
// its landing again), a call's puts overwrite landing rows that the previous call still
// forwards from: the race detector must see it.
TEST(EpLaneSequence, OfferingTheLandingBeforeThePreviousCallIsARace) {
  const GroupLayout layout(Topology(5, 1), {{"a", 23, 6}, {"b", 9, 3}}, DType::kBf16, DType::kBf16);
  program::EpAgArenaLayout areas = program::ep_ag_arena_layout(layout);
  const program::CallSequence seq = program::ep_ag_call_sequence(AgPlan(layout, {}), areas);
  program::Program flat = program::expand_calls(seq, 4);
  const int readiness = 0;  // the builder's first stream
  ASSERT_EQ(flat.stream_names.at(readiness), "readiness");
  std::vector<program::Op> kept;
  for (const program::Op& op : flat.ops) {
    if (!(op.is<program::EventWaitOp>() && op.stream == readiness)) kept.push_back(op);
  }
  ASSERT_LT(kept.size(), flat.ops.size());
  flat.ops = kept;
  const program::Program clean = program::expand_calls(seq, 4);
  auto inputs = [&](ReferenceExecutor& ex) {
    std::mt19937_64 rng(7);
    for (int r = 0; r < 5; ++r) {
      std::vector<std::uint16_t> shard(static_cast<std::size_t>(layout.shard_bytes() / 2));
      for (int p = 0; p < layout.param_count(); ++p)
        (void)random_masters(rng, layout, p, DType::kBf16, shard);
      auto bytes = ex.input(Buffer{r, Space::kArena, 0}, areas.resident, layout.shard_bytes());
      std::memcpy(bytes.data(), shard.data(), bytes.size());
      auto landing = ex.input(Buffer{r, Space::kArena, 0}, areas.landing, layout.unsharded_bytes());
      std::fill(landing.begin(), landing.end(), std::byte{0xA5});
    }
  };
  EXPECT_EQ(first_race(clean, inputs, 16), "") << "the sequence itself";
  EXPECT_NE(first_race(flat, inputs, 16), "")
      << "no schedule of 16 showed the landing offered early";
}

// The runtime binds alpha and accumulate per call (NOTE [host execution] 3): here the flat
// program's sums and folds of call e get call e's, found by the tensors and output they use.
void bind_per_call(program::Program& flat, int params, const std::vector<float>& alpha,
                   const std::vector<bool>& accumulate) {
  for (program::Op& op : flat.ops) {
    if (auto* sum = op.get_if<program::SumOp>()) {
      sum->alpha = alpha[static_cast<std::size_t>(
          sum->segments.empty() ? 0 : sum->segments.front().param / params)];
    }
    if (auto* land = op.get_if<program::LandOp>())
      land->accumulate = accumulate[static_cast<std::size_t>(land->dst.buffer.index)];
  }
}

TEST(EpLaneSequence, ReduceScatterCallsAreBitwiseTheLaneOrder) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int trial = 0; trial < 10; ++trial) {
    const int m = trial < 7 ? trial + 2 : pick(rng, 2, program::kEpSumSources);
    // Shapes large enough for four parts in most trials (inbox generations reused in a call).
    std::vector<ParamShape> shapes = random_shapes(rng);
    shapes.push_back({"wide", pick(rng, 4 * m, 12 * m), pick(rng, 3, 9)});
    const GroupLayout layout(Topology(m, 1), shapes, DType::kBf16, DType::kBf16);
    program::EpRsProgramOptions o;
    o.fold_always = true;
    const program::EpRsArenaLayout areas =
        program::ep_rs_arena_layout_at(program::ep_rs_arena_layout(layout, o), 8192,
                                       8192 + program::ep_rs_arena_layout(layout, o).arena_bytes);
    const program::CallSequence seq = program::ep_rs_call_sequence(layout, areas);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": M = " + std::to_string(m) + ", " +
                 std::to_string(areas.parts) + " parts");
    EXPECT_EQ(seq.period, 1);
    const int calls = 5;
    const int params = layout.param_count();
    program::Program flat = program::expand_calls(seq, calls);
    std::vector<float> alpha;
    std::vector<bool> accumulate;
    for (int e = 0; e < calls; ++e) {
      alpha.push_back(e % 2 == 0 ? 1.0f / static_cast<float>(m) : random_value(rng, DType::kFp32));
      accumulate.push_back(e % 3 == 1);
    }
    bind_per_call(flat, params, alpha, accumulate);
    ReferenceExecutor ex(flat);
    std::vector<std::vector<std::vector<float>>> expected;
    for (int e = 0; e < calls; ++e) {
      std::vector<RankGrads> grads = random_grads(rng, layout);
      for (RankGrads& rank : grads) {  // wide exponents: another order shows in the bits
        for (auto& param : rank) {
          for (float& v : param)
            v = std::ldexp(v, pick(rng, -24, 24));
        }
      }
      std::vector<std::vector<float>> initial(static_cast<std::size_t>(m));
      for (int r = 0; r < m; ++r) {
        for (int p = 0; p < params; ++p) {
          store_values(grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)],
                       DType::kBf16, ex.input(Buffer{r, Space::kTensor, e * params + p}));
        }
        auto& init = initial[static_cast<std::size_t>(r)];
        init.resize(static_cast<std::size_t>(layout.shard_elems()));
        for (float& v : init)
          v = random_value(rng, DType::kFp32);
        // Accumulating calls start from `init`; the others from poison (NaN bits).
        auto out = ex.input(Buffer{r, Space::kOutput, e});
        if (accumulate[static_cast<std::size_t>(e)]) {
          store_values(init, DType::kFp32, out);
        } else {
          std::fill(out.begin(), out.end(), std::byte{0xFF});
        }
      }
      expected.push_back(ep_rs_expected(layout, grads, alpha[static_cast<std::size_t>(e)],
                                        accumulate[static_cast<std::size_t>(e)], initial));
    }
    const exec::RunResult run = ex.run(schedule(seed.value() + static_cast<std::uint64_t>(trial)));
    ASSERT_TRUE(run.clean()) << first_errors(run);
    for (int e = 0; e < calls; ++e) {
      for (int r = 0; r < m; ++r) {
        const auto out = ex.memory(Buffer{r, Space::kOutput, e});
        const auto& want = expected[static_cast<std::size_t>(e)][static_cast<std::size_t>(r)];
        ASSERT_EQ(out.size(), want.size() * 4);
        ASSERT_EQ(std::memcmp(out.data(), want.data(), out.size()), 0)
            << "call " << e << " rank " << r << " (accumulate "
            << accumulate[static_cast<std::size_t>(e)] << ")";
      }
    }
  }
}

// Without the shared generation credits, a call's parts overwrite an inbox generation that the
// previous call's sums still read: the race detector must see it. With two parts no
// generation is reused inside a call, so every credit dropped here is one across calls.
TEST(EpLaneSequence, DroppingTheCreditsAcrossCallsIsARace) {
  const GroupLayout layout(Topology(3, 1), {{"a", 6, 4}}, DType::kBf16, DType::kBf16);
  program::EpRsProgramOptions o;
  o.fold_always = true;
  const program::EpRsArenaLayout areas = program::ep_rs_arena_layout(layout, o);
  ASSERT_EQ(areas.parts, 2);
  program::Program flat = program::expand_calls(program::ep_rs_call_sequence(layout, areas), 3);
  // Remove every wait on a generation credit (counter ids 0 .. 2 M - 1).
  std::vector<program::Op> kept;
  for (const program::Op& op : flat.ops) {
    const auto* wait = op.get_if<program::WaitOp>();
    if (wait == nullptr || wait->counter.id >= 2 * 3) kept.push_back(op);
  }
  ASSERT_LT(kept.size(), flat.ops.size());
  flat.ops = kept;
  auto inputs = [&](ReferenceExecutor& ex) {
    std::mt19937_64 rng(7);
    for (int e = 0; e < 3; ++e) {
      const std::vector<RankGrads> grads = random_grads(rng, layout);
      for (int r = 0; r < 3; ++r)
        store_values(grads[static_cast<std::size_t>(r)][0], DType::kBf16,
                     ex.input(Buffer{r, Space::kTensor, e}));
    }
  };
  const program::Program clean =
      program::expand_calls(program::ep_rs_call_sequence(layout, areas), 3);
  EXPECT_EQ(first_race(clean, inputs, 16), "") << "the sequence itself";
  EXPECT_NE(first_race(flat, inputs, 16), "") << "no schedule of 16 showed the missing credits";
}

}  // namespace
}  // namespace tide
