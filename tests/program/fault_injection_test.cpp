// Program-level fault injection: every fault of the catalog (program/faults.hpp), built into
// a TIDE-AG, TIDE-RS, call-sequence or step program, run on the CPU reference executor on
// three schedule seeds and two or more topologies, must show exactly as its expected
// Detection (NOTE [fault detection]). Corruption is judged against the same inputs run without the
// fault, which must itself be clean.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "program_test_support.hpp"
#include "test_seed.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/exec/fault_detection.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/ag_builder.hpp"
#include "tide/program/call_sequence.hpp"
#include "tide/program/faults.hpp"
#include "tide/program/rs_builder.hpp"
#include "tide/program/training_step.hpp"

namespace tide {
namespace {

using program::Buffer;
using program::Detection;
using program::Fault;
using program::Space;

// Writes a program's inputs into an executor (the same bytes for the clean and faulty runs).
using Inputs = std::function<void(exec::ReferenceExecutor&)>;

std::vector<std::byte> random_words(std::mt19937_64& rng, std::int64_t bytes, DType dtype) {
  std::vector<float> values(static_cast<std::size_t>(bytes / item_bytes(dtype)));
  for (float& v : values)
    v = random_value(rng, dtype);
  std::vector<std::byte> out(static_cast<std::size_t>(bytes));
  store_values(values, dtype, out);
  return out;
}

std::vector<std::vector<std::byte>> outputs(exec::ReferenceExecutor& ex,
                                            const program::Program& p) {
  std::vector<std::vector<std::byte>> all;
  for (int r = 0; r < p.ranks; ++r) {
    for (std::size_t o = 0; o < p.buffers[static_cast<std::size_t>(r)].output_bytes.size(); ++o) {
      const auto bytes = ex.memory(Buffer{r, Space::kOutput, static_cast<int>(o)});
      all.emplace_back(bytes.begin(), bytes.end());
    }
  }
  return all;
}

// Runs `clean` and `faulty` on the same inputs under `seed` and classifies the faulty run.
Detection detect(const program::Program& clean, const program::Program& faulty,
                 const Inputs& inputs, std::uint64_t seed) {
  exec::RunOptions options;
  options.seed = seed;
  options.jitter = 0.25;
  exec::ReferenceExecutor good(clean);
  inputs(good);
  const exec::RunResult good_run = good.run(options);
  EXPECT_TRUE(good_run.clean()) << "the program without the fault" << first_errors(good_run);
  exec::ReferenceExecutor bad(faulty);
  inputs(bad);
  const exec::RunResult bad_run = bad.run(options);
  const bool same = outputs(good, clean) == outputs(bad, faulty);
  const Detection d = exec::classify_run(bad_run, true, same);
  if (d != Detection::kNone && d != Detection::kCorruption) {
    EXPECT_FALSE(exec::detection_evidence(bad_run, d).empty());
  }
  return d;
}

void expect_detection(Fault fault, const std::function<Detection(std::uint64_t)>& run) {
  const program::FaultInfo& info = program::fault_info(fault);
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    EXPECT_EQ(program::detection_name(run(seed)), program::detection_name(info.expected))
        << info.name << " (schedule seed " << seed << "): " << info.mechanism;
  }
}

// --- TIDE-AG: a lone call with its consumer and the landing's previous user ---------------

void check_ag_faults(int m, int l) {
  SCOPED_TRACE("all-gather on M = " + std::to_string(m) + ", L = " + std::to_string(l));
  const tide::testing::TestSeed data_seed;
  std::mt19937_64 rng = data_seed.engine();
  const GroupLayout layout(Topology(m, l), {{"a", 37, 5}, {"b", 9, 11}, {"c", 130, 2}},
                           DType::kBf16, DType::kBf16);
  AgOptions plan_options;
  plan_options.head_bytes = 64;
  const AgPlan plan(layout, plan_options);
  const program::AgArenaLayout arena = program::ag_arena_layout(plan);
  std::vector<std::vector<std::byte>> shards, previous;
  for (int r = 0; r < layout.topology().world(); ++r) {
    shards.push_back(random_words(rng, layout.shard_bytes(), DType::kBf16));
    previous.push_back(random_words(rng, layout.unsharded_bytes(), DType::kBf16));
  }
  const Inputs inputs = [&](exec::ReferenceExecutor& ex) {
    for (int r = 0; r < layout.topology().world(); ++r) {
      put(ex, Buffer{r, Space::kArena, 0}, arena.resident, shards[static_cast<std::size_t>(r)]);
      put(ex, Buffer{r, Space::kArena, 0}, arena.landing, previous[static_cast<std::size_t>(r)]);
    }
  };
  program::AgProgramOptions options;
  options.consumer = true;
  const program::Program clean = program::build_ag_program(plan, options);
  for (Fault fault : faults_of("all-gather")) {
    ASSERT_EQ(program::ag_fault_inapplicable(fault, plan), "") << program::fault_info(fault).name;
    options.fault = fault;
    const program::Program faulty = program::build_ag_program(plan, options);
    expect_detection(fault,
                     [&](std::uint64_t seed) { return detect(clean, faulty, inputs, seed); });
  }
}

TEST(FaultInjection, AllGatherFaultsShowAsExpected) {
  check_ag_faults(5, 2);
  check_ag_faults(4, 4);
}

// --- TIDE-RS: a lone call -------------------------------------------------------------------

void check_rs_faults(int m, int l, int wave_width) {
  SCOPED_TRACE("reduce-scatter on M = " + std::to_string(m) + ", L = " + std::to_string(l) +
               ", W_wave = " + std::to_string(wave_width));
  const tide::testing::TestSeed data_seed;
  std::mt19937_64 rng = data_seed.engine();
  const GroupLayout layout(Topology(m, l), {{"a", 37, 5}, {"b", 9, 11}}, DType::kBf16,
                           DType::kBf16);
  RsOptions plan_options;
  plan_options.wave_width = wave_width;
  plan_options.round_width = 1;
  plan_options.mode = RsMode::kSlotReuse;
  const RsPlan plan(layout, plan_options);
  std::vector<std::vector<std::vector<std::byte>>> grads;
  for (int r = 0; r < layout.topology().world(); ++r) {
    grads.emplace_back();
    for (const ParamLayout& pl : layout.params())
      grads.back().push_back(random_words(rng, pl.rows * pl.cols * 2, DType::kBf16));
  }
  const Inputs inputs = [&](exec::ReferenceExecutor& ex) {
    for (int r = 0; r < layout.topology().world(); ++r) {
      for (int p = 0; p < layout.param_count(); ++p) {
        put(ex, Buffer{r, Space::kTensor, p}, 0,
            grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)]);
      }
    }
  };
  program::RsProgramOptions options;
  options.alpha = 0.125f;
  options.landing = program::LandingStyle::kSwitchReduce;  // every fault applies
  const program::Program clean = program::build_rs_program(plan, options);
  for (Fault fault : faults_of("reduce-scatter")) {
    // The one-node Slot-Reuse faults show on M = 1 only (rs_one_node_test.cpp).
    if (fault == Fault::kRsPullBeforeReady || fault == Fault::kRsReleaseBeforePeerReads) continue;
    ASSERT_EQ(program::rs_fault_inapplicable(fault, plan, options), "")
        << program::fault_info(fault).name;
    options.fault = fault;
    const program::Program faulty = program::build_rs_program(plan, options);
    expect_detection(fault,
                     [&](std::uint64_t seed) { return detect(clean, faulty, inputs, seed); });
  }
}

TEST(FaultInjection, ReduceScatterFaultsShowAsExpected) {
  check_rs_faults(9, 4, 2);
  check_rs_faults(7, 2, 1);
}

// rs-no-stale-zeroing where every generation's first wave is a full Latin square (M > 2 L,
// W_wave = L): nothing is ever unwritten, and the only blocks the fault leaves unzeroed hold
// the partials of the previous wave on that generation, which its landing already summed.
// That must still show as an uninitialised read (a consumed partial read again), not as
// corruption. See NOTE [stale-block zeroing].
void check_stale_partials(int m, int l, const std::vector<ParamShape>& shapes) {
  SCOPED_TRACE("rs-no-stale-zeroing on M = " + std::to_string(m) + ", L = " + std::to_string(l));
  const tide::testing::TestSeed data_seed;
  std::mt19937_64 rng = data_seed.engine();
  const GroupLayout layout(Topology(m, l), shapes, DType::kBf16, DType::kBf16);
  const RsPlan plan(layout, RsOptions{});
  ASSERT_GT(static_cast<int>(plan.waves().size()), plan.generations());
  for (const RsWave& wave : plan.waves()) {
    if (wave.index >= plan.generations()) continue;
    for (std::uint8_t mask : wave.zeroed_blocks)
      ASSERT_EQ(mask, 0) << "wave " << wave.index << " is a first use that zeroes: not the case";
  }
  std::vector<std::vector<std::vector<std::byte>>> grads;
  for (int r = 0; r < layout.topology().world(); ++r) {
    grads.emplace_back();
    for (const ParamLayout& pl : layout.params())
      grads.back().push_back(random_words(rng, pl.rows * pl.cols * 2, DType::kBf16));
  }
  const Inputs inputs = [&](exec::ReferenceExecutor& ex) {
    for (int r = 0; r < layout.topology().world(); ++r) {
      for (int p = 0; p < layout.param_count(); ++p) {
        put(ex, Buffer{r, Space::kTensor, p}, 0,
            grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)]);
      }
    }
  };
  program::RsProgramOptions options;
  options.alpha = 1.0f / static_cast<float>(layout.topology().world());
  options.landing = program::LandingStyle::kSwitchReduce;
  const program::Program clean = program::build_rs_program(plan, options);
  options.fault = Fault::kRsNoStaleZeroing;
  ASSERT_EQ(program::rs_fault_inapplicable(options.fault, plan, options), "");
  const program::Program faulty = program::build_rs_program(plan, options);
  expect_detection(options.fault,
                   [&](std::uint64_t seed) { return detect(clean, faulty, inputs, seed); });
  exec::ReferenceExecutor ex(faulty);
  inputs(ex);
  const exec::RunResult r = ex.run();
  EXPECT_EQ(r.count(exec::ErrorKind::kUnwrittenRead), 0) << first_errors(r);
  EXPECT_GT(r.count(exec::ErrorKind::kConsumedRead), 0) << first_errors(r);
  EXPECT_EQ(program::detection_name(exec::classify_run(r, false, false)), "uninitialised-read");
}

TEST(FaultInjection, StaleZeroingOfAReusedGenerationIsAnUninitialisedRead) {
  // The case first reported: tide simulate reduce-scatter -M 20 -L 8 --landing switch-reduce
  // --shapes 37x5,300x64 --inject rs-no-stale-zeroing.
  check_stale_partials(20, 8, {{"a", 37, 5}, {"b", 300, 64}});
  check_stale_partials(5, 2, {{"a", 9, 11}});
  check_stale_partials(10, 3, {{"a", 37, 5}, {"b", 64, 3}});
}

// --- A group's own sequence of calls (the runtime's builders; NOTE [call sequences]) ---------

// `calls` consecutive calls of one group's sequence, expanded without the lanes: only the
// sequence's own credits order a call after the group's earlier calls.
void check_sequence_faults(int m, int l) {
  SCOPED_TRACE("sequence on M = " + std::to_string(m) + ", L = " + std::to_string(l));
  const tide::testing::TestSeed data_seed;
  std::mt19937_64 rng = data_seed.engine();
  const GroupLayout layout(Topology(m, l), {{"a", 37, 5}, {"b", 9, 11}}, DType::kBf16,
                           DType::kBf16);
  const AgPlan ag(layout, AgOptions{});
  const RsPlan rs(layout, RsOptions{});
  const program::AgSequenceAreas areas = program::ag_sequence_areas(ag);
  program::RsProgramOptions rs_options;
  rs_options.alpha = 0.25f;
  const program::RsArenaLayout rs_areas = program::rs_arena_layout(rs, rs_options.landing);
  constexpr int kCalls = 6;  // banks and stages reused from the third call on
  for (Fault fault : faults_of("sequence")) {
    SCOPED_TRACE(std::string(program::fault_info(fault).name));
    program::Program clean, faulty;
    if (fault == Fault::kAgNoStageCredit) {  // the sequence's own stages, a mod 2
      clean = program::expand_calls(program::ag_call_sequence(ag, areas), kCalls);
      faulty = program::expand_calls(program::ag_call_sequence(ag, areas, {}, fault), kCalls);
    } else {
      clean = program::expand_calls(program::rs_call_sequence(rs, rs_options, rs_areas), kCalls);
      program::RsProgramOptions o = rs_options;
      o.fault = fault;
      faulty = program::expand_calls(program::rs_call_sequence(rs, o, rs_areas), kCalls);
    }
    // Inputs: every rank's resident shard (all-gather) and every call's tensors (gradients),
    // the same bytes for both runs.
    const bool all_gather = fault == Fault::kAgNoStageCredit;
    std::vector<std::vector<std::byte>> bytes;
    for (int r = 0; r < clean.ranks; ++r) {
      bytes.push_back(random_words(rng, layout.shard_bytes(), DType::kBf16));
      for (std::int64_t t : clean.buffers[static_cast<std::size_t>(r)].tensor_bytes)
        bytes.push_back(random_words(rng, t, DType::kBf16));
    }
    const Inputs inputs = [&](exec::ReferenceExecutor& ex) {
      std::size_t next = 0;
      for (int r = 0; r < clean.ranks; ++r) {
        const std::vector<std::byte>& shard = bytes[next++];
        if (all_gather) put(ex, Buffer{r, Space::kArena, 0}, areas.resident, shard);
        const auto& tensors = clean.buffers[static_cast<std::size_t>(r)].tensor_bytes;
        for (std::size_t t = 0; t < tensors.size(); ++t)
          put(ex, Buffer{r, Space::kTensor, static_cast<int>(t)}, 0, bytes[next++]);
      }
    };
    expect_detection(fault,
                     [&](std::uint64_t seed) { return detect(clean, faulty, inputs, seed); });
  }
}

TEST(FaultInjection, SequenceFaultsShowAsExpected) {
  check_sequence_faults(2, 2);
  check_sequence_faults(3, 2);
  check_sequence_faults(5, 1);
  check_sequence_faults(2, 4);
}

// --- Steps: several groups' calls through the lanes (training_step.hpp) -----------------------

// Default TIDE-AG and TIDE-RS plans of each layout, and the step's groups "g0", "g1", ... over
// them (which point into the plans: not copyable).
struct StepGroups {
  std::vector<AgPlan> ag;
  std::vector<RsPlan> rs;
  std::vector<program::StepGroup> groups;

  explicit StepGroups(const std::vector<GroupLayout>& layouts) {
    for (const GroupLayout& layout : layouts) {
      ag.emplace_back(layout, AgOptions{});
      rs.emplace_back(layout, RsOptions{});
    }
    for (std::size_t g = 0; g < layouts.size(); ++g)
      groups.push_back({"g" + std::to_string(g), &ag[g], &rs[g]});
  }
  StepGroups(const StepGroups&) = delete;
  StepGroups& operator=(const StepGroups&) = delete;
};

void check_step_faults(int m, int l, const std::vector<std::vector<ParamShape>>& shapes) {
  SCOPED_TRACE("step on M = " + std::to_string(m) + ", L = " + std::to_string(l) + " with " +
               std::to_string(shapes.size()) + " groups");
  const tide::testing::TestSeed data_seed;
  std::mt19937_64 rng = data_seed.engine();
  std::vector<GroupLayout> layouts;
  for (const auto& s : shapes)
    layouts.emplace_back(Topology(m, l), s, DType::kBf16, DType::kBf16);
  const StepGroups step(layouts);
  const std::vector<program::StepGroup>& groups = step.groups;
  program::StepOptions options;
  options.reduce_scatter.alpha = 0.25f;
  const program::StepProgram clean = program::build_step_program(groups, options);
  // Inputs: every group's resident shards and every reduce-scatter call's gradients.
  std::vector<std::vector<std::byte>> shards, grads;
  for (const GroupLayout& layout : layouts) {
    for (int r = 0; r < layout.topology().world(); ++r)
      shards.push_back(random_words(rng, layout.shard_bytes(), DType::kBf16));
  }
  const Inputs inputs = [&](exec::ReferenceExecutor& ex) {
    std::mt19937_64 grad_rng(data_seed.value() + 1);
    const int world = m * l;
    for (std::size_t g = 0; g < layouts.size(); ++g) {
      for (int r = 0; r < world; ++r) {
        put(ex, Buffer{r, Space::kArena, 0}, clean.arena.all_gather[g].resident,
            shards[g * static_cast<std::size_t>(world) + static_cast<std::size_t>(r)]);
      }
    }
    for (const program::StepCall& call : clean.calls) {
      if (call.kind != program::StepCallKind::kReduceScatter) continue;
      const GroupLayout& layout = layouts[static_cast<std::size_t>(call.group)];
      for (int r = 0; r < world; ++r) {
        for (int p = 0; p < layout.param_count(); ++p) {
          const ParamLayout& pl = layout.param(p);
          put(ex, Buffer{r, Space::kTensor, call.tensor_base + p}, 0,
              random_words(grad_rng, pl.rows * pl.cols * 2, DType::kBf16));
        }
      }
    }
  };
  for (Fault fault : faults_of("step")) {
    options.fault = fault;
    ASSERT_EQ(program::step_fault_inapplicable(fault, groups, options), "")
        << program::fault_info(fault).name;
    const program::StepProgram faulty = program::build_step_program(groups, options);
    expect_detection(fault, [&](std::uint64_t seed) {
      return detect(clean.program, faulty.program, inputs, seed);
    });
  }
}

TEST(FaultInjection, StepFaultsShowAsExpected) {
  const std::vector<ParamShape> a = {{"a", 37, 5}, {"b", 9, 11}};
  const std::vector<ParamShape> b = {{"c", 64, 3}};
  // step-call-order swaps the first two reduce-scatters (the last two groups): alike here.
  check_step_faults(3, 2, {b, a, a});
  check_step_faults(2, 4, {a, b, a, a});
}

// step-call-order on random topologies and groups of random (mostly unequal) shapes: the
// faulty step shows as a call-order mismatch naming both groups (NOTE [call identities]);
// the same step without the fault reports none and runs clean.
TEST(FaultInjection, StepCallOrderShowsWhateverTheShapes) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int unequal = 0;
  for (int trial = 0; trial < 8; ++trial) {
    int m = pick(1, 4), l = pick(1, 3);
    if (m * l < 2) l = 2;
    std::vector<GroupLayout> layouts;
    const int count = pick(2, 4);
    for (int g = 0; g < count; ++g) {
      std::vector<ParamShape> shapes;
      const int params = pick(1, 3);
      for (int p = 0; p < params; ++p)
        shapes.push_back({"p" + std::to_string(p), pick(1, 40), pick(1, 12)});
      layouts.emplace_back(Topology(m, l), shapes, DType::kBf16, DType::kBf16);
    }
    SCOPED_TRACE("trial " + std::to_string(trial) + ": M = " + std::to_string(m) +
                 ", L = " + std::to_string(l) + ", " + std::to_string(count) + " groups");
    const StepGroups step(layouts);
    const std::vector<program::StepGroup>& groups = step.groups;
    const GroupLayout& last = layouts[layouts.size() - 1];
    const GroupLayout& other = layouts[layouts.size() - 2];
    if (last.shard_elems() != other.shard_elems()) ++unequal;
    program::StepOptions options;
    options.reduce_scatter.alpha = 0.5f;
    const program::StepProgram clean = program::build_step_program(groups, options);
    options.fault = Fault::kStepCallOrder;
    ASSERT_EQ(program::step_fault_inapplicable(options.fault, groups, options), "");
    const program::StepProgram faulty = program::build_step_program(groups, options);
    auto run = [&](const program::Program& p) {
      exec::ReferenceExecutor ex(p);
      for (int r = 0; r < p.ranks; ++r) {  // every tensor and the arena: real values
        ex.input(Buffer{r, Space::kArena, 0});
        const auto& sizes = p.buffers[static_cast<std::size_t>(r)];
        for (std::size_t t = 0; t < sizes.tensor_bytes.size(); ++t)
          ex.input(Buffer{r, Space::kTensor, static_cast<int>(t)});
      }
      exec::RunOptions o;
      o.seed = seed.value() + static_cast<std::uint64_t>(trial);
      o.max_errors = 1 << 20;
      return ex.run(o);
    };
    const exec::RunResult good = run(clean.program);
    EXPECT_TRUE(good.clean()) << first_errors(good);
    EXPECT_EQ(good.count(exec::ErrorKind::kCallOrderMismatch), 0);
    const exec::RunResult bad = run(faulty.program);
    EXPECT_GT(bad.count(exec::ErrorKind::kCallOrderMismatch), 0);
    EXPECT_EQ(exec::classify_run(bad, false, false), Detection::kCallOrder);
    const std::string evidence = exec::detection_evidence(bad, Detection::kCallOrder);
    const std::string first = "reduce-scatter of group " + std::to_string(count - 1);
    const std::string second = "reduce-scatter of group " + std::to_string(count - 2);
    EXPECT_NE(evidence.find(first), std::string::npos) << evidence;
    EXPECT_NE(evidence.find(second), std::string::npos) << evidence;
  }
  EXPECT_GT(unequal, 0) << "no trial swapped groups of unequal shapes";
}

}  // namespace
}  // namespace tide
