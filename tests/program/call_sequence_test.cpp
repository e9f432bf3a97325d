// Call sequences (NOTE [call sequences]): a group's templates expanded into many consecutive
// calls, run on the CPU reference executor with fresh data per call. Every read and buffer
// reuse across calls must be ordered (App. E, I1-I4) and every output bitwise equal to the
// definition in TIDE's arithmetic order.
#include "tide/program/call_sequence.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "program_test_support.hpp"
#include "test_seed.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/communicator_arena.hpp"

namespace tide {
namespace {

using exec::ReferenceExecutor;
using program::Buffer;
using program::Space;

std::vector<ParamShape> odd_shapes(std::mt19937_64& rng, int count) {
  std::vector<ParamShape> shapes;
  for (int p = 0; p < count; ++p) {
    shapes.push_back(ParamShape{"p" + std::to_string(p), 1 + static_cast<std::int64_t>(rng() % 23),
                                1 + static_cast<std::int64_t>(rng() % 9)});
  }
  return shapes;
}

std::string errors_of(const exec::RunResult& r) {
  std::string text;
  for (std::size_t i = 0; i < r.errors.size() && i < 4; ++i)
    text += r.errors[i].message + "\n";
  return text;
}

struct Topo {
  int nodes, gpus;
};

class RsSequence : public ::testing::TestWithParam<std::tuple<Topo, RsMode, bool>> {};

TEST_P(RsSequence, ManyCallsMatchTheDefinitionBitwise) {
  const auto [topo, mode, accumulate] = GetParam();
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  const GroupLayout layout(Topology(topo.nodes, topo.gpus), odd_shapes(rng, 1 + rng() % 4),
                           DType::kBf16, DType::kBf16);
  RsOptions options;
  options.mode = mode;
  options.wave_width = topo.nodes > 2 ? std::min(2, topo.gpus) : 0;
  options.round_width = 2;
  options.staging_chunk_elems = 8;  // several fills per call: staging credits cross calls
  const RsPlan plan(layout, options);
  program::RsProgramOptions rs;
  rs.alpha = 0.5f;
  rs.accumulate = accumulate;
  const program::CallSequence seq =
      program::rs_call_sequence(plan, rs, program::rs_arena_layout(plan, rs.landing));
  ASSERT_EQ(seq.period % 2, 0) << "banks alternate: call e uses bank e mod 2 (Sec. 5.2)";
  const int kCalls = std::max(5, 2 * seq.period + 1);  // every template twice, one more call
  const program::Program flat = program::expand_calls(seq, kCalls);

  ReferenceExecutor ex(flat);
  const int world = layout.topology().world();
  std::vector<std::vector<std::vector<float>>> expected(static_cast<std::size_t>(kCalls));
  std::vector<std::vector<float>> initial(static_cast<std::size_t>(world));
  for (int e = 0; e < kCalls; ++e) {
    const std::vector<RankGrads> grads = random_grads(rng, layout);
    for (int r = 0; r < world; ++r) {
      for (int p = 0; p < layout.param_count(); ++p) {
        const auto& g = grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
        store_values(g, DType::kBf16,
                     ex.input(Buffer{r, Space::kTensor, e * layout.param_count() + p}));
      }
      auto& init = initial[static_cast<std::size_t>(r)];
      init.resize(static_cast<std::size_t>(layout.shard_elems()));
      for (float& v : init)
        v = random_value(rng, DType::kFp32);
      if (accumulate) store_values(init, DType::kFp32, ex.input(Buffer{r, Space::kOutput, e}));
    }
    expected[static_cast<std::size_t>(e)] = rs_expected(plan, grads, rs.alpha, accumulate, initial);
  }
  exec::RunOptions run;
  run.seed = seed.value();
  run.jitter = 0.5;
  const exec::RunResult result = ex.run(run);
  ASSERT_TRUE(result.clean()) << errors_of(result);
  for (int e = 0; e < kCalls; ++e) {
    for (int r = 0; r < world; ++r) {
      const auto out = ex.memory(Buffer{r, Space::kOutput, e});
      const auto& want = expected[static_cast<std::size_t>(e)][static_cast<std::size_t>(r)];
      ASSERT_EQ(out.size(), want.size() * 4);
      ASSERT_EQ(std::memcmp(out.data(), want.data(), out.size()), 0)
          << "call " << e << " rank " << r << " period " << seq.period;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Topologies, RsSequence,
                         ::testing::Combine(::testing::Values(Topo{1, 2}, Topo{2, 1}, Topo{2, 2},
                                                              Topo{3, 2}, Topo{4, 1}, Topo{5, 2}),
                                            ::testing::Values(RsMode::kInPlace, RsMode::kSlotReuse),
                                            ::testing::Bool()));

class AgSequence : public ::testing::TestWithParam<std::tuple<Topo, bool>> {};

// With a cast every call reads fresh fp32 master shards (tensors), so each call's landing
// differs; the last call's must hold its parameters. Without a cast the resident shard is
// rewritten by no one, and every call must land it again intact.
TEST_P(AgSequence, ManyCallsLandEveryShard) {
  const auto [topo, cast] = GetParam();
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  const GroupLayout layout(Topology(topo.nodes, topo.gpus), odd_shapes(rng, 1 + rng() % 4),
                           DType::kBf16, DType::kBf16);
  AgOptions options;
  options.mixed_precision_cast = cast;
  options.head_bytes = 64;
  const AgPlan plan(layout, options);
  const program::AgSequenceAreas areas = program::ag_sequence_areas(plan);
  const program::CallSequence seq = program::ag_call_sequence(plan, areas);
  if (topo.nodes > 1) {  // otherwise nothing is staged (one node: NOTE [one-node TIDE-AG])
    ASSERT_EQ(seq.period % 2, 0) << "receive stages alternate: call a uses stage a mod 2";
  }
  const int kCalls = std::max(5, 2 * seq.period + 1);
  const program::Program flat = program::expand_calls(seq, kCalls);
  ReferenceExecutor ex(flat);
  const int world = layout.topology().world();
  // shards[r]: rank r's packed bf16 shard as the last call sees it.
  std::vector<std::vector<std::uint16_t>> shards(static_cast<std::size_t>(world));
  for (int e = 0; e < (cast ? kCalls : 1); ++e) {
    for (int r = 0; r < world; ++r) {
      auto& shard = shards[static_cast<std::size_t>(r)];
      shard.assign(static_cast<std::size_t>(layout.shard_bytes() / 2), 0);
      for (int p = 0; p < layout.param_count(); ++p) {
        const std::vector<float> master = random_masters(rng, layout, p, DType::kFp32, shard);
        if (cast) {
          store_values(master, DType::kFp32,
                       ex.input(Buffer{r, Space::kTensor, e * layout.param_count() + p}));
        }
      }
      if (!cast) {
        auto bytes = ex.input(Buffer{r, Space::kArena, 0}, areas.resident, layout.shard_bytes());
        std::memcpy(bytes.data(), shard.data(), bytes.size());
      }
    }
  }
  exec::RunOptions run;
  run.seed = seed.value();
  run.jitter = 0.5;
  const exec::RunResult result = ex.run(run);
  ASSERT_TRUE(result.clean()) << errors_of(result);
  for (int r = 0; r < world; ++r) {
    const auto arena = ex.memory(Buffer{r, Space::kArena, 0});
    for (int p = 0; p < layout.param_count(); ++p) {
      for (int src = 0; src < world; ++src) {
        const ParamLayout& pl = layout.param(p);
        const std::int64_t bytes = layout.valid_rows(p, src) * pl.cols * 2;
        const std::byte* got = arena.data() + areas.landing + layout.landing_offset(p, src);
        const auto& shard = shards[static_cast<std::size_t>(src)];
        ASSERT_EQ(std::memcmp(got, shard.data() + pl.offset / 2, static_cast<std::size_t>(bytes)),
                  0)
            << "rank " << r << " param " << p << " from rank " << src;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Topologies, AgSequence,
                         ::testing::Combine(::testing::Values(Topo{1, 2}, Topo{2, 1}, Topo{2, 2},
                                                              Topo{3, 2}, Topo{5, 1}),
                                            ::testing::Bool()));

// The simulator finds a step's templates with two periods of at most two calls from call 0
// (training_step.cpp); the runtime with its default warm-up and periods. Both must give the
// same templates: every op's kind, place, regions, counter, value and event, per template
// (labels aside).
std::string op_text(const program::Op& op) {
  std::string t = std::to_string(static_cast<int>(op.kind())) + " r" + std::to_string(op.rank) +
                  " s" + std::to_string(op.stream);  // labels name calls only for people
  program::Op copy = op;
  program::for_each_region(copy, [&](program::Region& r) {
    t += " [" + std::to_string(r.buffer.rank) + ":" +
         std::to_string(static_cast<int>(r.buffer.space)) + ":" + std::to_string(r.buffer.index) +
         "@" + std::to_string(r.offset) + "/" + std::to_string(r.width) + "/" +
         std::to_string(r.pitch) + "/" + std::to_string(r.rows) + "]";
  });
  if (const program::Counter* c = program::counter_of(copy))
    t += " c" + std::to_string(c->rank) + ":" + std::to_string(c->id);
  if (const auto* w = op.get_if<program::WaitOp>()) t += " >=" + std::to_string(w->value);
  if (const auto add = program::addition_of(op)) t += " +" + std::to_string(add->value);
  if (const int* e = program::event_of(copy)) t += " e" + std::to_string(*e);
  return t;
}

void expect_same_templates(const program::CallSequence& quick, const program::CallSequence& full) {
  ASSERT_EQ(quick.period, full.period);
  EXPECT_EQ(quick.counters, full.counters);
  EXPECT_EQ(quick.events_per_call, full.events_per_call);
  EXPECT_EQ(quick.max_event_age, full.max_event_age);
  for (int j = 0; j < quick.period; ++j) {
    const program::CallTemplate& a = quick.templates[static_cast<std::size_t>(j)];
    const program::CallTemplate& b = full.templates[static_cast<std::size_t>(j)];
    EXPECT_EQ(a.program.stream_names, b.program.stream_names);
    EXPECT_EQ(a.additions, b.additions);
    EXPECT_EQ(a.event_age, b.event_age);
    ASSERT_EQ(a.program.ops.size(), b.program.ops.size()) << "template " << j;
    for (std::size_t i = 0; i < a.program.ops.size(); ++i)
      ASSERT_EQ(op_text(a.program.ops[i]), op_text(b.program.ops[i])) << "template " << j;
  }
}

TEST(CallSequence, TwoPeriodsFromTheFirstCallFindTheRuntimesTemplates) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  program::SequenceOptions quick;
  quick.max_period = 2;
  quick.warmup = 2;
  for (const Topo topo : {Topo{1, 2}, Topo{2, 1}, Topo{2, 2}, Topo{3, 2}, Topo{5, 1}, Topo{4, 2}}) {
    for (const RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
      for (const bool cast : {false, true}) {
        SCOPED_TRACE(std::to_string(topo.nodes) + "x" + std::to_string(topo.gpus) +
                     (mode == RsMode::kInPlace ? " in-place" : " slot-reuse") +
                     (cast ? " cast" : ""));
        std::vector<GroupLayout> layouts;
        for (int g = 0; g < 3; ++g) {
          layouts.emplace_back(Topology(topo.nodes, topo.gpus), odd_shapes(rng, 1 + rng() % 3),
                               DType::kBf16, DType::kBf16);
        }
        std::vector<AgPlan> ag;
        std::vector<RsPlan> rs;
        std::vector<program::ArenaGroup> groups;
        for (const GroupLayout& layout : layouts) {
          AgOptions ao;
          ao.mixed_precision_cast = cast;
          ag.emplace_back(layout, ao);
          RsOptions ro;
          ro.mode = mode;
          ro.staging_chunk_elems = 8;  // several fills per call
          rs.emplace_back(layout, ro);
        }
        for (std::size_t g = 0; g < layouts.size(); ++g)
          groups.push_back({&ag[g], &rs[g], static_cast<int>(g % 2)});
        const program::CommunicatorArena arena = program::communicator_arena(groups);
        for (std::size_t g = 0; g < groups.size(); ++g) {
          const program::GroupSequences a =
              program::group_sequences(groups, arena, g, {}, program::Fault::kNone, quick);
          const program::GroupSequences b = program::group_sequences(groups, arena, g);
          expect_same_templates(a.all_gather, b.all_gather);
          expect_same_templates(a.reduce_scatter, b.reduce_scatter);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tide
