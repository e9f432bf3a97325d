// One-sided messages (NOTE [one-sided messages]) on the CPU: the runtime's call templates with
// messages between emulated nodes, as the runner plans them (one_sided_input, the plan) and
// routes them (route_one_sided): the routes must put exactly the plan's bytes at its offsets,
// and a template either plans or names its problem. No GPU, no NCCL.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sequence_test_util.hpp"
#include "tide/core/error.hpp"
#include "transport/one_sided.hpp"

namespace tide {
namespace {

using namespace sequence_testing;  // NOLINT(google-build-using-namespace)

constexpr std::int64_t kRegion = 4096;  // the group's region in the arena
constexpr std::int64_t kWindow = std::int64_t{1} << 30;

// The ops of `t` that are messages between nodes of `node` ranks, in the legal order.
std::vector<int> messages_of(const program::CallTemplate& t, int node) {
  std::vector<int> out;
  for (const int i : t.order.order) {
    int from = 0, to = 0;
    if (transport::crosses_ranks(t.program.ops[static_cast<std::size_t>(i)], from, to) &&
        from / node != to / node)
      out.push_back(i);
  }
  return out;
}

// Plans `t`'s messages; where they plan, checks the routes against the plan. Returns the
// plan's refusal, empty where it planned.
int messages_seen = 0;

std::string check_template(const program::CallTemplate& t, int node, int ranks) {
  const std::vector<int> ops = messages_of(t, node);
  messages_seen += static_cast<int>(ops.size());
  const auto input = transport::one_sided_input(t.program, ops, kRegion, 1);
  const std::vector<std::int64_t> window(static_cast<std::size_t>(ranks), kWindow);
  transport::OneSidedPlan plan;
  try {
    plan = transport::plan_one_sided(input, {ranks, 2, window, true});
  } catch (const std::exception& e) {
    return e.what();
  }
  EXPECT_EQ(plan.messages.size(), ops.size());
  std::size_t next = 0;  // into plan.puts
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const program::Op& op = t.program.ops[static_cast<std::size_t>(ops[k])];
    transport::Message m;
    std::vector<std::int64_t> source_of_part;  // each part's source offset in the window
    for (const program::CopyDescriptor& c : program::copies_of(op)) {
      if (c.src.bytes() == 0) continue;
      m.parts.emplace_back();
      source_of_part.push_back(kRegion + c.src.offset);
    }
    transport::route_one_sided(op, kRegion, m);
    EXPECT_TRUE(m.route.one_sided);
    EXPECT_EQ(m.route.signals, plan.messages[k].signals) << "message " << k;
    for (const transport::OneSidedPut& put : m.route.puts) {
      if (next >= plan.puts.size()) {
        ADD_FAILURE() << "the routes put more than the plan";
        return {};
      }
      const transport::PlannedPut& want = plan.puts[next++];
      EXPECT_EQ(want.message, static_cast<int>(k));
      EXPECT_EQ(static_cast<std::int64_t>(put.bytes), want.bytes);
      EXPECT_EQ(put.window_offset, want.offset);
      EXPECT_EQ(source_of_part[put.part] + static_cast<std::int64_t>(put.first), want.src_offset);
      EXPECT_EQ(want.lane, 1);
    }
  }
  EXPECT_EQ(next, plan.puts.size());
  return {};
}

TEST(OneSidedMessages, RuntimeTemplatesRouteAsTheyPlan) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  std::mt19937_64 rng(seed);
  int planned = 0, refused = 0;
  for (const Topo topo : {Topo{2, 1}, Topo{2, 2}, Topo{3, 2}}) {
    const int ranks = topo.nodes * topo.gpus;
    const GroupLayout layout(Topology(topo.nodes, topo.gpus), odd_shapes(rng, 3), DType::kBf16,
                             DType::kBf16);
    for (const RsSubSlices geometry :
         {RsSubSlices::kAcrossRanks, RsSubSlices::kPerRank, RsSubSlices::kNodeContiguous}) {
      for (const int chunk : {0, 8}) {  // 8: several staging fills per call (the GPU tests')
        RsOptions o;
        o.sub_slices = geometry;
        o.wave_width = topo.nodes > 2 ? std::min(2, topo.gpus) : 0;
        o.round_width = 2;
        if (chunk > 0) o.staging_chunk_elems = chunk;
        const RsPlan rs(layout, o);
        const program::CallSequence seq = program::rs_call_sequence(
            rs, {}, program::rs_arena_layout(rs, program::LandingStyle::kPull));
        for (const program::CallTemplate& t : seq.templates) {
          const std::string why = check_template(t, topo.gpus, ranks);
          (why.empty() ? planned : refused) += 1;
          if (!why.empty())
            std::printf("RS %dx%d refused: %s\n", topo.nodes, topo.gpus, why.c_str());
        }
      }
    }
    const AgPlan ag(layout, AgOptions{});
    const program::CallSequence seq = program::ag_call_sequence(ag, program::ag_sequence_areas(ag));
    for (const program::CallTemplate& t : seq.templates) {
      const std::string why = check_template(t, topo.gpus, ranks);
      (why.empty() ? planned : refused) += 1;
      if (!why.empty()) std::printf("AG %dx%d refused: %s\n", topo.nodes, topo.gpus, why.c_str());
    }
  }
  std::printf("one-sided: %d templates planned, %d refused, %d messages\n", planned, refused,
              messages_seen);
  EXPECT_GT(planned, 0);
  EXPECT_GT(messages_seen, 0);
}

}  // namespace
}  // namespace tide
