// The virtual-fabric machine (NOTE [virtual-fabric machine]): its machine file (every problem
// named), the sharing of one GPU's copy engines and HBM by every rank, and a small program whose
// times are worked out by hand from the file's rates.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "exec_test_util.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/cost_model.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/exec/virtual_fabric_machine.hpp"

namespace tide::exec::testing {
namespace {

using nlohmann::json;

// HBM 2000 GB/s; one copy engine stream 1000 GB/s one direction (2000 of HBM), the same in
// aggregate; Level 1: 0.5 G elements/s per CTA (L = 2, either flag); no fixed costs.
json machine_json() {
  return json{
      {"machine", "virtual-fabric"},
      {"gpu", "test GPU"},
      {"source", "hand-made for the test"},
      {"hbm_gbps", 2000.0},
      {"copy_gbps_by_streams", json::array({json::array({1, 1000.0}), json::array({8, 1000.0})})},
      {"sum_cta_gelems", json::array({{{"l", 2}, {"accumulate", false}, {"gelems", 0.5}},
                                      {{"l", 2}, {"accumulate", true}, {"gelems", 0.5}}})},
      {"land_cta_gbps", 20.0},
      {"cast_cta_gbps", 40.0},
      {"sms", 132},
      {"hw_queues", 0},
      {"cost_model",
       {{"kernel_launch_us", 0.0},
        {"copy_launch_us", 0.0},
        {"memop_us", 0.0},
        {"host_enqueue_us", 0.0}}}};
}

std::string thrown(const json& j) {
  try {
    parse_cost_model(j.dump());
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

double makespan_us(const Program& p, const json& machine) {
  ReferenceExecutor ex(p, timing_only());
  const RunResult r = ex.run(seeded(0, 0.0, 64, parse_cost_model(machine.dump())));
  EXPECT_TRUE(r.completed);
  return r.makespan_us;
}

constexpr std::int64_t kCopy = 1'000'000;  // bytes: 2e6 HBM bytes, 1 us on one stream

TEST(VirtualFabricMachine, LoadsTheFileAndItsRates) {
  const CostModel m = parse_cost_model(machine_json().dump());
  ASSERT_TRUE(m.virtual_fabric);
  EXPECT_EQ(m.virtual_fabric->gpu, "test GPU");
  EXPECT_EQ(m.virtual_fabric->source, "hand-made for the test");
  EXPECT_DOUBLE_EQ(m.virtual_fabric->copy_gbps(4), 1000.0);
  EXPECT_DOUBLE_EQ(m.virtual_fabric->sum_elems_per_us(2, false), 500.0);
  EXPECT_DOUBLE_EQ(m.kernel_launch_us, 0.0);
  // A plain cost-model file stays the per-GPU machine.
  EXPECT_FALSE(parse_cost_model("{\"ce_copy_gbps\": 1000}").virtual_fabric);
}

TEST(VirtualFabricMachine, BadFilesNameTheProblem) {
  json j = machine_json();
  j.erase("hbm_gbps");
  EXPECT_NE(thrown(j).find("missing field 'hbm_gbps'"), std::string::npos) << thrown(j);
  j = machine_json();
  j["hbm_gbps"] = -1;
  EXPECT_NE(thrown(j).find("'hbm_gbps' = -1 must be > 0"), std::string::npos) << thrown(j);
  j = machine_json();
  j["machine"] = "nvlink";
  EXPECT_NE(thrown(j).find("\"virtual-fabric\""), std::string::npos) << thrown(j);
  j = machine_json();
  j["hbm_gbs"] = 1;
  EXPECT_NE(thrown(j).find("unknown field 'hbm_gbs'"), std::string::npos) << thrown(j);
  j = machine_json();
  j["copy_gbps_by_streams"] = json::array({json::array({4, 1.0}), json::array({2, 1.0})});
  EXPECT_NE(thrown(j).find("streams must increase"), std::string::npos) << thrown(j);
  j = machine_json();
  j["sum_cta_gelems"] = json::array({{{"l", 2}, {"accumulate", false}, {"gelems", 1.0}}});
  EXPECT_NE(thrown(j).find("no entry with accumulate = true"), std::string::npos) << thrown(j);
  j = machine_json();
  j["source"] = "";
  EXPECT_NE(thrown(j).find("'source' must name"), std::string::npos) << thrown(j);
  EXPECT_NE(thrown(json::parse("{\"machine\": 3}")).find("'machine' must be a string"),
            std::string::npos);
  EXPECT_THROW(load_cost_model("/nonexistent/machine.json"), InvalidArgument);
}

TEST(VirtualFabricMachine, TwoRanksConcurrentCopiesShareOneCopyCeiling) {
  Program one = make_program(2, 4 * kCopy);
  add(one, copy_op(0, 0, "r0 copy", bytes(arena(0), 0, kCopy), bytes(arena(0), kCopy, kCopy)));
  EXPECT_NEAR(makespan_us(one, machine_json()), 1.0, 1e-9);
  Program two = one;  // rank 1 copies at the same time: twice the bytes on the same ceiling
  add(two, copy_op(1, 0, "r1 copy", bytes(arena(1), 0, kCopy), bytes(arena(1), kCopy, kCopy)));
  EXPECT_NEAR(makespan_us(two, machine_json()), 2.0, 1e-9);
  // Peer copies are same-GPU copies: rank 0 into rank 1's arena takes the same time.
  Program peer = make_program(2, 4 * kCopy);
  add(peer,
      copy_op(0, 0, "r0 -> r1", bytes(arena(0), 0, kCopy), bytes(arena(1), 2 * kCopy, kCopy)));
  EXPECT_NEAR(makespan_us(peer, machine_json()), 1.0, 1e-9);
  // HBM, not the copy engines, binds when it is the lower ceiling: 1000 GB/s of HBM.
  json slow = machine_json();
  slow["hbm_gbps"] = 1000.0;
  EXPECT_NEAR(makespan_us(two, slow), 4.0, 1e-9);
  // The per-GPU machine gives each rank its own copy engine: both copies in 1 us there.
  CostModel per_gpu;
  per_gpu.ce_copy_gbps = 1000.0;
  per_gpu.copy_launch_us = 0;
  per_gpu.host_enqueue_us = 0;
  ReferenceExecutor ex(two, timing_only());
  EXPECT_NEAR(ex.run(seeded(0, 0.0, 64, per_gpu)).makespan_us, 1.0, 1e-9);
}

// Rank 0 copies 1e6 bytes while rank 1 sums L = 2 bf16 contributions of 250,000 elements into
// fp32 on 1 CTA. By hand: the sum moves 250,000 x (2 x 2 + 4) = 2e6 HBM bytes at most
// 1 x 500 elements/us x 8 B = 4000 B/us, alone 500 us; the copy takes the rest of HBM,
// 2e6 - 4000 B/us, for its 2e6 bytes: 2e6 / 1.996e6 us. The sum keeps its cap throughout.
// With accumulate the sum reads the output too: 12 B an element, 3e6 bytes at 6000 B/us,
// 500 us again. Two such sums on one rank's stream run one after the other: 1000 us.
TEST(VirtualFabricMachine, SumAndCopyShareHbmAsWorkedOutByHand) {
  const std::int64_t elems = 250'000;
  Program p = make_program(2, 4 * kCopy, {}, 4 * elems);
  add(p, copy_op(0, 0, "r0 copy", bytes(arena(0), 0, kCopy), bytes(arena(0), kCopy, kCopy)));
  program::SumOp sum;
  sum.in_dtype = DType::kBf16;
  sum.staged = {bytes(arena(1), 0, 2 * elems)};
  sum.segments = {program::SumSegment{0, 0, 0, 0, elems}};
  sum.segments[0].space = Space::kArena;
  sum.segments[0].src_elem = elems;
  sum.dst = bytes(output(1), 0, 4 * elems);
  sum.ctas = 1;
  const int s = add(p, program::make_op(1, 0, "r1 sum", sum));
  ReferenceExecutor ex(p, timing_only());
  RunOptions o = seeded(0, 0.0, 64, parse_cost_model(machine_json().dump()));
  const RunResult r = ex.run(o);
  ASSERT_TRUE(r.completed);
  EXPECT_NEAR(r.op_times[0].end_us, 2e6 / (2e6 - 4000.0), 1e-9);
  EXPECT_NEAR(r.op_times[static_cast<std::size_t>(s)].end_us, 500.0, 1e-6);
  sum.accumulate = true;
  p.ops[static_cast<std::size_t>(s)] = program::make_op(1, 0, "r1 sum", sum);
  add(p, program::make_op(1, 0, "r1 sum again", sum));
  EXPECT_NEAR(makespan_us(p, machine_json()), 1000.0, 1e-6);
}

}  // namespace
}  // namespace tide::exec::testing
