// The expert-parallel lane (App. F, L_sub = 1; program/ep_lane.hpp) on the CUDA sequence
// runner (NOTE [CUDA call sequences]), virtual fabric, M x 1 with M = 2..8 (powers of two and
// not). Many consecutive calls on one caller stream, fresh random data per call (seed printed),
// fresh caller pointers per call, poisoned outputs and landings:
//   - reduce-scatter: every call's output bitwise ep_rs_expected (the lane's arithmetic order,
//     NOTE [arithmetic order]) with that call's alpha and accumulate; the 8-source sum is the
//     Level 1 kernel (M - 1 staged inbox blocks, then the own gradients in place);
//   - all-gather: every call's landing holds every rank's shard bit for bit (resident shard,
//     or fp32 masters cast per call);
// on the stream path, with slot graphs replayed and re-pointed, and with every rail transfer a
// message through the rendezvous transport (each rank an emulated node). GPU cases skip
// without a device; the template checks run anywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ag_call_data.hpp"
#include "kernels/gpu_test_util.hpp"
#include "sequence_test_kernels.hpp"
#include "sequence_test_util.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/program/ep_lane.hpp"

namespace tide {
namespace {

using exec::CudaCallBindings;
using exec::CudaSequenceOptions;
using exec::CudaSequenceRunner;
using exec::testing::launch_compute_copy;
using program::CallSequence;
using namespace sequence_testing;  // NOLINT(google-build-using-namespace)

enum class Path { kStream, kGraphs, kMessages };

std::string path_name(Path p) {
  return p == Path::kStream ? "stream" : p == Path::kGraphs ? "graphs" : "messages";
}

SequenceTestOptions options_for(Path path) {
  SequenceTestOptions o;
  o.replay_graphs = path != Path::kStream;
  if (path == Path::kMessages) o.node_size = 1;  // every rank an emulated node
  return o;
}

// Shapes with one wide parameter, so that most groups cut their shards into several rail
// parts (inbox generations reused inside a call, and across calls).
std::vector<ParamShape> lane_shapes(std::mt19937_64& rng, int m) {
  std::vector<ParamShape> shapes = odd_shapes(rng, 1 + static_cast<int>(rng() % 3));
  shapes.push_back({"wide", 4 * m + static_cast<std::int64_t>(rng() % (8 * m)),
                    3 + static_cast<std::int64_t>(rng() % 40)});
  return shapes;
}

// What a collective's rail messages move: caller memory (the reduce-scatter's bf16 gradient
// pieces, sent in place) or only the arena (the all-gather, landing to landing).
enum class MessageSources { kCallerMemory, kArena };

// Calls with messages are captured and replayed as any other (NOTE [CUDA call sequences] 3,
// 6), but a template whose messages move caller memory is not re-pointable: with fresh
// pointers every call, its calls take the stream path and repoint_failure() says why.
void expect_path(const CudaSequenceRunner& runner, Path path, int calls, MessageSources sources) {
  if (path == Path::kMessages) {
    EXPECT_GT(runner.message_ops(), 0.0);
    EXPECT_GT(runner.messages_sent(), 0);
    EXPECT_EQ(runner.messages_sent() % calls, 0) << "every call sends the same messages";
    EXPECT_EQ(runner.graphs_unavailable(), "");
    if (sources == MessageSources::kCallerMemory) {
      EXPECT_EQ(runner.graph_launches(), 0) << "fresh caller pointers every call";
      EXPECT_NE(runner.repoint_failure(), "");
    } else {
      EXPECT_GT(runner.graph_launches(), 0) << runner.repoint_failure();
      EXPECT_LE(runner.graph_launches(), calls);
    }
  } else if (path == Path::kGraphs) {
    EXPECT_GT(runner.graph_launches(), 0) << runner.graphs_unavailable();
    EXPECT_LE(runner.graph_launches(), calls);
  } else {
    EXPECT_EQ(runner.graph_launches(), 0);
  }
}

// ---- Reduce-scatter -----------------------------------------------------------------------

class EpRsHarness {
 public:
  EpRsHarness(int m, std::uint64_t seed, const SequenceTestOptions& options)
      : rng_(seed),
        layout_(Topology(m, 1), lane_shapes(rng_, m), DType::kBf16, DType::kBf16),
        areas_(areas_of(layout_)),
        seq_(program::ep_rs_call_sequence(layout_, areas_)),
        fabric_(fabric_for(seq_)),
        test_fabric_(*fabric_, options),
        runner_(seq_, test_fabric_.get(), test_fabric_.place(), options),
        poison_(out_bytes()) {
    poison_.fill(0xFF);  // NaN bits: a non-accumulating call must overwrite every element
  }

  static program::EpRsArenaLayout areas_of(const GroupLayout& layout) {
    program::EpRsProgramOptions o;
    o.fold_always = true;  // as the runtime lays it out (accumulate bound per call)
    const program::EpRsArenaLayout a = program::ep_rs_arena_layout(layout, o);
    return program::ep_rs_arena_layout_at(a, 0, a.arena_bytes);
  }

  int world() const { return layout_.topology().world(); }
  int parts() const { return areas_.parts; }
  CudaSequenceRunner& runner() { return runner_; }
  std::size_t out_bytes() const { return static_cast<std::size_t>(layout_.shard_elems()) * 4; }

  // One call's caller memory and data: fresh gradient and output buffers (fresh pointers),
  // pristine sources, the snapshot the caller's consumer takes, the expected output.
  struct Call {
    float alpha = 1.0f;
    bool accumulate = false;
    std::vector<std::vector<std::unique_ptr<Dev>>> grads, sources;  // [rank][param]
    std::vector<std::unique_ptr<Dev>> outputs, initial, snapshot;   // [rank]
    std::vector<CudaCallBindings> bindings;
    std::vector<std::vector<float>> expected;
  };

  std::unique_ptr<Call> call(float alpha, bool accumulate) {
    auto c = std::make_unique<Call>();
    c->alpha = alpha;
    c->accumulate = accumulate;
    std::vector<RankGrads> grads = random_grads(rng_, layout_);
    for (RankGrads& rank : grads)  // wide exponents: another order shows in the bits
      for (auto& param : rank)
        for (float& v : param)
          v = std::ldexp(v, static_cast<int>(rng_() % 49) - 24);
    std::vector<std::vector<float>> initial(static_cast<std::size_t>(world()));
    c->grads.resize(static_cast<std::size_t>(world()));
    c->sources.resize(static_cast<std::size_t>(world()));
    for (int r = 0; r < world(); ++r) {
      const auto ur = static_cast<std::size_t>(r);
      CudaCallBindings b;
      for (int p = 0; p < layout_.param_count(); ++p) {
        const auto& g = grads[ur][static_cast<std::size_t>(p)];
        std::vector<std::byte> bytes(g.size() * 2);
        store_values(g, DType::kBf16, bytes);
        c->sources[ur].push_back(std::make_unique<Dev>(bytes.size()));
        c->sources[ur].back()->upload(bytes.data());
        c->grads[ur].push_back(std::make_unique<Dev>(bytes.size()));
        c->grads[ur].back()->fill(0xFF);  // poison until the caller's producer writes them
        b.tensors.push_back(c->grads[ur].back()->get());
      }
      auto& init = initial[ur];
      init.resize(static_cast<std::size_t>(layout_.shard_elems()));
      for (float& v : init)
        v = random_value(rng_, DType::kFp32);
      c->initial.push_back(std::make_unique<Dev>(out_bytes()));
      c->initial.back()->upload(init.data());
      c->outputs.push_back(std::make_unique<Dev>(out_bytes()));
      b.output = c->outputs.back()->get();
      c->snapshot.push_back(std::make_unique<Dev>(out_bytes()));
      c->snapshot.back()->fill(0xEE);
      c->bindings.push_back(std::move(b));
    }
    c->expected = ep_rs_expected(layout_, grads, alpha, accumulate, initial);
    return c;
  }

  // The caller's step: produce the gradients and the output (initial or poison), the call,
  // consume the output; all on `caller`, no host wait.
  void step(const Call& c, cudaStream_t caller) {
    for (int r = 0; r < world(); ++r) {
      const auto ur = static_cast<std::size_t>(r);
      for (std::size_t p = 0; p < c.grads[ur].size(); ++p)
        launch_compute_copy(c.grads[ur][p]->get(), c.sources[ur][p]->get(), c.grads[ur][p]->bytes(),
                            caller);
      launch_compute_copy(c.outputs[ur]->get(), c.accumulate ? c.initial[ur]->get() : poison_.get(),
                          out_bytes(), caller);
    }
    runner_.enqueue(c.bindings, c.alpha, c.accumulate, caller);
    for (int r = 0; r < world(); ++r) {
      const auto ur = static_cast<std::size_t>(r);
      launch_compute_copy(c.snapshot[ur]->get(), c.outputs[ur]->get(), out_bytes(), caller);
    }
  }

  void expect_equal(const Call& c, const std::string& what) const {
    for (int r = 0; r < world(); ++r) {
      const auto got = c.snapshot[static_cast<std::size_t>(r)]->download();
      const auto& want = c.expected[static_cast<std::size_t>(r)];
      ASSERT_EQ(got.size(), want.size() * 4);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
          << what << ": rank " << r << " (alpha " << c.alpha << ", accumulate " << c.accumulate
          << ", " << areas_.parts << " parts)";
    }
  }

 private:
  std::mt19937_64 rng_;
  GroupLayout layout_;
  program::EpRsArenaLayout areas_;
  CallSequence seq_;
  std::unique_ptr<fabric::VirtualFabric> fabric_;
  TestFabric test_fabric_;
  CudaSequenceRunner runner_;
  Dev poison_;
};

class EpRsRunner : public ::testing::TestWithParam<std::tuple<int, Path>> {};

// max(7, 2 Q + 1) calls: alpha 1/M or random, accumulate every third call (with graphs the
// slots see changed scalars and pointers: re-pointed replays or recaptures).
TEST_P(EpRsRunner, CallsAreBitwiseTheLaneOrder) {
  TIDE_REQUIRE_GPU();
  const auto [m, path] = GetParam();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(tide::testing::seed_trace(seed) + ", M = " + std::to_string(m) + ", " +
               path_name(path));
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  EpRsHarness h(m, seed, options_for(path));
  const int calls = std::max(7, 2 * h.runner().event_slots() + 1);
  std::mt19937_64 rng(seed ^ 0x5EEDu);
  std::vector<std::unique_ptr<EpRsHarness::Call>> data;
  for (int e = 0; e < calls; ++e) {
    const float alpha = e % 2 == 0 ? 1.0f / static_cast<float>(m) : random_value(rng, DType::kFp32);
    data.push_back(h.call(alpha, e % 3 == 1));
  }
  Stream caller;
  for (const auto& c : data)
    h.step(*c, caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  EXPECT_EQ(h.runner().calls(), calls);
  for (int e = 0; e < calls; ++e)
    h.expect_equal(*data[static_cast<std::size_t>(e)], "call " + std::to_string(e));
  expect_path(h.runner(), path, calls, MessageSources::kCallerMemory);
}

INSTANTIATE_TEST_SUITE_P(Lane, EpRsRunner,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 7, 8),
                                            ::testing::Values(Path::kStream, Path::kGraphs,
                                                              Path::kMessages)));

// ---- All-gather ---------------------------------------------------------------------------

class EpAgHarness {
 public:
  EpAgHarness(int m, bool cast, std::uint64_t seed, const SequenceTestOptions& options)
      : rng_(seed),
        layout_(Topology(m, 1), lane_shapes(rng_, m), DType::kBf16, DType::kBf16),
        plan_(layout_, ag_options(cast)),
        areas_(program::ep_ag_arena_layout(layout_)),
        seq_(program::ep_ag_call_sequence(plan_, areas_)),
        fab_(fabric_for(seq_)),
        test_fabric_(*fab_, options),
        runner_(seq_, test_fabric_.get(), test_fabric_.place(), options),
        data_(rng_, layout_, std::max(7, 2 * runner_.event_slots() + 1), cast) {
    for (int r = 0; r < world(); ++r) {
      if (!cast) {
        const std::vector<std::uint16_t>& shard = data_.resident(r);
        TIDE_CUDA_CHECK(cudaMemcpy(area(r, areas_.resident), shard.data(), shard.size() * 2,
                                   cudaMemcpyHostToDevice));
      }
      // poison every landing
      TIDE_CUDA_CHECK(cudaMemset(area(r, areas_.landing), 0xFF, data_.landing_bytes()));
    }
  }

  static AgOptions ag_options(bool cast) {
    AgOptions o;
    o.mixed_precision_cast = cast;
    return o;
  }
  int calls() const { return data_.calls(); }
  int world() const { return layout_.topology().world(); }
  CudaSequenceRunner& runner() { return runner_; }

  // Call e on `caller`, then the consumer's copy of every landing on the same stream.
  void step(int e, cudaStream_t caller) {
    data_.step(
        runner_, e, [this](int r) { return area(r, areas_.landing); }, caller);
  }
  void expect_landed(int e) const { data_.expect_landed(e, "expert-parallel lane"); }

 private:
  std::byte* area(int rank, std::int64_t offset) const {
    return static_cast<std::byte*>(fab_->arena(rank)) + kRegionOffset + offset;
  }

  std::mt19937_64 rng_;
  GroupLayout layout_;
  AgPlan plan_;
  program::EpAgArenaLayout areas_;
  CallSequence seq_;
  std::unique_ptr<fabric::VirtualFabric> fab_;
  TestFabric test_fabric_;
  CudaSequenceRunner runner_;
  AgCallData data_;
};

class EpAgRunner : public ::testing::TestWithParam<std::tuple<int, bool, Path>> {};

// Recursive-doubling rounds landing to landing, no receive stage: every call lands every
// shard, the landing offered again only after this rank's previous call (event waits one call
// back, NOTE [call sequences]).
TEST_P(EpAgRunner, CallsLandEveryShardBitwise) {
  TIDE_REQUIRE_GPU();
  const auto [m, cast, path] = GetParam();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(tide::testing::seed_trace(seed) + ", M = " + std::to_string(m) + ", cast " +
               std::to_string(cast) + ", " + path_name(path));
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  EpAgHarness h(m, cast, seed, options_for(path));
  Stream caller;
  for (int e = 0; e < h.calls(); ++e)
    h.step(e, caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  EXPECT_EQ(h.runner().calls(), h.calls());
  for (int e = 0; e < h.calls(); ++e)
    h.expect_landed(e);
  expect_path(h.runner(), path, h.calls(), MessageSources::kArena);
}

INSTANTIATE_TEST_SUITE_P(Lane, EpAgRunner,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8), ::testing::Bool(),
                                            ::testing::Values(Path::kStream, Path::kGraphs,
                                                              Path::kMessages)));

// The lane's templates pass the CUDA mapping's checks (no GPU needed): the 8-source sum as a
// Level 1 launch (M - 1 staged blocks at one stride), the fold as a one-source landing.
TEST(EpLaneCuda, TemplatesPassTheExecutorChecks) {
  std::mt19937_64 rng(test_seed());
  for (int m = 2; m <= program::kEpSumSources; ++m) {
    const GroupLayout layout(Topology(m, 1), lane_shapes(rng, m), DType::kBf16, DType::kBf16);
    const CallSequence rs = program::ep_rs_call_sequence(layout, EpRsHarness::areas_of(layout));
    const CallSequence ag =
        program::ep_ag_call_sequence(AgPlan(layout, {}), program::ep_ag_arena_layout(layout));
    for (const CallSequence* seq : {&rs, &ag}) {
      for (const program::CallTemplate& t : seq->templates) {
        program::Program p = t.program;
        for (program::Op& op : p.ops)
          if (auto* wait = op.get_if<program::WaitOp>(); wait != nullptr && wait->value < 0)
            wait->value = 0;
        EXPECT_NO_THROW(exec::CudaExecutor::check(p)) << "M = " << m;
        EXPECT_TRUE(t.order.unplaced.empty());
      }
    }
  }
}

}  // namespace
}  // namespace tide
