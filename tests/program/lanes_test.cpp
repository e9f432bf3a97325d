// Several groups of one communicator sharing one arena (NOTE [communicator arena]): their
// call sequences placed in it, run in FSDP2's order with the lane handoff and the slots'
// release edges (NOTE [lane handoff]) on the CPU reference executor with fresh data per call.
// Every access must be ordered and every output bitwise equal to the definition; without
// either edge (the faults) the executor must find the race. And the arena must not grow with
// depth, nor exceed the Sec. 5.4 bound.
#include "tide/program/lanes.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../support/test_seed.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/exec/fault_detection.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/program/communicator_arena.hpp"

namespace tide {
namespace {

using program::Buffer;
using program::Space;

struct LaneCase {
  int nodes = 1, gpus = 2;
  bool cast = true;  // bf16 parameters from fp32 masters; else fp32 shards copied in
  RsMode mode = RsMode::kInPlace;
  int groups = 3;
  // Without a cast: groups 1, 2, 5, 6, ... all-gather fp8 items, the others bf16, so that ring
  // slots hold groups of both (NOTE [1-byte all-gather items]); gradients stay bf16.
  bool mixed_fp8 = false;
};

std::string describe(const LaneCase& c) {
  return std::to_string(c.nodes) + "x" + std::to_string(c.gpus) +
         (c.cast        ? " cast"
          : c.mixed_fp8 ? " bf16+fp8"
                        : " fp32") +
         (c.mode == RsMode::kInPlace ? " in-place " : " slot-reuse ") + std::to_string(c.groups) +
         " groups";
}

// Group g's all-gather dtype in case `c`.
DType ag_dtype(const LaneCase& c, int g) {
  if (c.cast) return DType::kBf16;
  if (!c.mixed_fp8) return DType::kFp32;
  return (g + 1) / 2 % 2 == 1 ? DType::kFp8 : DType::kBf16;
}

// A communicator's groups as the runtime places them: plans, one arena, sequences, words.
struct Communicator {
  std::vector<std::unique_ptr<GroupLayout>> layouts;
  std::vector<std::unique_ptr<AgPlan>> ag;
  std::vector<std::unique_ptr<RsPlan>> rs;
  program::CommunicatorArena arena;
  std::vector<program::CallSequence> ag_seq, rs_seq;
  std::vector<program::LaneGroup> lanes;
};

std::vector<ParamShape> odd_shapes(std::mt19937_64& rng) {
  std::vector<ParamShape> shapes;
  const int count = 1 + static_cast<int>(rng() % 3);
  for (int p = 0; p < count; ++p) {
    shapes.push_back(ParamShape{"p" + std::to_string(p), 1 + static_cast<std::int64_t>(rng() % 19),
                                1 + static_cast<std::int64_t>(rng() % 7)});
  }
  return shapes;
}

// Group 0 keeps a slot of its own (as FSDP2's root does); the others take ring slot g mod 2.
Communicator place(const LaneCase& c, std::mt19937_64& rng) {
  Communicator m;
  const Topology topo(c.nodes, c.gpus);
  std::vector<program::ArenaGroup> groups;
  for (int g = 0; g < c.groups; ++g) {
    m.layouts.push_back(
        std::make_unique<GroupLayout>(topo, odd_shapes(rng), ag_dtype(c, g), DType::kBf16));
    AgOptions ag;
    ag.mixed_precision_cast = c.cast;
    ag.staged_shards = !c.cast;
    ag.head_bytes = 64;
    m.ag.push_back(std::make_unique<AgPlan>(*m.layouts.back(), ag));
    RsOptions rs;
    rs.mode = c.mode;
    rs.wave_width = c.nodes > 2 ? std::min(2, c.gpus) : 0;
    rs.round_width = 2;
    rs.staging_chunk_elems = 8;  // several fills per call
    m.rs.push_back(std::make_unique<RsPlan>(*m.layouts.back(), rs));
    groups.push_back({m.ag.back().get(), m.rs.back().get(), g == 0 ? -1 : g % 2});
  }
  m.arena = program::communicator_arena(groups);
  int counter = program::kHandoffWords;
  for (int g = 0; g < c.groups; ++g) {
    program::GroupSequences s =
        program::group_sequences(groups, m.arena, static_cast<std::size_t>(g));
    m.ag_seq.push_back(std::move(s.all_gather));
    m.rs_seq.push_back(std::move(s.reduce_scatter));
  }
  for (int g = 0; g < c.groups; ++g) {
    program::LaneGroup lane;
    lane.all_gather = &m.ag_seq[g];
    lane.reduce_scatter = &m.rs_seq[g];
    lane.all_gather_first_counter = counter;
    counter += m.ag_seq[g].counters;
    lane.reduce_scatter_first_counter = counter;
    counter += m.rs_seq[g].counters;
    lane.landing_slot = m.arena.slot_of[g];
    lane.landing_offset = m.arena.all_gather[g].landing;
    lane.landing_bytes = m.layouts[g]->unsharded_bytes();
    m.lanes.push_back(lane);
  }
  return m;
}

// Two training steps in FSDP2's issue order: forward all-gathers, then per group in reverse
// its backward all-gather and its reduce-scatter.
std::vector<program::LaneCall> fsdp2_order(int groups) {
  std::vector<program::LaneCall> calls;
  for (int step = 0; step < 2; ++step) {
    for (int g = 0; g < groups; ++g)
      calls.push_back({g, false});
    for (int g = groups - 1; g >= 0; --g) {
      calls.push_back({g, false});
      calls.push_back({g, true});
    }
  }
  return calls;
}

// Fresh inputs for every call, and what each output must hold.
struct Data {
  std::vector<std::vector<std::vector<std::byte>>> inputs;  // [call][rank]: its kTensor bytes
  std::vector<std::vector<std::vector<std::byte>>> expect;  // [call][rank]: its output
};

Data make_data(const Communicator& m, const std::vector<program::LaneCall>& calls,
               const program::LaneProgram& lp, bool cast, std::mt19937_64& rng) {
  Data d;
  const int world = m.layouts.front()->topology().world();
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const GroupLayout& layout = *m.layouts[static_cast<std::size_t>(calls[k].group)];
    std::vector<std::vector<std::byte>> in(static_cast<std::size_t>(world)), out(in.size());
    if (calls[k].reduce_scatter) {
      const std::vector<RankGrads> grads = random_grads(rng, layout);
      for (int r = 0; r < world; ++r) {
        for (int p = 0; p < layout.param_count(); ++p) {
          const auto& g = grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
          std::vector<std::byte> bytes(g.size() * 2);
          store_values(g, DType::kBf16, bytes);
          in[static_cast<std::size_t>(r)].insert(in[static_cast<std::size_t>(r)].end(),
                                                 bytes.begin(), bytes.end());
        }
      }
      // Not accumulating: the output's previous contents must not matter.
      std::vector<std::vector<float>> initial(
          static_cast<std::size_t>(world),
          std::vector<float>(static_cast<std::size_t>(layout.shard_elems())));
      for (auto& v : initial)
        for (float& x : v)
          x = random_value(rng, DType::kFp32);
      const auto want =
          rs_expected(*m.rs[static_cast<std::size_t>(calls[k].group)], grads, 1.0f, false, initial);
      for (int r = 0; r < world; ++r) {
        const auto& w = want[static_cast<std::size_t>(r)];
        out[static_cast<std::size_t>(r)].resize(w.size() * 4);
        std::memcpy(out[static_cast<std::size_t>(r)].data(), w.data(), w.size() * 4);
      }
    } else {
      // Rank r's shard of every parameter (fp32 masters with a cast; else values of the
      // all-gather dtype, byte codes for fp8), and the landing every rank must hold: rows of
      // each source rank in the all-gather dtype; padding unchecked.
      const DType in_dtype = cast ? DType::kFp32 : layout.ag_dtype();
      const std::int64_t item = item_bytes(layout.ag_dtype());
      std::vector<std::vector<float>> masters(static_cast<std::size_t>(world));
      for (int r = 0; r < world; ++r) {
        for (int p = 0; p < layout.param_count(); ++p) {
          const ParamLayout& pl = layout.param(p);
          std::vector<float> shard(static_cast<std::size_t>(pl.shard_elems()));
          for (float& v : shard)
            v = random_value(rng, in_dtype);
          std::vector<std::byte> bytes(shard.size() *
                                       static_cast<std::size_t>(item_bytes(in_dtype)));
          store_values(shard, in_dtype, bytes);
          in[static_cast<std::size_t>(r)].insert(in[static_cast<std::size_t>(r)].end(),
                                                 bytes.begin(), bytes.end());
          masters[static_cast<std::size_t>(r)].insert(masters[static_cast<std::size_t>(r)].end(),
                                                      shard.begin(), shard.end());
        }
      }
      std::vector<std::byte> landing(static_cast<std::size_t>(layout.unsharded_bytes()));
      for (int src = 0; src < world; ++src) {
        std::int64_t at = 0;
        for (int p = 0; p < layout.param_count(); ++p) {
          const ParamLayout& pl = layout.param(p);
          const std::int64_t elems = layout.valid_rows(p, src) * pl.cols;
          std::span<const float> values(masters[static_cast<std::size_t>(src)].data() + at,
                                        static_cast<std::size_t>(elems));
          store_values(
              values, layout.ag_dtype(),
              std::span(landing).subspan(static_cast<std::size_t>(layout.landing_offset(p, src)),
                                         static_cast<std::size_t>(elems * item)));
          at += pl.shard_elems();
        }
      }
      for (int r = 0; r < world; ++r)
        out[static_cast<std::size_t>(r)] = landing;
    }
    d.inputs.push_back(std::move(in));
    d.expect.push_back(std::move(out));
  }
  (void)lp;
  return d;
}

void store_inputs(exec::ReferenceExecutor& ex, const Communicator& m,
                  const std::vector<program::LaneCall>& calls, const program::LaneProgram& lp,
                  const Data& d) {
  const int world = m.layouts.front()->topology().world();
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const GroupLayout& layout = *m.layouts[static_cast<std::size_t>(calls[k].group)];
    for (int r = 0; r < world; ++r) {
      const std::vector<std::byte>& all = d.inputs[k][static_cast<std::size_t>(r)];
      std::size_t at = 0;
      for (int p = 0; p < layout.param_count(); ++p) {
        auto span = ex.input(Buffer{r, Space::kTensor, lp.calls[k].first_tensor + p});
        ASSERT_LE(at + span.size(), all.size());
        std::memcpy(span.data(), all.data() + at, span.size());
        at += span.size();
      }
      ASSERT_EQ(at, all.size()) << "call " << k << " input sizes";
    }
  }
}

// Whether `got` holds `want` where the all-gather's landing has real rows (AG), or entirely.
bool matches(const GroupLayout& layout, bool all_gather, std::span<const std::byte> got,
             const std::vector<std::byte>& want, int world) {
  if (got.size() != want.size()) return false;
  if (!all_gather) return std::memcmp(got.data(), want.data(), got.size()) == 0;
  for (int src = 0; src < world; ++src) {
    for (int p = 0; p < layout.param_count(); ++p) {
      const std::size_t at = static_cast<std::size_t>(layout.landing_offset(p, src));
      const std::size_t bytes = static_cast<std::size_t>(
          layout.valid_rows(p, src) * layout.param(p).cols * item_bytes(layout.ag_dtype()));
      if (std::memcmp(got.data() + at, want.data() + at, bytes) != 0) return false;
    }
  }
  return true;
}

class Lanes : public ::testing::TestWithParam<LaneCase> {};

TEST_P(Lanes, GroupsSharingOneArenaMatchTheDefinitionBitwise) {
  const LaneCase c = GetParam();
  const tide::testing::TestSeed seed;
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng = seed.engine();
  const Communicator m = place(c, rng);
  const std::vector<program::LaneCall> calls = fsdp2_order(c.groups);
  const program::LaneProgram lp = program::lane_program(m.lanes, calls);
  const Data d = make_data(m, calls, lp, c.cast, rng);
  exec::ReferenceExecutor ex(lp.program);
  store_inputs(ex, m, calls, lp, d);
  exec::RunOptions run;
  run.seed = seed.value();
  run.jitter = 0.5;
  const exec::RunResult result = ex.run(run);
  std::string errors;
  for (std::size_t i = 0; i < result.errors.size() && i < 4; ++i)
    errors += result.errors[i].message + "\n";
  ASSERT_TRUE(result.clean()) << errors;
  const int world = m.layouts.front()->topology().world();
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const GroupLayout& layout = *m.layouts[static_cast<std::size_t>(calls[k].group)];
    for (int r = 0; r < world; ++r) {
      const auto out = ex.memory(Buffer{r, Space::kOutput, lp.calls[k].output});
      EXPECT_TRUE(matches(layout, !calls[k].reduce_scatter, out,
                          d.expect[k][static_cast<std::size_t>(r)], world))
          << "call " << k << (calls[k].reduce_scatter ? " (reduce-scatter)" : " (all-gather)")
          << " of group " << calls[k].group << ", rank " << r;
    }
  }
}

// Without the handoff, or without a slot's release edge, the executor finds the race. On one
// node the handoff orders nothing that a call's own completion does not: a call completes on
// a rank only after its local peers finished reading that rank's areas (the landings' and
// staging's credits), and each rank's next call follows its own completion. Across nodes,
// rail puts land in peers' stages and inboxes under per-group credits only, and the handoff
// is what orders them after the other group's call.
TEST_P(Lanes, EveryMissingEdgeIsARace) {
  const LaneCase c = GetParam();
  const tide::testing::TestSeed seed;
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng = seed.engine();
  const Communicator m = place(c, rng);
  const std::vector<program::LaneCall> calls = fsdp2_order(c.groups);
  const program::LaneProgram clean = program::lane_program(m.lanes, calls);
  const Data d = make_data(m, calls, clean, c.cast, rng);
  for (program::Fault fault : {program::Fault::kLaneNoHandoff, program::Fault::kAgNoSlotRelease}) {
    const program::FaultInfo& info = program::fault_info(fault);
    SCOPED_TRACE(std::string(info.name));
    program::LaneProgramOptions o;
    o.fault = fault;
    const program::LaneProgram faulty = program::lane_program(m.lanes, calls, o);
    for (std::uint64_t schedule : {1u, 2u, 3u}) {
      exec::ReferenceExecutor ex(faulty.program);
      store_inputs(ex, m, calls, faulty, d);
      exec::RunOptions run;
      run.seed = schedule;
      run.jitter = 0.25;
      const exec::RunResult result = ex.run(run);
      bool same = true;
      const int world = m.layouts.front()->topology().world();
      for (std::size_t k = 0; k < calls.size() && same; ++k) {
        for (int r = 0; r < world && same; ++r) {
          same = matches(*m.layouts[static_cast<std::size_t>(calls[k].group)],
                         !calls[k].reduce_scatter,
                         ex.memory(Buffer{r, Space::kOutput, faulty.calls[k].output}),
                         d.expect[k][static_cast<std::size_t>(r)], world);
        }
      }
      const bool shows = fault != program::Fault::kLaneNoHandoff || c.nodes > 1;
      EXPECT_EQ(program::detection_name(exec::classify_run(result, true, same)),
                program::detection_name(shows ? info.expected : program::Detection::kNone))
          << "schedule seed " << schedule << ": " << info.mechanism;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Topologies, Lanes,
                         ::testing::Values(LaneCase{1, 2, true, RsMode::kInPlace, 3},
                                           LaneCase{1, 3, false, RsMode::kInPlace, 4},
                                           LaneCase{2, 1, true, RsMode::kSlotReuse, 3},
                                           LaneCase{2, 2, false, RsMode::kInPlace, 3},
                                           LaneCase{3, 2, true, RsMode::kSlotReuse, 3},
                                           LaneCase{1, 4, true, RsMode::kSlotReuse, 5},
                                           LaneCase{1, 2, false, RsMode::kInPlace, 4, true},
                                           LaneCase{2, 2, false, RsMode::kSlotReuse, 4, true},
                                           LaneCase{3, 1, false, RsMode::kInPlace, 3, true}));

// NOTE [communicator arena]: with equal blocks behind a root, the arena does not grow with
// depth, and it stays within the Sec. 5.4 bound plus one alignment per area.
TEST(CommunicatorArena, FlatInDepthAndWithinTheBound) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (const auto& [m, l] : {std::pair{1, 2}, std::pair{1, 8}, std::pair{2, 4}, std::pair{4, 2}}) {
    const Topology topo(m, l);
    const std::vector<ParamShape> block = odd_shapes(rng);
    const std::vector<ParamShape> root = odd_shapes(rng);
    for (const RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
      std::int64_t shallow = 0;
      for (const int depth : {4, 16, 64}) {
        std::vector<std::unique_ptr<GroupLayout>> layouts;
        std::vector<std::unique_ptr<AgPlan>> ag;
        std::vector<std::unique_ptr<RsPlan>> rs;
        std::vector<program::ArenaGroup> groups;
        for (int g = 0; g <= depth; ++g) {
          layouts.push_back(std::make_unique<GroupLayout>(topo, g == 0 ? root : block, DType::kBf16,
                                                          DType::kBf16));
          AgOptions ao;
          ao.mixed_precision_cast = true;
          ag.push_back(std::make_unique<AgPlan>(*layouts.back(), ao));
          RsOptions ro;
          ro.mode = mode;
          rs.push_back(std::make_unique<RsPlan>(*layouts.back(), ro));
          groups.push_back({ag.back().get(), rs.back().get(), g == 0 ? -1 : g % 2});
        }
        const program::CommunicatorArena a = program::communicator_arena(groups);
        SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(l) + " depth " +
                     std::to_string(depth));
        ASSERT_EQ(a.slots.size(), 3u) << "the root's slot and the two ring slots";
        EXPECT_EQ(a.resident_bytes, 0) << "cast groups keep no resident shard";
        ASSERT_GT(a.bound_bytes, 0);
        EXPECT_LE(a.arena_bytes, a.bound_bytes + a.areas * program::kArenaAlign);
        if (depth == 4) shallow = a.arena_bytes;
        EXPECT_EQ(a.arena_bytes, shallow) << "the arena grew with depth";
        EXPECT_EQ(a.resident_bytes + a.stage_bytes + a.landing_bytes + a.reduce_scatter_bytes,
                  a.arena_bytes);
      }
    }
  }
}

// NOTE [1-byte all-gather items]: of two groups of equal shapes, the fp8 one's resident shard,
// landing slot and receive stage are half the bf16 one's; a slot shared by both is sized by
// the bf16 group; the shared TIDE-RS areas follow the (bf16) gradients alone.
TEST(CommunicatorArena, OneByteGroupsTakeHalfTheBytes) {
  const Topology topo(2, 4);
  const std::vector<ParamShape> shapes = {{"w", 1000, 64}, {"b", 999, 1}, {"m", 37, 33}};
  std::vector<std::unique_ptr<GroupLayout>> layouts;
  std::vector<std::unique_ptr<AgPlan>> ag;
  std::vector<std::unique_ptr<RsPlan>> rs;
  auto group = [&](DType dtype, int slot) {
    layouts.push_back(std::make_unique<GroupLayout>(topo, shapes, dtype, DType::kBf16));
    ag.push_back(std::make_unique<AgPlan>(*layouts.back(), AgOptions{}));  // a resident shard
    rs.push_back(std::make_unique<RsPlan>(*layouts.back(), RsOptions{}));
    return program::ArenaGroup{ag.back().get(), rs.back().get(), slot};
  };
  const program::ArenaGroup bf16 = group(DType::kBf16, -1), fp8 = group(DType::kFp8, -1);
  const std::int64_t s_bf16 = layouts[0]->shard_bytes(), s_fp8 = layouts[1]->shard_bytes();
  // N = 8: R_p K_p = 125 x 64 + 125 x 1 + 5 x 33 = 8290 elements.
  EXPECT_EQ(s_fp8, 8290);
  EXPECT_EQ(s_bf16, 2 * 8290);
  const program::CommunicatorArena own = program::communicator_arena({bf16, fp8});
  ASSERT_EQ(own.slots.size(), 2u);
  EXPECT_EQ(own.slots[0].bytes, 8 * s_bf16);
  EXPECT_EQ(own.slots[1].bytes, 8 * s_fp8);
  EXPECT_EQ(2 * own.slots[1].bytes, own.slots[0].bytes);
  EXPECT_EQ(own.all_gather[1].resident - own.all_gather[0].resident,
            (s_bf16 + program::kArenaAlign - 1) / program::kArenaAlign * program::kArenaAlign);
  EXPECT_EQ(own.stage_bytes, (s_bf16 + program::kArenaAlign - 1) / program::kArenaAlign *
                                 program::kArenaAlign);  // M - 1 = 1 bf16 shard, the largest
  const program::CommunicatorArena fp8_only = program::communicator_arena({fp8});
  EXPECT_EQ(fp8_only.slots[0].bytes, 8 * s_fp8);
  EXPECT_EQ(fp8_only.stage_bytes,
            (s_fp8 + program::kArenaAlign - 1) / program::kArenaAlign * program::kArenaAlign);
  EXPECT_EQ(fp8_only.reduce_scatter_bytes, own.reduce_scatter_bytes);
  layouts.clear();
  ag.clear();
  rs.clear();
  const program::ArenaGroup a = group(DType::kFp8, 0), b = group(DType::kBf16, 0);
  const program::CommunicatorArena shared = program::communicator_arena({a, b});
  ASSERT_EQ(shared.slots.size(), 1u);
  EXPECT_EQ(shared.slots[0].bytes, 8 * s_bf16);
  EXPECT_EQ(shared.all_gather[0].landing, shared.all_gather[1].landing);
}

}  // namespace
}  // namespace tide
