// NOTE [step memory]: what each system's step holds at its peak, against the phases written
// out by hand from the paper's Sec. 5.4 accounting (not from the function under test).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/training_step.hpp"

namespace tide::program {
namespace {

struct Groups {
  std::vector<GroupLayout> layouts;
  std::vector<AgPlan> ag;
  std::vector<RsPlan> rs;
  std::vector<StepGroup> step;
  Groups(const Topology& t, const std::vector<std::vector<ParamShape>>& shapes, RsMode mode) {
    layouts.reserve(shapes.size());
    ag.reserve(shapes.size());
    rs.reserve(shapes.size());
    for (const auto& s : shapes)
      layouts.emplace_back(t, s, DType::kBf16, DType::kBf16);
    RsOptions o;
    o.mode = mode;
    for (const GroupLayout& l : layouts) {
      ag.emplace_back(l, AgOptions{});
      rs.emplace_back(l, o);
    }
    for (std::size_t i = 0; i < layouts.size(); ++i)
      step.push_back({"g" + std::to_string(i), &ag[i], &rs[i]});
  }
};

// Bytes by hand: a rank's bf16 shard holds ceil(rows / N) rows of every parameter.
std::int64_t shard(const std::vector<ParamShape>& g, int n) {
  std::int64_t b = 0;
  for (const ParamShape& p : g)
    b += (p.rows + n - 1) / n * p.cols * 2;
  return b;
}

TEST(StepMemory, StockHoldsFourUnshardedGroupsInBackwardWhenGroupsAreEqual) {
  const Topology t(4, 2);
  const std::vector<ParamShape> layer = {{"a", 64, 24}, {"b", 40, 8}, {"c", 16, 1}};
  const Groups g(t, {layer, layer, layer, layer}, RsMode::kInPlace);
  const std::int64_t s = shard(layer, 8), ns = 8 * s;
  // Backward of a middle layer: its parameters, the prefetched all-gather, and the previous
  // layer's fp32 reduce-scatter input (2 NS); plus the four sharded groups.
  EXPECT_EQ(fsdp2_step_held_bytes(g.step), 4 * ns + 4 * s);
  const StepProgram stock = build_fsdp2_step_program(g.step, StepOptions{});
  EXPECT_EQ(stock.held_bytes, 4 * ns + 4 * s);
  EXPECT_EQ(stock.arena.arena_bytes, stock.held_bytes);
  // The program's own layout gives every call fresh addresses, far more than is held.
  EXPECT_GT(stock.program.buffers.front().arena_bytes, 3 * stock.held_bytes);
}

TEST(StepMemory, StockPeakFollowsThePhasesOfUnequalGroups) {
  const Topology t(3, 2);
  const int n = 6;
  const std::vector<std::vector<ParamShape>> shapes = {
      {{"a", 37, 5}, {"b", 16, 3}}, {{"c", 96, 40}}, {{"d", 20, 7}}, {{"e", 9, 11}, {"f", 5, 1}}};
  const Groups g(t, shapes, RsMode::kInPlace);
  std::vector<std::int64_t> u, pack;
  std::int64_t sharded = 0;
  for (const auto& s : shapes) {
    u.push_back(n * shard(s, n));
    pack.push_back(2 * n * shard(s, n));  // fp32: twice the bf16 bytes, N blocks
    sharded += shard(s, n);
  }
  // Forward of g: U_g + U_{g+1}; backward of g: U_g + U_{g-1} + P_{g+1}. Group 1 is the
  // largest, so the peak is the backward of group 2: U_2 + U_1 + P_3, or of group 0: U_0 + P_1.
  const std::int64_t phases[] = {
      u[0] + u[1],    u[1] + u[2],           u[2] + u[3],           u[3],
      u[0] + pack[1], u[1] + u[0] + pack[2], u[2] + u[1] + pack[3], u[3] + u[2]};
  const std::int64_t peak = *std::max_element(std::begin(phases), std::end(phases));
  EXPECT_EQ(fsdp2_step_held_bytes(g.step), sharded + peak);
  EXPECT_EQ(peak, u[0] + pack[1]);  // the large group's fp32 input is held through layer 0
}

TEST(StepMemory, TideAddsThePreviousGradientsOnlyInPlace) {
  const Topology t(4, 2);
  const std::vector<std::vector<ParamShape>> shapes = {
      {{"a", 64, 24}}, {{"b", 128, 16}, {"c", 8, 1}}, {{"d", 32, 8}}};
  const std::int64_t largest_gradients = (128 * 16 + 8) * 2;  // bf16, true shapes
  const Groups in_place(t, shapes, RsMode::kInPlace);
  const StepProgram a = build_step_program(in_place.step, StepOptions{});
  EXPECT_EQ(a.held_bytes, a.arena.arena_bytes + largest_gradients);
  const Groups slot(t, shapes, RsMode::kSlotReuse);
  const StepProgram b = build_step_program(slot.step, StepOptions{});
  EXPECT_EQ(b.held_bytes, b.arena.arena_bytes);
  // One group: no previous group's gradients to keep.
  const Groups one(t, {shapes[1]}, RsMode::kInPlace);
  const StepProgram c = build_step_program(one.step, StepOptions{});
  EXPECT_EQ(c.held_bytes, c.arena.arena_bytes);
}

}  // namespace
}  // namespace tide::program
