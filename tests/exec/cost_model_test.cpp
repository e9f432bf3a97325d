// The baseline's terms of NOTE [cost model], each against a duration worked out by hand from
// the parameter it names: SM copy kernels, the streaming ceiling, NCCL's kernel start and its
// overlapped ring reduction steps. Every parameter is set to a distinct value so a term that
// read the wrong one would fail.
#include "tide/exec/cost_model.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "exec_test_util.hpp"
#include "tide/core/error.hpp"

namespace tide::exec::testing {
namespace {

using program::CopyDescriptor;
using program::SumSegment;

CostModel distinct_model() {
  CostModel m;
  m.ce_copy_gbps = 1900;
  m.ce_copy_2d_gbps = 700;
  m.nvlink_gbps = 410;
  m.sm_copy_gbps = 2900;
  m.sm_copy_2d_gbps = 3800;
  m.sm_stream_cap_gbps = 2050;
  m.sum_cta_gbps = 97;
  m.cast_cta_gbps = 93;
  m.nccl_link_gbps = 270;
  m.nccl_fold_gbps = 710;
  m.nccl_launch_us = 55;
  m.land_cta_gbps = 19;
  m.land_cap_gbps = 600;
  m.kernel_launch_us = 3.5;
  m.copy_launch_us = 1.5;
  m.event_us = 0.25;
  return m;
}

double us(double bytes, double gbps) {
  return bytes / (gbps * 1e3);
}

constexpr std::int64_t kMiB = 1 << 20;

TEST(CostModelBaseline, CopyKernelsRunAtTheirSmRatesNotTheCopyEngines) {
  const CostModel m = distinct_model();
  // A 1-D copy: on the copy engine, then as a kernel (ctas > 0).
  Op op =
      copy_op(0, 0, "copy", bytes(arena(0), 0, 24 * kMiB), bytes(arena(0), 64 * kMiB, 24 * kMiB));
  EXPECT_NEAR(op_duration_us(m, op), m.copy_launch_us + us(24.0 * kMiB, m.ce_copy_gbps), 1e-9);
  op.as<program::CopyOp>().ctas = 132;
  EXPECT_NEAR(op_duration_us(m, op), m.kernel_launch_us + us(2.0 * 24 * kMiB, m.sm_copy_gbps),
              1e-9);
  // split_with_sizes_copy's shape: 8 rows of 3 MiB, rank-major pitch 5 MiB -> dense.
  op.as<program::CopyOp>().copies = {
      CopyDescriptor{Region{arena(0), 0, 3 * kMiB, 5 * kMiB, 8},
                     Region{arena(0), 64 * kMiB, 3 * kMiB, 3 * kMiB, 8}}};
  EXPECT_NEAR(op_duration_us(m, op), m.kernel_launch_us + us(2.0 * 24 * kMiB, m.sm_copy_2d_gbps),
              1e-9);
  // An NCCL ring hop to a peer inside a kernel: the NCCL link rate, no launch.
  op.as<program::CopyOp>().copies = {
      CopyDescriptor{bytes(arena(0), 0, 10 * kMiB), bytes(arena(1), 0, 10 * kMiB)}};
  op.inside_kernel = true;
  EXPECT_NEAR(op_duration_us(m, op), us(10.0 * kMiB, m.nccl_link_gbps), 1e-9);
}

TEST(CostModelBaseline, StreamingKernelsStopAtTheHbmCeiling) {
  const CostModel m = distinct_model();
  Op sum;
  auto& sum_op = sum.payload.emplace<program::SumOp>();
  sum_op.in_dtype = DType::kBf16;
  sum_op.segments = {SumSegment{0, 0, 0, 0, 3 * kMiB}};       // 3 Mi bf16 elements in
  sum_op.dst = Region{arena(0), 0, 12 * kMiB, 12 * kMiB, 1};  // 3 Mi fp32 out
  const double logical = 3.0 * kMiB * 2 + 12.0 * kMiB;
  sum_op.ctas = 8;  // 8 x 97 = 776 GB/s, under the ceiling
  EXPECT_NEAR(op_duration_us(m, sum), m.kernel_launch_us + us(logical, 8 * m.sum_cta_gbps), 1e-9);
  sum_op.ctas = 132;  // FSDP2's _chunk_cat on a full grid: the ceiling
  EXPECT_NEAR(op_duration_us(m, sum), m.kernel_launch_us + us(logical, m.sm_stream_cap_gbps), 1e-9);
  Op cast;
  auto& cast_op = cast.payload.emplace<program::CastOp>();
  cast_op.ctas = 4;
  cast_op.src = {bytes(arena(0), 0, 8 * kMiB)};
  cast_op.dst = bytes(arena(0), 8 * kMiB, 4 * kMiB);
  EXPECT_NEAR(op_duration_us(m, cast), m.kernel_launch_us + us(12.0 * kMiB, 4 * m.cast_cta_gbps),
              1e-9);
  cast_op.ctas = 64;
  EXPECT_NEAR(op_duration_us(m, cast), m.kernel_launch_us + us(12.0 * kMiB, m.sm_stream_cap_gbps),
              1e-9);
}

TEST(CostModelBaseline, RingFoldsOverlapAndTheKernelStartIsPaidOnce) {
  const CostModel m = distinct_model();
  Op fold;
  auto& fold_op = fold.payload.emplace<program::LandOp>();
  fold_op.ctas = 8;
  fold_op.sources = {bytes(arena(0), 0, 6 * kMiB), bytes(arena(0), 6 * kMiB, 6 * kMiB)};
  fold_op.dst = bytes(arena(0), 12 * kMiB, 6 * kMiB);
  // Outside an NCCL kernel it is TIDE's landing kernel, at the landing rate per CTA ...
  const double land = m.kernel_launch_us + us(6.0 * kMiB, 8 * m.land_cta_gbps);
  EXPECT_NEAR(op_duration_us(m, fold), land, 1e-9);
  fold_op.sources[1].buffer = arena(1);  // (partials on a peer: the same under the ceilings)
  EXPECT_NEAR(op_duration_us(m, fold), land, 1e-9);
  // ... capped by the fabric when pulling from a peer, by HBM when every partial is local.
  fold_op.ctas = 64;  // 64 x 19 = 1216 GB/s: above land_cap (600), under the HBM ceiling (2050)
  EXPECT_NEAR(op_duration_us(m, fold), m.kernel_launch_us + us(6.0 * kMiB, m.land_cap_gbps), 1e-9);
  fold_op.sources[1].buffer = arena(0);
  EXPECT_NEAR(op_duration_us(m, fold), m.kernel_launch_us + us(6.0 * kMiB, 64 * m.land_cta_gbps),
              1e-9);
  fold_op.ctas = 8;
  // ... inside one (a ring reduction step) only its exposed part counts, with no launch.
  fold.inside_kernel = true;
  EXPECT_NEAR(op_duration_us(m, fold), us(6.0 * kMiB, m.nccl_fold_gbps), 1e-9);
  // The event wait that opens an NCCL kernel carries its start; a plain one does not.
  Op wait = sync_op(OpKind::kEventWait, 0, 0, "ring after packing");
  EXPECT_EQ(op_duration_us(m, wait), m.event_us);
  wait.as<program::EventWaitOp>().ctas = 8;
  EXPECT_EQ(op_duration_us(m, wait), m.nccl_launch_us);
}

TEST(CostModelBaseline, CopyKernelsDoNotQueueOnTheCopyEngine) {
  // Two streams: a copy-engine copy and a copy kernel of the same size start together; with
  // shared links only copy-engine copies queue, so the kernel is not delayed.
  Program p = make_program(1, 128 * kMiB, {}, 0, {"a", "b"});
  add(p, copy_op(0, 0, "ce", bytes(arena(0), 0, 16 * kMiB), bytes(arena(0), 32 * kMiB, 16 * kMiB)));
  Op kernel = copy_op(0, 1, "kernel", bytes(arena(0), 16 * kMiB, 16 * kMiB),
                      bytes(arena(0), 64 * kMiB, 16 * kMiB));
  kernel.as<program::CopyOp>().ctas = 132;
  add(p, kernel);
  CostModel m = distinct_model();
  m.host_enqueue_us = 0;
  ReferenceExecutor ex(p, timing_only());
  const RunResult r = ex.run(seeded(0, 0.0, 64, m));
  ASSERT_TRUE(r.clean()) << error_list(r);
  EXPECT_NEAR(r.makespan_us, std::max(op_duration_us(m, p.ops[0]), op_duration_us(m, p.ops[1])),
              1e-9);
}

// A network round's wait ends t_rnd after its arrivals: a stream that reaches it late pays only
// what is left of t_rnd, one that waits for the arrivals pays all of it.
TEST(CostModelRoundWait, RunsFromTheArrivalsNotFromTheStream) {
  CostModel m = distinct_model();
  m.host_enqueue_us = 0;
  m.round_wait_us = 100;
  m.memop_us = 0.5;
  m.nic_gbps = 50;
  m.rail_latency_us = 3;
  m.ce_copy_gbps = 1;  // rank 1's work: 1 us per KB
  // No work, work that ends inside t_rnd (67 us), work that ends after it (1050 us).
  for (const double busy_mib : {0.0, 0.0625, 1.0}) {
    Program p = make_program(2, 8 * kMiB, {}, 0, {"net", "work"});
    p.counters = 1;
    Op put = copy_op(0, 0, "put", bytes(arena(0), 0, kMiB), bytes(arena(1), 0, kMiB));
    put.payload = program::RailPutOp{put.as<program::CopyOp>().copies, program::Counter{1, 0}, 1};
    add(p, put);
    if (busy_mib > 0) {
      const auto n = static_cast<std::int64_t>(busy_mib * kMiB);
      add(p, copy_op(1, 1, "work", bytes(arena(1), 2 * kMiB, n), bytes(arena(1), 4 * kMiB, n)));
    }
    add(p, sync_op(OpKind::kWait, 1, 1, "round arrivals", 1, 0, 1));
    p.ops.back().as<program::WaitOp>().network_round = true;
    ReferenceExecutor ex(p, timing_only());
    const RunResult r = ex.run(seeded(0, 0.0, 64, m));
    ASSERT_TRUE(r.clean()) << error_list(r);
    const double arrived = m.rail_latency_us + us(1.0 * kMiB, m.nic_gbps);
    const double busy = busy_mib > 0 ? op_duration_us(m, p.ops[1]) : 0.0;
    EXPECT_NEAR(r.makespan_us, std::max(busy, arrived + m.round_wait_us) + m.memop_us, 1e-9)
        << busy_mib << " MiB of work";
  }
}

TEST(CostModelBaseline, NewParametersRoundTripThroughJson) {
  const CostModel m = distinct_model();
  const CostModel back = parse_cost_model(cost_model_json(m));
  EXPECT_EQ(back.sm_copy_gbps, m.sm_copy_gbps);
  EXPECT_EQ(back.sm_copy_2d_gbps, m.sm_copy_2d_gbps);
  EXPECT_EQ(back.sm_stream_cap_gbps, m.sm_stream_cap_gbps);
  EXPECT_EQ(back.nccl_link_gbps, m.nccl_link_gbps);
  EXPECT_EQ(back.nccl_fold_gbps, m.nccl_fold_gbps);
  EXPECT_EQ(back.nccl_launch_us, m.nccl_launch_us);
  EXPECT_THROW(parse_cost_model(R"({"nccl_link_gbps": 0})"), InvalidArgument);
  EXPECT_THROW(parse_cost_model(R"({"nccl_launch_us": -1})"), InvalidArgument);
}

}  // namespace
}  // namespace tide::exec::testing
