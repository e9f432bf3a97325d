// A group registered as never all-gathered (ArenaGroup::lands = false: the reduce-scatter
// registration of an FSDP2 group whose all-gathers land another registration's items, NOTE
// [extension all-gathers] in python/tide/_fsdp_extensions.py) adds no resident, no receive
// stage and no landing bytes: its slot is as large as the groups of it that land.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/rs_defaults.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/communicator_arena.hpp"

namespace tide {
namespace {

struct Registered {
  std::unique_ptr<GroupLayout> layout;
  std::unique_ptr<AgPlan> ag;
  std::unique_ptr<RsPlan> rs;
};

Registered registered(const Topology& topo, std::vector<ParamShape> params, bool cast) {
  Registered r;
  r.layout = std::make_unique<GroupLayout>(topo, std::move(params), DType::kBf16, DType::kBf16);
  AgOptions ao;
  ao.mixed_precision_cast = cast;
  ao.staged_shards = !cast;
  r.ag = std::make_unique<AgPlan>(*r.layout, ao);
  RsOptions ro;
  ro.one_node = topo.nodes() == 1;
  r.rs = std::make_unique<RsPlan>(*r.layout, with_solver_defaults(ro, *r.layout));
  return r;
}

std::int64_t aligned(std::int64_t x) {
  return (x + program::kArenaAlign - 1) / program::kArenaAlign * program::kArenaAlign;
}

// The parameters (bf16, cast from fp32 masters into the stage: a larger stage where they land)
// and their all-gather items (half the bytes, as float8 outputs in a 2-byte carrier), one slot.
void check(const Topology& topo) {
  SCOPED_TRACE(std::to_string(topo.nodes()) + "x" + std::to_string(topo.gpus_per_node()));
  const Registered params = registered(topo, {{"w1", 4096, 1024}, {"w2", 1024, 4096}}, true);
  const Registered items = registered(topo, {{"w1", 4096, 512}, {"w2", 1024, 2048}}, false);
  program::ArenaGroup p{params.ag.get(), params.rs.get(), 0};
  p.lands = false;
  const program::ArenaGroup i{items.ag.get(), items.rs.get(), 0};

  const program::CommunicatorArena both = program::communicator_arena({p, i});
  const program::CommunicatorArena alone = program::communicator_arena({i});
  ASSERT_EQ(both.slots.size(), 1u);
  EXPECT_EQ(both.slots[0].bytes, items.layout->unsharded_bytes());
  EXPECT_EQ(both.slots[0].bytes * 2, params.layout->unsharded_bytes());
  EXPECT_EQ(both.resident_bytes, 0) << "the non-landing group keeps no resident shard";
  EXPECT_EQ(both.stage_bytes, alone.stage_bytes);
  EXPECT_EQ(both.landing_bytes, aligned(items.layout->unsharded_bytes()));
  // TIDE-RS's areas serve the parameters' gradients: the larger registration's.
  EXPECT_GE(both.reduce_scatter_bytes, alone.reduce_scatter_bytes);
  if (both.bound_bytes > 0) {
    EXPECT_LE(both.arena_bytes, both.bound_bytes + program::kArenaAlign * both.areas);
  }

  program::ArenaGroup landing = p;
  landing.lands = true;
  const program::CommunicatorArena as_before = program::communicator_arena({landing, i});
  EXPECT_EQ(as_before.slots[0].bytes, params.layout->unsharded_bytes());
  EXPECT_GE(as_before.stage_bytes, both.stage_bytes);
  EXPECT_GT(as_before.arena_bytes, both.arena_bytes);
}

TEST(ArenaLands, NonLandingGroupAddsNoLandingResidentOrStage) {
  check(Topology(1, 8));
  check(Topology(1, 2));
  check(Topology(4, 8));
}

}  // namespace
}  // namespace tide
