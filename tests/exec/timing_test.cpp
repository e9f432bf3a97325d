// The cost model and simulated time: a chain of copies takes the sum of its modeled
// durations, shared links serialise, JSON overrides, the Chrome trace parses, and a
// timing-only run of 512 ranks finishes quickly.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>

#include "exec_test_util.hpp"
#include "tide/core/error.hpp"

namespace tide::exec::testing {
namespace {

TEST(ReferenceTiming, ChainOfCopiesTakesTheSumOfTheirDurations) {
  Program p = make_program(2, 64 << 20);
  const std::int64_t sizes[] = {1 << 20, 8 << 20, 3 << 20, 16 << 20, 12345};
  std::int64_t off = 0;
  for (int i = 0; i < 5; ++i) {
    // Alternate same-GPU, 2-D and peer copies.
    Region src = bytes(arena(0), off, sizes[i]);
    Region dst = bytes(i == 2 ? arena(1) : arena(0), (32 << 20) + off, sizes[i]);
    if (i == 1) {
      src = Region{arena(0), off, 8192, 8192 * 2, sizes[i] / 8192 / 2};
      dst = Region{arena(0), (32 << 20) + off, 8192, 8192, sizes[i] / 8192 / 2};
    }
    add(p, copy_op(0, 0, "copy " + std::to_string(i), src, dst));
    off += sizes[i];
  }
  const CostModel cost;
  double sum = 0;
  for (const Op& op : p.ops)
    sum += op_duration_us(cost, op);
  ReferenceExecutor ex(p, timing_only());
  const RunResult r = ex.run(seeded(0, 0.0, 64, cost));
  ASSERT_TRUE(r.clean()) << error_list(r);
  // The first op is issued after one host enqueue; the rest are issued while it runs.
  EXPECT_NEAR(r.makespan_us, cost.host_enqueue_us + sum, 1e-9 * sum);
  // One duration by hand: 1 MiB at 2000 GB/s plus the copy launch.
  EXPECT_NEAR(op_duration_us(cost, p.ops[0]),
              cost.copy_launch_us + (1 << 20) / (cost.ce_copy_gbps * 1e3), 1e-12);
  // The chain's ops follow each other exactly.
  for (std::size_t i = 1; i < p.ops.size(); ++i)
    EXPECT_DOUBLE_EQ(r.op_times[i].start_us, r.op_times[i - 1].end_us);
}

TEST(ReferenceTiming, ConcurrentCopiesShareTheCopyEngine) {
  Program p = make_program(1, 64 << 20, {}, 0, {"a", "b"});
  add(p, copy_op(0, 0, "a", bytes(arena(0), 0, 16 << 20), bytes(arena(0), 32 << 20, 16 << 20)));
  add(p,
      copy_op(0, 1, "b", bytes(arena(0), 16 << 20, 16 << 20), bytes(arena(0), 48 << 20, 16 << 20)));
  CostModel cost;
  cost.host_enqueue_us = 0;
  const double d = op_duration_us(cost, p.ops[0]);
  ReferenceExecutor ex(p, timing_only());
  EXPECT_NEAR(ex.run(seeded(0, 0.0, 64, cost)).makespan_us, 2 * d, 1e-9);
  cost.share_links = false;
  EXPECT_NEAR(ex.run(seeded(0, 0.0, 64, cost)).makespan_us, d, 1e-9);
}

TEST(ReferenceTiming, RoundWaitAppliesToNetworkRoundWaitsAndSmTimeCountsCtas) {
  Program p = make_program(2, 1 << 20, {}, 1 << 20);
  p.counters = 1;
  Op put = copy_op(0, 0, "put", bytes(arena(0), 0, 1 << 20), bytes(arena(1), 0, 1 << 20));
  put.payload = program::RailPutOp{put.as<program::CopyOp>().copies, program::Counter{1, 0}, 1};
  add(p, put);
  add(p, sync_op(OpKind::kWait, 1, 0, "wait arrival", 1, 0, 1));
  p.ops.back().as<program::WaitOp>().network_round = true;
  Op land;
  auto& land_op = land.payload.emplace<program::LandOp>();
  land.rank = 1;
  land.label = "land";
  land_op.dst = bytes(output(1), 0, 1 << 20);
  land_op.sources = {bytes(arena(1), 0, 1 << 20)};
  land_op.ctas = 3;
  add(p, land);
  CostModel cost;
  cost.host_enqueue_us = 0;
  ReferenceExecutor ex(p, timing_only());
  const RunResult r = ex.run(seeded(0, 0.0, 64, cost));
  ASSERT_TRUE(r.clean()) << error_list(r);
  const double put_us = cost.rail_latency_us + (1 << 20) / (cost.nic_gbps * 1e3);
  // TIDE's landing kernel at its per-CTA rate (its partials are local: the HBM ceiling, far
  // above 3 CTAs' rate, does not bind).
  const double land_us = cost.kernel_launch_us + (1 << 20) / (3 * cost.land_cta_gbps * 1e3);
  EXPECT_NEAR(r.makespan_us, put_us + cost.memop_us + cost.round_wait_us + land_us, 1e-6);
  EXPECT_NEAR(r.sm_time_us, 3 * land_us, 1e-9);
  EXPECT_EQ(r.peak_buffer_bytes, 2 << 20);
}

// Outputs (and the arena) are held for the whole program: a program of several calls, each
// with its own output, adds them up, which is why `tide simulate step` reports the value as
// summed_call_buffer_bytes beside the step's peak (held_bytes).
TEST(ReferenceTiming, PeakBufferBytesHoldEveryOutputAtOnce) {
  Program p = make_program(1, 4096, {1000}, 512);
  p.buffers[0].output_bytes = {512, 256};
  add(p, copy_op(0, 0, "call 0", bytes(tensor(0, 0), 0, 512), bytes(output(0), 0, 512)));
  Op rel;
  rel.label = "free G0";
  rel.payload.emplace<program::ReleaseOp>().dst = bytes(tensor(0, 0), 0, 1000);
  add(p, rel);
  add(p, copy_op(0, 0, "call 1", bytes(arena(0), 0, 256),
                 Region{Buffer{0, Space::kOutput, 1}, 0, 256, 256, 1}));
  ReferenceExecutor ex(p);
  ex.input(tensor(0, 0));
  ex.input(arena(0), 0, 256);
  const RunResult r = ex.run();
  ASSERT_TRUE(r.clean()) << error_list(r);
  EXPECT_EQ(r.peak_buffer_bytes, 4096 + 512 + 256 + 1000);
}

TEST(ReferenceTiming, PeakBufferBytesFollowTensorLifetimes) {
  Program p = make_program(1, 4096, {1000, 3000}, 512);
  add(p, copy_op(0, 0, "read G0", bytes(tensor(0, 0), 0, 1000), bytes(arena(0), 0, 1000)));
  Op rel;
  auto& release = rel.payload.emplace<program::ReleaseOp>();
  rel.label = "free G0";
  release.dst = bytes(tensor(0, 0), 0, 1000);
  add(p, rel);
  add(p, copy_op(0, 0, "read G1", bytes(tensor(0, 1), 0, 3000), bytes(arena(0), 1000, 3000)));
  ReferenceExecutor ex(p);
  ex.input(tensor(0, 0));
  ex.input(tensor(0, 1));
  const RunResult r = ex.run();
  ASSERT_TRUE(r.clean()) << error_list(r);
  EXPECT_EQ(r.peak_buffer_bytes, 4096 + 512 + 3000);
  ReferenceExecutor timing(p, timing_only());
  EXPECT_EQ(timing.run().peak_buffer_bytes, 4096 + 512 + 3000);
}

TEST(ReferenceTiming, SeedsBreakTiesDeterministically) {
  Program p = make_program(4, 1 << 20, {}, 0, {"a", "b"});
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < 10; ++i)
        add(p, copy_op(r, s, "c", bytes(arena(r), 0, 4096),
                       bytes(arena((r + 1) % 4), 4096 * (1 + s), 4096)));
  ReferenceExecutor ex(p, timing_only());
  const RunResult a = ex.run(seeded(3, 0.3));
  const RunResult b = ex.run(seeded(3, 0.3));
  const RunResult c = ex.run(seeded(4, 0.3));
  EXPECT_EQ(a.makespan_us, b.makespan_us);
  EXPECT_NE(a.makespan_us, c.makespan_us);
  for (std::size_t i = 0; i < a.op_times.size(); ++i)
    EXPECT_EQ(a.op_times[i].end_us, b.op_times[i].end_us);
}

TEST(ReferenceTiming, CostModelJsonOverrides) {
  const CostModel m =
      parse_cost_model(R"({"nic_gbps": 25, "round_wait_us": 0, "share_links": false})");
  EXPECT_EQ(m.nic_gbps, 25.0);
  EXPECT_EQ(m.round_wait_us, 0.0);
  EXPECT_FALSE(m.share_links);
  EXPECT_EQ(m.sum_cta_gbps, CostModel{}.sum_cta_gbps);
  EXPECT_THROW(parse_cost_model(R"({"nic_gbsp": 25})"), InvalidArgument);
  EXPECT_THROW(parse_cost_model(R"({"nic_gbps": 0})"), InvalidArgument);
  EXPECT_THROW(parse_cost_model(R"({"nic_gbps": "fast"})"), InvalidArgument);
  EXPECT_THROW(parse_cost_model("{"), InvalidArgument);
  EXPECT_THROW(load_cost_model("/nonexistent/cost.json"), InvalidArgument);
  const CostModel round = parse_cost_model(cost_model_json(m));
  EXPECT_EQ(round.nic_gbps, 25.0);
  EXPECT_EQ(round.land_cap_gbps, m.land_cap_gbps);
  EXPECT_FALSE(round.share_links);
}

TEST(ReferenceTiming, ChromeTraceParsesAsJson) {
  Program p = make_program(2, 4096, {}, 0, {"comm \"main\"", "copy"});
  p.events = 1;
  add(p, copy_op(0, 0, "copy \"a\"\n", bytes(arena(0), 0, 64), bytes(arena(1), 0, 64)));
  add(p, sync_op(OpKind::kEventRecord, 0, 0, "rec", 0, 0, 0, 0));
  add(p, sync_op(OpKind::kEventWait, 0, 1, "wait", 0, 0, 0, 0));
  add(p, copy_op(0, 1, "copy b", bytes(arena(0), 64, 64), bytes(arena(0), 128, 64)));
  ReferenceExecutor ex(p);
  ex.input(arena(0));
  const RunResult r = ex.run();
  ASSERT_TRUE(r.clean()) << error_list(r);
  std::stringstream out;
  write_chrome_trace(out, p, r);
  const nlohmann::json j = nlohmann::json::parse(out.str());
  int complete = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "X") {
      ++complete;
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
    }
  }
  EXPECT_EQ(complete, 4);
  EXPECT_EQ(j.at("traceEvents")[1].at("args").at("name"), "comm \"main\"");

  std::stringstream one_rank;
  write_chrome_trace(one_rank, p, r, 1);
  EXPECT_EQ(nlohmann::json::parse(one_rank.str()).at("traceEvents").size(), 1u + 2u + 4u);

  std::stringstream svg;
  write_timeline_svg(svg, p, r);
  const std::string text = svg.str();
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  std::size_t rects = 0;
  for (std::size_t at = text.find("<rect"); at != std::string::npos;
       at = text.find("<rect", at + 1))
    ++rects;
  EXPECT_EQ(rects, 4u + 11u);  // one per op, one per legend entry
  EXPECT_NE(text.find("copy &quot;a&quot;"), std::string::npos);
}

// 512 ranks (64 x 8), three streams: per rank 64 Bruck-like rounds of rail puts and waits,
// NVLink scatters and landings at production sizes (tens of MB per op).
TEST(ReferenceTiming, TimingOnly512RanksRunsInSeconds) {
  constexpr int kRanks = 512, kRounds = 64;
  constexpr std::int64_t kBlock = 32 << 20;
  Program p = make_program(kRanks, 4 * kBlock, {kBlock}, kBlock, {"comm", "copy", "done"});
  p.counters = 1;
  p.events = kRounds;  // event ids are per rank
  for (int r = 0; r < kRanks; ++r) {
    for (int k = 0; k < kRounds; ++k) {
      const int peer = (r + 8 * (k % 63 + 1)) % kRanks;
      Op put = copy_op(r, 0, "put", bytes(arena(r), 0, kBlock), bytes(arena(peer), kBlock, kBlock));
      put.payload =
          program::RailPutOp{put.as<program::CopyOp>().copies, program::Counter{peer, 0}, 1};
      add(p, put);
      add(p, sync_op(OpKind::kWait, r, 0, "wait", r, 0, k + 1));
      p.ops.back().as<program::WaitOp>().network_round = true;
      add(p, sync_op(OpKind::kEventRecord, r, 0, "rec", 0, 0, 0, k));
      add(p, sync_op(OpKind::kEventWait, r, 1, "wait rec", 0, 0, 0, k));
      add(p, copy_op(r, 1, "scatter", bytes(arena(r), kBlock, kBlock),
                     bytes(arena(r ^ 1), 2 * kBlock, kBlock)));
      Op land;
      auto& land_op = land.payload.emplace<program::LandOp>();
      land.rank = r;
      land.stream = 2;
      land.label = "land";
      land_op.dst = bytes(output(r), 0, kBlock);
      land_op.sources = {bytes(arena(r), kBlock, kBlock)};
      land_op.ctas = 4;
      add(p, land);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  ReferenceExecutor ex(p, timing_only());
  const RunResult r = ex.run(seeded(1));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.clean()) << error_list(r);
  EXPECT_EQ(r.ops_run, static_cast<std::int64_t>(p.ops.size()));
  EXPECT_GT(r.makespan_us, kRounds * CostModel{}.round_wait_us);
  EXPECT_LT(seconds, 10.0);
  std::cout << "512 ranks, " << p.ops.size() << " ops: " << seconds << " s, predicted "
            << r.makespan_us / 1e3 << " ms\n";
}

}  // namespace
}  // namespace tide::exec::testing
