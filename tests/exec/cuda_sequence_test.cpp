// The CUDA sequence runner (NOTE [CUDA call sequences]) on the virtual fabric: many calls of a
// group on one caller stream, interleaved with the caller's compute kernels (which write each
// call's gradients just before it and read its output just after), fresh pointers per call,
// bitwise against the CPU definitions (rs_expected; the all-gather's inputs). Then the replay
// graphs and a caller's own captured graph, replayed with new data, and a peer held back by a
// gate while a replayed call runs: no consumer may run before the peer's signals arrive.
// GPU cases skip without a device; the template checks run anywhere.
#include "tide/exec/cuda_sequence.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "ag_call_data.hpp"
#include "kernels/gpu_test_util.hpp"
#include "sequence_test_kernels.hpp"
#include "sequence_test_util.hpp"
#include "slot_policy_model.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/fabric/virtual_fabric.hpp"
#include "tide/testing/rendezvous_transport.hpp"
#include "transport/message.hpp"
#include "watchdog.hpp"

namespace tide {
namespace {

using exec::CudaCallBindings;
using exec::CudaSequenceOptions;
using exec::CudaSequenceRunner;
using exec::testing::launch_compute_copy;
using program::CallSequence;
using namespace sequence_testing;  // NOLINT(google-build-using-namespace)

// ---- Reduce-scatter -----------------------------------------------------------------------

// One call's data: pristine gradient sources and initial outputs (uploaded), the expected
// outputs and the snapshot the caller's consumer kernel takes right after the call.
struct RsCallData {
  std::vector<std::vector<std::unique_ptr<Dev>>> sources;  // [rank][param]
  std::vector<std::unique_ptr<Dev>> initial;               // [rank]
  std::vector<std::unique_ptr<Dev>> snapshot;              // [rank]
  std::vector<std::vector<float>> expected;
};

// The buffers a call binds: gradients per (rank, param) and an output per rank.
struct RsBuffers {
  std::vector<std::vector<std::unique_ptr<Dev>>> grads;
  std::vector<std::unique_ptr<Dev>> outputs;
  std::vector<CudaCallBindings> bindings;
};

class RsHarness {
 public:
  // With `build` false the runner is built later, by build_runner().
  RsHarness(Topo topo, std::uint64_t seed, const SequenceTestOptions& options, bool accumulate,
            bool mapped = false, RsSubSlices geometry = RsOptions{}.sub_slices, bool build = true,
            bool one_node = false)
      : rng_(seed),
        layout_(Topology(topo.nodes, topo.gpus), odd_shapes(rng_, 1 + static_cast<int>(rng_() % 4)),
                DType::kBf16, DType::kBf16),
        plan_(layout_, rs_options(topo, geometry, one_node)),
        seq_(program::rs_call_sequence(
            plan_, {}, program::rs_arena_layout(plan_, program::LandingStyle::kPull))),
        fabric_(fabric_for(seq_)),
        test_fabric_(*fabric_, options),
        options_(options),
        accumulate_(accumulate),
        mapped_(mapped),
        poison_(out_bytes()) {
    poison_.fill(0xFF);
    if (build) build_runner();
  }

  void build_runner() {
    runner_ = std::make_unique<CudaSequenceRunner>(seq_, test_fabric_.get(), test_fabric_.place(),
                                                   options_);
  }
  fabric::VirtualFabric& fabric() { return *fabric_; }

  static RsOptions rs_options(Topo topo, RsSubSlices geometry, bool one_node = false) {
    RsOptions o;
    o.sub_slices = geometry;
    o.one_node = one_node;  // NOTE [one-node TIDE-RS]: In-Place, sums into the output
    o.wave_width = topo.nodes > 2 ? std::min(2, topo.gpus) : 0;
    o.round_width = 2;
    o.staging_chunk_elems = 8;  // several fills per call: staging credits cross calls
    return o;
  }

  int world() const { return layout_.topology().world(); }
  CudaSequenceRunner& runner() { return *runner_; }
  const CallSequence& sequence() const { return seq_; }
  std::size_t out_bytes() const { return static_cast<std::size_t>(layout_.shard_elems()) * 4; }

  std::unique_ptr<RsBuffers> buffers() {
    auto b = std::make_unique<RsBuffers>();
    b->grads.resize(static_cast<std::size_t>(world()));
    for (int r = 0; r < world(); ++r) {
      CudaCallBindings bind;
      for (int p = 0; p < layout_.param_count(); ++p) {
        const ParamLayout& s = layout_.param(p);
        auto g = std::make_unique<Dev>(static_cast<std::size_t>(s.rows * s.cols * 2));
        TIDE_CUDA_CHECK(cudaMemset(g->get(), 0xFF, g->bytes()));  // poison: NaN
        bind.tensors.push_back(g->get());
        b->grads[static_cast<std::size_t>(r)].push_back(std::move(g));
      }
      b->outputs.push_back(std::make_unique<Dev>(out_bytes(), mapped_));
      bind.output = b->outputs.back()->get();
      b->bindings.push_back(bind);
    }
    return b;
  }

  // Fresh random gradients and initial outputs, their device copies and the expected result.
  std::unique_ptr<RsCallData> data(float alpha) {
    auto d = std::make_unique<RsCallData>();
    const std::vector<RankGrads> grads = random_grads(rng_, layout_);
    std::vector<std::vector<float>> initial(static_cast<std::size_t>(world()));
    d->sources.resize(static_cast<std::size_t>(world()));
    for (int r = 0; r < world(); ++r) {
      for (int p = 0; p < layout_.param_count(); ++p) {
        const auto& g = grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
        std::vector<std::byte> bytes(g.size() * 2);
        store_values(g, DType::kBf16, bytes);
        auto dev = std::make_unique<Dev>(bytes.size());
        dev->upload(bytes.data());
        d->sources[static_cast<std::size_t>(r)].push_back(std::move(dev));
      }
      auto& init = initial[static_cast<std::size_t>(r)];
      init.resize(static_cast<std::size_t>(layout_.shard_elems()));
      for (float& v : init)
        v = random_value(rng_, DType::kFp32);
      d->initial.push_back(std::make_unique<Dev>(out_bytes()));
      d->initial.back()->upload(init.data());
      d->snapshot.push_back(std::make_unique<Dev>(out_bytes(), mapped_));
      d->snapshot.back()->fill(0xEE);
    }
    d->expected = rs_expected(plan_, grads, alpha, accumulate_, initial);
    return d;
  }

  // The caller's step around one call: produce gradients (and the initial output, or poison
  // it), the call, consume the output.
  void step(const RsBuffers& b, const RsCallData& d, float alpha, cudaStream_t caller) {
    for (int r = 0; r < world(); ++r) {
      const auto ur = static_cast<std::size_t>(r);
      for (std::size_t p = 0; p < b.grads[ur].size(); ++p)
        launch_compute_copy(b.grads[ur][p]->get(), d.sources[ur][p]->get(), b.grads[ur][p]->bytes(),
                            caller);
      if (accumulate_) {
        launch_compute_copy(b.outputs[ur]->get(), d.initial[ur]->get(), out_bytes(), caller);
      } else {
        launch_compute_copy(b.outputs[ur]->get(), poison_.get(), out_bytes(), caller);
      }
    }
    runner_->enqueue(b.bindings, alpha, accumulate_, caller);
    for (int r = 0; r < world(); ++r) {
      const auto ur = static_cast<std::size_t>(r);
      launch_compute_copy(d.snapshot[ur]->get(), b.outputs[ur]->get(), out_bytes(), caller);
    }
  }

  void expect_equal(const RsCallData& d, const std::string& what) const {
    for (int r = 0; r < world(); ++r) {
      const auto got = d.snapshot[static_cast<std::size_t>(r)]->download();
      const auto& want = d.expected[static_cast<std::size_t>(r)];
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0)
          << what << ": rank " << r << " period " << seq_.period << " Q " << runner_->event_slots();
    }
  }

 private:
  std::mt19937_64 rng_;
  GroupLayout layout_;
  RsPlan plan_;
  CallSequence seq_;
  std::unique_ptr<fabric::VirtualFabric> fabric_;
  TestFabric test_fabric_;
  CudaSequenceOptions options_;
  std::unique_ptr<CudaSequenceRunner> runner_;
  bool accumulate_;
  bool mapped_;
  Dev poison_;
};

// A template with its relative wait thresholds <= 0 (already met) as 0.
program::Program checkable(const program::Program& t) {
  program::Program p = t;
  for (program::Op& op : p.ops)
    if (auto* wait = op.get_if<program::WaitOp>(); wait != nullptr && wait->value < 0)
      wait->value = 0;
  return p;
}

TEST(CudaSequence, TemplatesPassTheExecutorChecks) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  std::mt19937_64 rng(seed);
  for (const Topo topo : {Topo{1, 4}, Topo{2, 2}, Topo{3, 2}}) {
    const GroupLayout layout(Topology(topo.nodes, topo.gpus), odd_shapes(rng, 3), DType::kBf16,
                             DType::kBf16);
    for (const RsSubSlices geometry :
         {RsSubSlices::kAcrossRanks, RsSubSlices::kPerRank, RsSubSlices::kNodeContiguous}) {
      const RsPlan rs(layout, RsHarness::rs_options(topo, geometry));
      const CallSequence rs_seq = program::rs_call_sequence(
          rs, {}, program::rs_arena_layout(rs, program::LandingStyle::kPull));
      for (const program::CallTemplate& t : rs_seq.templates) {
        EXPECT_NO_THROW(exec::CudaExecutor::check(checkable(t.program)));
        EXPECT_TRUE(t.order.unplaced.empty());
      }
    }
    AgOptions ag_options;
    ag_options.mixed_precision_cast = true;
    const AgPlan ag(layout, ag_options);
    const CallSequence ag_seq = program::ag_call_sequence(ag, program::ag_sequence_areas(ag));
    for (const program::CallTemplate& t : ag_seq.templates) {
      EXPECT_NO_THROW(exec::CudaExecutor::check(checkable(t.program)));
      EXPECT_TRUE(t.order.unplaced.empty());
    }
  }
}

class RsStream : public ::testing::TestWithParam<std::tuple<Topo, bool, RsSubSlices>> {};

// max(7, 2 Q + 1) calls of `h`, each with fresh buffers (pointers) and data, alpha 0.5, on one
// caller stream with no host wait between them; then every call bitwise the definition.
void run_fresh_calls(RsHarness& h) {
  const int calls = std::max(7, 2 * h.runner().event_slots() + 1);
  const float alpha = 0.5f;
  Stream caller;
  std::vector<std::unique_ptr<RsBuffers>> buffers;
  std::vector<std::unique_ptr<RsCallData>> data;
  for (int e = 0; e < calls; ++e) {
    buffers.push_back(h.buffers());
    data.push_back(h.data(alpha));
  }
  for (int e = 0; e < calls; ++e)
    h.step(*buffers[static_cast<std::size_t>(e)], *data[static_cast<std::size_t>(e)], alpha,
           caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  EXPECT_EQ(h.runner().calls(), calls);
  for (int e = 0; e < calls; ++e)
    h.expect_equal(*data[static_cast<std::size_t>(e)], "call " + std::to_string(e));
}

// NOTE [one-node TIDE-RS]: the one-node layout's calls (Level 1 sums into the caller's output
// with the call's alpha and accumulate), on the stream path and replaying re-pointed graphs.
TEST(CudaSequence, OneNodeCallsMatchTheDefinitionOnStreamsAndGraphs) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  for (Topo topo : {Topo{1, 2}, Topo{1, 4}, Topo{1, 8}}) {
    for (bool accumulate : {false, true}) {
      for (bool graphs : {false, true}) {
        SCOPED_TRACE("1 x " + std::to_string(topo.gpus) + (accumulate ? " accumulate" : "") +
                     (graphs ? " graphs" : " streams"));
        CudaSequenceOptions options;
        options.replay_graphs = graphs;
        RsHarness h(topo, seed, options, accumulate, false, RsSubSlices::kPerRank, true, true);
        run_fresh_calls(h);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Stream path: fresh buffers (pointers) every call, no host wait between calls.
TEST_P(RsStream, ManyCallsWithFreshPointersMatchTheDefinition) {
  TIDE_REQUIRE_GPU();
  const auto [topo, accumulate, geometry] = GetParam();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  CudaSequenceOptions options;
  options.replay_graphs = false;
  RsHarness h(topo, seed, options, accumulate, false, geometry);
  run_fresh_calls(h);
  EXPECT_EQ(h.runner().graph_launches(), 0);
}

// Graph path with fresh pointers: every call binds buffers (and an alpha) the slot's last
// call did not, so from the second visit of each event slot on, calls replay the slot's graph
// with the nodes that carry bindings re-pointed (NOTE [CUDA call sequences] 3).
class RsGraphs : public ::testing::TestWithParam<std::tuple<Topo, bool, RsSubSlices>> {};

// Whether some template copies caller memory (a kTensor or kOutput region, on either side)
// in 2-D: the runner's rule (NOTE [CUDA call sequences] 3): a copy is one 1-D node only where
// both sides are one contiguous run (one row, or pitch == width), and CUDA updates only 1-D
// copy nodes. Across ranks a piece real on more than one destination rank is read in strided
// rows, and a gradient piece whose rows are contiguous in the caller's tensor can still land
// in strided staging rows (seed 636197128 at 1 x 4: 3 rows of 6 bytes into a pitch of 8);
// per rank every such copy is 1-D (NOTE [sub-slice geometry]).
bool template_reads_in_2d(const program::CallTemplate& t) {
  const auto caller = [](const program::Region& r) {
    return r.buffer.space == program::Space::kTensor || r.buffer.space == program::Space::kOutput;
  };
  const auto contiguous = [](const program::Region& r) {
    return r.rows <= 1 || r.pitch == r.width;
  };
  for (const program::Op& op : t.program.ops)
    for (const program::CopyDescriptor& c : program::copies_of(op))
      if (c.src.bytes() > 0 && (caller(c.src) || caller(c.dst)) &&
          !(contiguous(c.src) && contiguous(c.dst)))
        return true;
  return false;
}

bool reads_gradients_in_2d(const CallSequence& seq) {
  for (const program::CallTemplate& t : seq.templates)
    if (template_reads_in_2d(t)) return true;
  return false;
}

TEST_P(RsGraphs, FreshPointersReplayRepointedGraphs) {
  TIDE_REQUIRE_GPU();
  const auto [topo, accumulate, geometry] = GetParam();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  RsHarness h(topo, seed, CudaSequenceOptions{}, accumulate, false, geometry);
  const int q = h.runner().event_slots();
  const int calls = 3 * q + 1;
  Stream caller;
  std::vector<std::unique_ptr<RsBuffers>> buffers;
  std::vector<std::unique_ptr<RsCallData>> data;
  std::vector<float> alphas;
  for (int e = 0; e < calls; ++e) {
    alphas.push_back(e % 3 == 0 ? 0.5f : (e % 3 == 1 ? 1.0f : 0.375f));
    buffers.push_back(h.buffers());
    data.push_back(h.data(alphas.back()));
  }
  for (int e = 0; e < calls; ++e)
    h.step(*buffers[static_cast<std::size_t>(e)], *data[static_cast<std::size_t>(e)],
           alphas[static_cast<std::size_t>(e)], caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  EXPECT_EQ(h.runner().calls(), calls);
  // Calls q .. 2q - 1 capture their slot's graph; calls 2q on re-point it. CUDA updates only
  // 1-D copy nodes: a slot whose template reads gradients in 2-D (strided rows: across ranks,
  // unless the shapes are too small for a piece to be real on two ranks) cannot be
  // re-pointed, says so, and runs fresh calls on the stream path (NOTE [CUDA call
  // sequences] 3); per rank every read is 1-D.
  const bool strided = reads_gradients_in_2d(h.sequence());
  if (geometry != RsSubSlices::kAcrossRanks) {
    EXPECT_FALSE(strided);
  }
  if (!strided) {
    EXPECT_EQ(h.runner().repoint_failure(), "");
    EXPECT_EQ(h.runner().graph_launches(), calls - q);
    EXPECT_EQ(h.runner().repointed_launches(), calls - 2 * q);
    EXPECT_GT(h.runner().nodes_repointed(), 0);
  } else {
    EXPECT_NE(h.runner().repoint_failure().find("2-D copy"), std::string::npos)
        << h.runner().repoint_failure();
    EXPECT_EQ(h.runner().repointed_launches(), 0);
  }
  for (int e = 0; e < calls; ++e)
    h.expect_equal(*data[static_cast<std::size_t>(e)], "call " + std::to_string(e));
}

// NOTE [slot graph policy]: captures vs replays over a call pattern of fresh and unchanged
// pointers. Calls go in rounds of Q (one call per event slot); every call of round r binds
// buffer set kRounds[r] = A A B A C C A D D D D D A. Where a slot cannot re-point (the case's
// repoint_graphs off, or its template copies caller memory in 2-D) it runs, per slot:
//   A stream (first visit), A capture, B stream (the graph of A kept), A replay, C stream,
//   C stream (2 in a row: a second capture needs 4), A replay, D D D stream, D capture (4 in
//   a row: the graph of A replaced), D replay, A stream (the graph now holds D):
//   2 captures, 3 replays, 8 stream calls per slot, so graph_captures() = 2 Q and
//   graph_launches() = 5 Q. (Before the policy every fresh call dropped the graph and the
//   next unchanged call re-captured it.) Where it can re-point: A stream, A capture, then
//   every call a replay (re-pointed where the set differs from the slot's previous call's):
//   1 capture, 11 replays (6 re-pointed) per slot. The expected counts come from the host
//   model (slot_policy_model.hpp, checked on the CPU by sequence_slot_policy_test.cpp) with
//   each slot's template: Q = event_slots() slots, slot j runs template j mod P. Every
//   call's output must match the definition bitwise.
class RsSlotPolicy
    : public ::testing::TestWithParam<std::tuple<Topo, RsSubSlices, bool /*repoint_graphs*/>> {};

// Whether some put or signal of `t` between emulated nodes of `node_size` ranks (a message,
// NOTE [CUDA call sequences] 6) moves caller memory: such a slot does not re-point (step 3).
bool messages_move_caller_memory(const program::CallTemplate& t, int node_size) {
  if (node_size <= 0) return false;
  const auto caller = [](const program::Region& r) {
    return r.buffer.space == program::Space::kTensor || r.buffer.space == program::Space::kOutput;
  };
  for (const program::Op& op : t.program.ops) {
    int from = 0, to = 0;
    if (!transport::crosses_ranks(op, from, to) || from / node_size == to / node_size) continue;
    for (const program::CopyDescriptor& c : program::copies_of(op))
      if (c.src.bytes() > 0 && (caller(c.src) || caller(c.dst))) return true;
  }
  return false;
}

// The slot policy case below, with `options` (messages between emulated nodes where
// options.node_size asks for them). Returns the graph launches.
int slot_policy_case(Topo topo, RsSubSlices geometry, const SequenceTestOptions& options) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  const bool repoint = options.repoint_graphs;
  const int node = options.node_size;
  RsHarness h(topo, seed, options, false, false, geometry);
  const int q = h.runner().event_slots();
  const std::vector<int> rounds{0, 0, 1, 0, 2, 2, 0, 3, 3, 3, 3, 3, 0};
  const float alpha = 0.5f;
  std::vector<std::unique_ptr<RsBuffers>> sets;
  for (int k = 0; k < 4; ++k)
    sets.push_back(h.buffers());
  std::vector<SlotModel> model(static_cast<std::size_t>(q));
  bool caller_messages = false;
  for (int j = 0; j < q; ++j) {
    const program::CallTemplate& t =
        h.sequence().templates[static_cast<std::size_t>(j % h.sequence().period)];
    const bool messages = messages_move_caller_memory(t, node);
    caller_messages = caller_messages || messages;
    model[static_cast<std::size_t>(j)].may_repoint =
        repoint && !template_reads_in_2d(t) && !messages;
  }
  Stream caller;
  std::vector<std::unique_ptr<RsCallData>> data;
  for (const int set : rounds) {
    for (int j = 0; j < q; ++j) {
      data.push_back(h.data(alpha));
      h.step(*sets[static_cast<std::size_t>(set)], *data.back(), alpha, caller.get());
      model[static_cast<std::size_t>(j)].call(set);
    }
  }
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  int captures = 0, launches = 0, repoints = 0;
  for (const SlotModel& m : model) {
    captures += m.captures;
    launches += m.launches();
    repoints += m.repoints;
  }
  const std::string why = "repoint_failure: '" + h.runner().repoint_failure() + "'";
  EXPECT_EQ(h.runner().graphs_unavailable(), "");
  EXPECT_EQ(h.runner().calls(), static_cast<std::int64_t>(rounds.size()) * q);
  EXPECT_EQ(h.runner().graph_captures(), captures) << why;
  EXPECT_EQ(h.runner().graph_launches(), launches) << why;
  EXPECT_EQ(h.runner().repointed_launches(), repoints) << why;
  if (!repoint) {  // the hand count above
    EXPECT_EQ(captures, 2 * q);
    EXPECT_EQ(launches, 5 * q);
  }
  EXPECT_EQ(h.runner().message_path(), node > 0 ? "test-rendezvous" : "");
  if (node > 0) {
    EXPECT_GT(h.runner().message_ops(), 0.0);
    // Every call's sends counted, replays included.
    const auto per_call = h.runner().messages_sent() / h.runner().calls();
    EXPECT_GT(per_call, 0);
    EXPECT_EQ(h.runner().messages_sent(), per_call * h.runner().calls());
    if (caller_messages && repoint && !reads_gradients_in_2d(h.sequence())) {
      EXPECT_NE(h.runner().repoint_failure().find("rail message"), std::string::npos) << why;
    }
  }
  for (std::size_t e = 0; e < data.size(); ++e)
    h.expect_equal(*data[e], "call " + std::to_string(e));
  return launches;
}

TEST_P(RsSlotPolicy, CapturesAndReplaysOverFreshAndUnchangedPointers) {
  TIDE_REQUIRE_GPU();
  const auto [topo, geometry, repoint] = GetParam();
  CudaSequenceOptions options;
  options.repoint_graphs = repoint;
  (void)slot_policy_case(topo, geometry, options);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RsSlotPolicy,
    ::testing::Values(std::make_tuple(Topo{2, 2}, RsSubSlices::kNodeContiguous, false),
                      std::make_tuple(Topo{1, 4}, RsSubSlices::kPerRank, false),
                      std::make_tuple(Topo{2, 2}, RsSubSlices::kAcrossRanks, true),
                      std::make_tuple(Topo{3, 2}, RsSubSlices::kAcrossRanks, true),
                      std::make_tuple(Topo{1, 4}, RsSubSlices::kPerRank, true)));

INSTANTIATE_TEST_SUITE_P(
    Topologies, RsGraphs,
    ::testing::Combine(::testing::Values(Topo{1, 4}, Topo{2, 2}, Topo{3, 2}, Topo{2, 4}),
                       ::testing::Bool(),
                       ::testing::Values(RsSubSlices::kAcrossRanks, RsSubSlices::kPerRank,
                                         RsSubSlices::kNodeContiguous)));

INSTANTIATE_TEST_SUITE_P(
    Topologies, RsStream,
    ::testing::Combine(::testing::Values(Topo{1, 4}, Topo{2, 2}, Topo{3, 2}, Topo{2, 4}),
                       ::testing::Bool(),
                       ::testing::Values(RsSubSlices::kAcrossRanks, RsSubSlices::kPerRank,
                                         RsSubSlices::kNodeContiguous)));

// While the gated rank has not started its call, every other rank's output must still hold
// the caller's poison: each of its elements needs the gated rank's contribution, so a
// consumer (Level 1 sum, landing) that ran anyway would have written stale bytes.
void expect_held(const RsBuffers& b, cudaStream_t caller) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(cudaStreamQuery(caller), cudaErrorNotReady) << "the call finished without its peer";
  for (std::size_t r = 0; r < b.outputs.size(); ++r) {
    EXPECT_EQ(b.outputs[r]->count_other_than(0xFF), 0u)
        << "rank " << r << " wrote its output before the gated peer signalled";
  }
}

// Replay graphs: the same buffers every call (new data written into them by the caller), so
// from the second visit of each event slot on, calls replay their slot's graph, whose waits
// follow the call on the device (NOTE [CUDA call sequences] 3).
void replay_graphs_still_wait_for_peers(RsSubSlices geometry) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED), sub-slices " +
               std::string(sub_slices_name(geometry)));
  Gate gate;
  CudaSequenceOptions options = gated(gate, 1);
  RsHarness h(Topo{1, 4}, seed, options, false, /*mapped=*/true, geometry);
  const int q = h.runner().event_slots();
  const int calls = 3 * q + 1;
  const float alpha = 1.0f;
  Stream caller;
  const auto buffers = h.buffers();
  std::vector<std::unique_ptr<RsCallData>> data;
  for (int e = 0; e < calls + 1; ++e)
    data.push_back(h.data(alpha));
  for (int e = 0; e < calls; ++e)
    h.step(*buffers, *data[static_cast<std::size_t>(e)], alpha, caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  EXPECT_GE(h.runner().graph_launches(), 2 * q);  // calls q .. calls - 1 are replays
  for (int e = 0; e < calls; ++e)
    h.expect_equal(*data[static_cast<std::size_t>(e)], "call " + std::to_string(e));

  // A replayed call with rank 1 held back.
  const std::int64_t launches = h.runner().graph_launches();
  gate.set(0);
  h.step(*buffers, *data.back(), alpha, caller.get());
  const std::int64_t gated_launches = h.runner().graph_launches();
  expect_held(*buffers, caller.get());
  gate.set(1);  // before any check can return: a closed gate would hold the streams forever
  EXPECT_EQ(gated_launches, launches + 1) << "the gated call was not a replay";
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  h.expect_equal(*data.back(), "the gated call");

  // A replayed call with fresh pointers (its nodes re-pointed), rank 1 held back: the
  // consumers of the re-pointed graph still wait for the gated peer.
  const auto fresh_buffers = h.buffers();
  for (const auto& out : fresh_buffers->outputs)
    out->fill(0xFF);
  const auto fresh = h.data(alpha);
  const std::int64_t repointed = h.runner().repointed_launches();
  gate.set(0);
  h.step(*fresh_buffers, *fresh, alpha, caller.get());
  const std::int64_t graph_launches = h.runner().graph_launches();
  const std::int64_t repointed_launches = h.runner().repointed_launches();
  expect_held(*fresh_buffers, caller.get());
  gate.set(1);  // before any check can return: a closed gate would hold the streams forever
  if (!reads_gradients_in_2d(h.sequence())) {
    EXPECT_EQ(h.runner().repoint_failure(), "");
    EXPECT_EQ(graph_launches, launches + 2) << "the fresh gated call was not a replay";
    EXPECT_EQ(repointed_launches, repointed + 1) << "its nodes were not re-pointed";
  } else {  // 2-D copies of caller memory: the fresh call ran on the stream path, held too
    EXPECT_NE(h.runner().repoint_failure().find("2-D copy"), std::string::npos)
        << h.runner().repoint_failure();
  }
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  h.expect_equal(*fresh, "the fresh gated call");
}

TEST(CudaSequence, ReplayGraphsMatchAndStillWaitForPeers) {
  TIDE_REQUIRE_GPU();
  replay_graphs_still_wait_for_peers(RsSubSlices::kAcrossRanks);
}

TEST(CudaSequence, ReplayGraphsPerRankRepointFreshGradientsAndStillWaitForPeers) {
  TIDE_REQUIRE_GPU();
  replay_graphs_still_wait_for_peers(RsSubSlices::kPerRank);
}

TEST(CudaSequence, ReplayGraphsNodeContiguousRepointFreshGradientsAndStillWaitForPeers) {
  TIDE_REQUIRE_GPU();
  replay_graphs_still_wait_for_peers(RsSubSlices::kNodeContiguous);
}

// Q caller steps (RsHarness::step, fresh buffers and data each) captured into the caller's
// graph on `caller` and instantiated; destroyed with it.
struct CallerGraph {
  std::vector<std::unique_ptr<RsBuffers>> buffers;
  std::vector<std::unique_ptr<RsCallData>> data;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CallerGraph(RsHarness& h, int q, float alpha, cudaStream_t caller) {
    for (int k = 0; k < q; ++k) {
      buffers.push_back(h.buffers());
      data.push_back(h.data(alpha));
    }
    TIDE_CUDA_CHECK(cudaStreamBeginCapture(caller, cudaStreamCaptureModeRelaxed));
    for (int k = 0; k < q; ++k)
      h.step(*buffers[static_cast<std::size_t>(k)], *data[static_cast<std::size_t>(k)], alpha,
             caller);
    TIDE_CUDA_CHECK(cudaStreamEndCapture(caller, &graph));
    TIDE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  }
  ~CallerGraph() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  }
  CallerGraph(const CallerGraph&) = delete;
  CallerGraph& operator=(const CallerGraph&) = delete;
};

// New data for a call captured in a caller's graph, in the buffers the graph reads: its sources
// and initial outputs take a fresh draw's values, its snapshots are poisoned, and it expects
// the fresh draw's result.
void refill(RsHarness& h, RsCallData& d, float alpha) {
  const auto fresh = h.data(alpha);
  for (std::size_t r = 0; r < d.sources.size(); ++r) {
    for (std::size_t p = 0; p < d.sources[r].size(); ++p)
      TIDE_CUDA_CHECK(cudaMemcpy(d.sources[r][p]->get(), fresh->sources[r][p]->get(),
                                 d.sources[r][p]->bytes(), cudaMemcpyDeviceToDevice));
    TIDE_CUDA_CHECK(cudaMemcpy(d.initial[r]->get(), fresh->initial[r]->get(), h.out_bytes(),
                               cudaMemcpyDeviceToDevice));
    d.snapshot[r]->fill(0xEE);
  }
  d.expected = fresh->expected;
}

// The caller captures its own step (compute kernels and Q calls) into a graph and replays it
// with new data; prepare_replay gives every launch the next call indices, and the captured
// waits follow them on the device.
TEST(CudaSequence, CallsCapturedInTheCallersGraphReplayAndWait) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  Gate gate;
  CudaSequenceOptions options = gated(gate, 2);
  options.replay_graphs = false;
  RsHarness h(Topo{1, 4}, seed, options, true, /*mapped=*/true);
  const int q = h.runner().event_slots();
  const float alpha = 0.25f;
  Stream caller;
  // One ordinary call first, so the graph's calls start at index 1.
  const auto first_buffers = h.buffers();
  const auto first = h.data(alpha);
  h.step(*first_buffers, *first, alpha, caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  h.expect_equal(*first, "call 0");

  CallerGraph g(h, q, alpha, caller.get());
  const auto& buffers = g.buffers;
  const auto& data = g.data;
  cudaGraphExec_t exec = g.exec;
  const exec::CudaCapturedCalls captured = h.runner().take_captured();
  EXPECT_EQ(captured.calls, q);
  EXPECT_EQ(captured.first_call, 1);
  EXPECT_EQ(h.runner().calls(), 1) << "capture does not advance the runner";

  for (int replay = 0; replay < 3; ++replay) {
    // New data in the same source buffers: the expected outputs change every replay.
    for (int k = 0; k < q; ++k)
      refill(h, *data[static_cast<std::size_t>(k)], alpha);
    const bool gated = replay == 2;
    std::vector<std::vector<std::byte>> initial;  // call 0's outputs before it lands
    for (const auto& i : data[0]->initial)
      initial.push_back(i->download());
    if (gated) gate.set(0);
    h.runner().prepare_replay(captured);
    TIDE_CUDA_CHECK(cudaGraphLaunch(exec, caller.get()));
    if (gated) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      EXPECT_EQ(cudaStreamQuery(caller.get()), cudaErrorNotReady);
      // Call 0's landings need the gated rank's contribution: every output still holds the
      // initial value the caller copied in, and no consumer took its snapshot.
      for (std::size_t r = 0; r < initial.size(); ++r) {
        EXPECT_TRUE(buffers[0]->outputs[r]->equals(initial[r]))
            << "rank " << r << " landed before the gated peer signalled";
        EXPECT_EQ(data[0]->snapshot[r]->count_other_than(0xEE), 0u)
            << "rank " << r << "'s consumer ran before the gated peer signalled";
      }
      gate.set(1);
    }
    TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
    for (int k = 0; k < q; ++k)
      h.expect_equal(*data[static_cast<std::size_t>(k)],
                     "replay " + std::to_string(replay) + " call " + std::to_string(k));
  }
  EXPECT_EQ(h.runner().calls(), 1 + 3 * q);
  // Misaligned: one more ordinary call, then the graph's calls no longer fit.
  h.step(*first_buffers, *first, alpha, caller.get());
  EXPECT_THROW(h.runner().prepare_replay(captured), InvalidArgument);
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
}

// NOTE [CUDA call sequences] 3: graph waits are kernels, so a sequence with more streams on
// one GPU than kMaxGraphWaitStreams (here 32 virtual ranks) keeps to the stream path, says
// why, and refuses a caller's capture with Unsupported (the runner stays usable).
TEST(CudaSequence, TooManyStreamsForGraphWaitsKeepToTheStreamPath) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  RsHarness h(Topo{4, 8}, seed, CudaSequenceOptions{}, false);
  EXPECT_NE(h.runner().graphs_unavailable().find("streams on device"), std::string::npos)
      << h.runner().graphs_unavailable();
  Stream caller;
  const auto buffers = h.buffers();
  cudaGraph_t graph = nullptr;
  TIDE_CUDA_CHECK(cudaStreamBeginCapture(caller.get(), cudaStreamCaptureModeRelaxed));
  const auto refused = h.data(1.0f);
  EXPECT_THROW(h.runner().enqueue(buffers->bindings, 1.0f, false, caller.get()), Unsupported);
  TIDE_CUDA_CHECK(cudaStreamEndCapture(caller.get(), &graph));
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  const int calls = 2 * h.runner().event_slots() + 1;
  std::vector<std::unique_ptr<RsCallData>> data;
  for (int e = 0; e < calls; ++e) {
    data.push_back(h.data(1.0f));
    h.step(*buffers, *data.back(), 1.0f, caller.get());
  }
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  EXPECT_EQ(h.runner().graph_launches(), 0);
  for (int e = 0; e < calls; ++e)
    h.expect_equal(*data[static_cast<std::size_t>(e)], "call " + std::to_string(e));
}

// NOTE [graph wait budget]: the 64 graph-wait streams are a budget per device, over every
// runner. A 3 x 2 reduce-scatter has 48 streams (8 per rank). Two of them without a lane
// (their calls may overlap: here on two caller streams) would be 96: the first keeps its
// graphs (calls Q on are replays), the second runs on the stream path (graph_launches() 0),
// says why (the counts, the 128-grid limit, what to do) and refuses a caller's capture. Both
// match the definition bitwise. Two of them in one lane (graph_lane; their calls on one
// caller stream, one after another) count 48 and both replay. graph_wait_streams() shows
// the device's claim: +48 per lane, back to where it was once they are gone.
TEST(CudaSequence, GraphWaitStreamsAreBudgetedPerDevice) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  const auto run = [](RsHarness& h, int calls, cudaStream_t caller,
                      std::vector<std::unique_ptr<RsCallData>>& data,
                      std::vector<std::unique_ptr<RsBuffers>>& buffers) {
    buffers.push_back(h.buffers());
    for (int e = 0; e < calls; ++e) {
      data.push_back(h.data(1.0f));
      h.step(*buffers.back(), *data.back(), 1.0f, caller);
    }
  };
  int device = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  const int base = CudaSequenceRunner::graph_wait_streams(device);
  ASSERT_LE(base + 48, CudaSequenceRunner::kMaxGraphWaitStreams)
      << "runners of earlier tests still hold graph-wait streams";
  {
    RsHarness a(Topo{3, 2}, seed, CudaSequenceOptions{}, false);
    EXPECT_EQ(a.runner().graphs_unavailable(), "");
    EXPECT_EQ(CudaSequenceRunner::graph_wait_streams(device), base + 48);
    RsHarness b(Topo{3, 2}, seed + 1, CudaSequenceOptions{}, false);
    const std::string why = b.runner().graphs_unavailable();
    EXPECT_NE(why.find(std::to_string(base + 96) + " streams on device " + std::to_string(device)),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("128 grids"), std::string::npos) << why;
    EXPECT_NE(why.find("kMaxGraphWaitStreams"), std::string::npos) << why;
    EXPECT_EQ(CudaSequenceRunner::graph_wait_streams(device), base + 48);
    Stream sa, sb;
    {  // b refuses a caller's capture, and stays usable
      cudaGraph_t graph = nullptr;
      const auto refused = b.buffers();
      TIDE_CUDA_CHECK(cudaStreamBeginCapture(sb.get(), cudaStreamCaptureModeRelaxed));
      EXPECT_THROW(b.runner().enqueue(refused->bindings, 1.0f, false, sb.get()), Unsupported);
      TIDE_CUDA_CHECK(cudaStreamEndCapture(sb.get(), &graph));
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
    }
    const int calls = 2 * std::max(a.runner().event_slots(), b.runner().event_slots()) + 1;
    std::vector<std::unique_ptr<RsCallData>> da, db;
    std::vector<std::unique_ptr<RsBuffers>> ba, bb;
    run(a, calls, sa.get(), da, ba);
    run(b, calls, sb.get(), db, bb);
    TIDE_CUDA_CHECK(cudaStreamSynchronize(sa.get()));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(sb.get()));
    EXPECT_EQ(a.runner().graph_launches(), calls - a.runner().event_slots());
    EXPECT_EQ(b.runner().graph_launches(), 0);
    for (int e = 0; e < calls; ++e) {
      a.expect_equal(*da[static_cast<std::size_t>(e)], "a, call " + std::to_string(e));
      b.expect_equal(*db[static_cast<std::size_t>(e)], "b, call " + std::to_string(e));
    }
  }
  EXPECT_EQ(CudaSequenceRunner::graph_wait_streams(device), base);
  {
    CudaSequenceOptions lane;
    lane.graph_lane = exec::new_graph_lane();
    RsHarness c(Topo{3, 2}, seed + 2, lane, false);
    RsHarness d(Topo{3, 2}, seed + 3, lane, false);
    EXPECT_EQ(c.runner().graphs_unavailable(), "");
    EXPECT_EQ(d.runner().graphs_unavailable(), "");
    EXPECT_EQ(CudaSequenceRunner::graph_wait_streams(device), base + 48);
    Stream caller;  // one stream: c's and d's calls never overlap (the lane's promise)
    const int calls = 2 * std::max(c.runner().event_slots(), d.runner().event_slots()) + 1;
    std::vector<std::unique_ptr<RsCallData>> dc, dd;
    std::vector<std::unique_ptr<RsBuffers>> bc, bd;
    bc.push_back(c.buffers());
    bd.push_back(d.buffers());
    for (int e = 0; e < calls; ++e) {
      dc.push_back(c.data(1.0f));
      c.step(*bc.back(), *dc.back(), 1.0f, caller.get());
      dd.push_back(d.data(1.0f));
      d.step(*bd.back(), *dd.back(), 1.0f, caller.get());
    }
    TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
    EXPECT_EQ(c.runner().graph_launches(), calls - c.runner().event_slots());
    EXPECT_EQ(d.runner().graph_launches(), calls - d.runner().event_slots());
    for (int e = 0; e < calls; ++e) {
      c.expect_equal(*dc[static_cast<std::size_t>(e)], "c, call " + std::to_string(e));
      d.expect_equal(*dd[static_cast<std::size_t>(e)], "d, call " + std::to_string(e));
    }
  }
  EXPECT_EQ(CudaSequenceRunner::graph_wait_streams(device), base);
}

// NOTE [CUDA call sequences] 1, setup contract: building a runner waits for its own setup
// only. Two streams are held by a kernel spinning on a closed gate: a blocking stream (the
// legacy default stream waits for it: a synchronous cudaMemset or cudaMemcpy there would
// block) and a non-blocking one (only cudaDeviceSynchronize waits for it). Meanwhile a runner
// is built on another thread: its constructor must return within 20 s while both are still
// held. The sequence's signal words hold garbage before it (0x7F bytes: every wait met), so
// its zeroing must be complete before its first call; once the gate opens, 2 Q + 1 calls
// (stream path, captures, replays) match the definition bitwise. A kernel that was never
// loaded could synchronise the context on its first use (NOTE [preloaded kernels]): a first
// runner, built and destroyed before the hold, loads them all.
TEST(CudaSequence, ConstructionWaitsOnlyForItsOwnSetup) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  RsHarness h(Topo{2, 2}, seed, CudaSequenceOptions{}, false, false, RsSubSlices::kNodeContiguous,
              /*build=*/false);
  int q = 0;
  {
    const CudaSequenceRunner warm(h.sequence(), h.fabric(), {kRegionOffset, kFirstWord});
    q = warm.event_slots();
  }
  for (int r = 0; r < h.world(); ++r)
    TIDE_CUDA_CHECK(cudaMemset(h.fabric().signals(r) + kFirstWord, 0x7F,
                               static_cast<std::size_t>(h.sequence().counters) * 8));
  const int calls = 2 * q + 1;
  const float alpha = 0.75f;
  const auto buffers = h.buffers();
  std::vector<std::unique_ptr<RsCallData>> data;
  for (int e = 0; e < calls; ++e)
    data.push_back(h.data(alpha));
  Stream caller;
  Gate gate;
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  gate.set(0);
  cudaStream_t blocking = nullptr;
  TIDE_CUDA_CHECK(cudaStreamCreate(&blocking));
  Stream nonblocking;
  exec::testing::launch_hold(gate.word(), 60.0, blocking);
  exec::testing::launch_hold(gate.word(), 60.0, nonblocking.get());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool held_before = cudaStreamQuery(blocking) == cudaErrorNotReady &&
                           cudaStreamQuery(nonblocking.get()) == cudaErrorNotReady;
  auto built = std::async(std::launch::async, [&h] { h.build_runner(); });
  const bool returned = built.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  const bool held_after = cudaStreamQuery(blocking) == cudaErrorNotReady &&
                          cudaStreamQuery(nonblocking.get()) == cudaErrorNotReady;
  gate.set(1);
  built.get();  // the constructor's exception, if any
  TIDE_CUDA_CHECK(cudaStreamSynchronize(blocking));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(nonblocking.get()));
  TIDE_CUDA_CHECK(cudaStreamDestroy(blocking));
  ASSERT_TRUE(held_before) << "the hold kernel did not hold its streams";
  EXPECT_TRUE(returned) << "the constructor waited for other work on the device (a "
                           "cudaDeviceSynchronize, or setup work on the legacy default stream)";
  EXPECT_TRUE(held_after) << "the held streams completed before the constructor returned";
  for (int e = 0; e < calls; ++e)
    h.step(*buffers, *data[static_cast<std::size_t>(e)], alpha, caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  EXPECT_EQ(h.runner().graph_launches(), calls - q);
  for (int e = 0; e < calls; ++e)
    h.expect_equal(*data[static_cast<std::size_t>(e)], "call " + std::to_string(e));
}

// ---- All-gather ---------------------------------------------------------------------------

// K all-gather calls of TIDE-AG on the virtual fabric (AgCallData: fresh fp32 masters per
// call with a cast, else the resident shard; a snapshot per call and rank for the caller's
// consumer of the landing).
class AgHarness {
 public:
  AgHarness(Topo topo, bool cast, int calls_at_least, std::uint64_t seed,
            const SequenceTestOptions& options)
      : rng_(seed),
        layout_(Topology(topo.nodes, topo.gpus), odd_shapes(rng_, 1 + static_cast<int>(rng_() % 4)),
                DType::kBf16, DType::kBf16),
        plan_(layout_, ag_options(cast)),
        areas_(program::ag_sequence_areas(plan_)),
        seq_(program::ag_call_sequence(plan_, areas_)),
        fab_(fabric_for(seq_)),
        test_fabric_(*fab_, options),
        runner_(seq_, test_fabric_.get(), test_fabric_.place(), options),
        data_(rng_, layout_, std::max(calls_at_least, 2 * runner_.event_slots() + 1), cast) {
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
    o.head_bytes = 64;
    return o;
  }
  int calls() const { return data_.calls(); }
  int world() const { return layout_.topology().world(); }
  CudaSequenceRunner& runner() { return runner_; }
  const CallSequence& sequence() const { return seq_; }

  // Call e on `caller`, then the consumer's copy of every landing on the same stream.
  void step(int e, cudaStream_t caller) {
    data_.step(
        runner_, e, [this](int r) { return area(r, areas_.landing); }, caller);
  }

  // Call e's snapshots hold every rank's shard at its landing offset, bitwise.
  void expect_landed(int e) const {
    data_.expect_landed(e, "period " + std::to_string(seq_.period));
  }

 private:
  std::byte* area(int rank, std::int64_t offset) const {
    return static_cast<std::byte*>(fab_->arena(rank)) + kRegionOffset + offset;
  }

  std::mt19937_64 rng_;
  GroupLayout layout_;
  AgPlan plan_;
  program::AgSequenceAreas areas_;
  CallSequence seq_;
  std::unique_ptr<fabric::VirtualFabric> fab_;
  TestFabric test_fabric_;
  CudaSequenceRunner runner_;
  AgCallData data_;
};

class AgStream : public ::testing::TestWithParam<std::tuple<Topo, bool, bool>> {};

// Every call lands every rank's shard in every rank's landing; with a cast each call reads
// fresh fp32 masters (fresh pointers), without it the resident shard. The caller's consumer
// copies each rank's landing right after each call. On the stream path, or with graphs:
// from the second visit of each event slot on, calls replay the slot's graph (re-pointed to
// the fresh masters with a cast).
TEST_P(AgStream, ManyCallsLandEveryShard) {
  TIDE_REQUIRE_GPU();
  const auto [topo, cast, graphs] = GetParam();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  CudaSequenceOptions options;
  options.replay_graphs = graphs;
  AgHarness h(topo, cast, 7, seed, options);
  Stream caller;
  for (int e = 0; e < h.calls(); ++e)
    h.step(e, caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  const int q = h.runner().event_slots();
  EXPECT_EQ(h.runner().graph_launches(), graphs ? h.calls() - q : 0);
  EXPECT_EQ(h.runner().repointed_launches(), graphs && cast ? h.calls() - 2 * q : 0);
  for (int e = 0; e < h.calls(); ++e)
    h.expect_landed(e);
}

// NOTE [CUDA call sequences] 2-3: calls run one after another even on different caller
// streams: a replayed call's nodes do not queue behind the previous call's on the runner's
// streams, and no call may add to its slot's generation while an earlier call of the slot
// still reads it. Call c (a re-pointed replay on stream A) is held by a closed gate before
// its streams' first op; the next Q calls go on stream B, the last of them of c's slot.
// Every call on B must land bitwise (c's own landing is reused by a call on B before A's
// consumer copies it, so c is not checked), within a bound.
TEST(CudaSequence, CallsOnTwoCallerStreamsTakeTurns) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  Gate gate;
  CudaSequenceOptions options = gated(gate, 1);
  const int q_guess = 8;  // enough calls for any Q seen (checked below)
  AgHarness h(Topo{1, 4}, /*cast=*/true, 3 * q_guess + 1, seed, options);
  const int q = h.runner().event_slots();
  ASSERT_LE(3 * q + 1, h.calls());
  Stream a, b;
  for (int e = 0; e < 2 * q; ++e)  // every slot captured and replayed once
    h.step(e, a.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(a.get()));
  const int c = 2 * q;
  gate.set(0);
  const std::int64_t launches = h.runner().graph_launches();
  h.step(c, a.get());
  for (int e = c + 1; e <= c + q; ++e)
    h.step(e, b.get());
  EXPECT_EQ(h.runner().graph_launches(), launches + q + 1) << "the calls were not replays";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cudaStreamQuery(a.get()), cudaErrorNotReady) << "call c finished without its peer";
  gate.set(1);  // before any check can return: a closed gate would hold the streams forever
  // Bounded: a wrong generation would hold the streams; release them and fail.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((cudaStreamQuery(a.get()) == cudaErrorNotReady ||
          cudaStreamQuery(b.get()) == cudaErrorNotReady) &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (cudaStreamQuery(a.get()) == cudaErrorNotReady ||
      cudaStreamQuery(b.get()) == cudaErrorNotReady) {
    h.runner().release_waits();
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    FAIL() << "calls on two caller streams did not finish within 20 s";
  }
  for (int e = 0; e < c; ++e)
    h.expect_landed(e);
  for (int e = c + 1; e <= c + q; ++e)
    h.expect_landed(e);
}

// NOTE [CUDA call sequences] 3-4: slot graphs, a caller's graph and eager calls after it
// share the slots' generation words. Calls 0 .. 3Q - 1 run eagerly (from Q on as slot-graph
// replays, re-pointed to fresh masters); the next Q are captured into the caller's graph,
// which is launched twice; then Q + 1 more eager calls, the first held by a closed gate.
// Were a generation off by one, those calls would wait a period too far (never finishing)
// or a period too short (running before the gated peer): every call must land bitwise,
// the gated one only after the gate opens.
TEST(CudaSequence, SlotGraphsAndACallersGraphShareTheGenerations) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  Gate gate;
  const int q_guess = 8;  // enough calls for any Q seen (checked below)
  AgHarness h(Topo{1, 4}, /*cast=*/true, 5 * q_guess + 1, seed, gated(gate, 1));
  const int q = h.runner().event_slots();
  ASSERT_LE(5 * q + 1, h.calls());
  Stream caller;
  for (int e = 0; e < 3 * q; ++e)
    h.step(e, caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  for (int e = 0; e < 3 * q; ++e)
    h.expect_landed(e);

  TIDE_CUDA_CHECK(cudaStreamBeginCapture(caller.get(), cudaStreamCaptureModeRelaxed));
  for (int e = 3 * q; e < 4 * q; ++e)
    h.step(e, caller.get());
  cudaGraph_t graph = nullptr;
  TIDE_CUDA_CHECK(cudaStreamEndCapture(caller.get(), &graph));
  cudaGraphExec_t exec = nullptr;
  TIDE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const exec::CudaCapturedCalls captured = h.runner().take_captured();
  ASSERT_EQ(captured.calls, q);
  for (int launch = 0; launch < 2; ++launch) {
    h.runner().prepare_replay(captured);
    TIDE_CUDA_CHECK(cudaGraphLaunch(exec, caller.get()));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
    for (int e = 3 * q; e < 4 * q; ++e)
      h.expect_landed(e);
  }
  EXPECT_EQ(h.runner().calls(), 5 * q);

  gate.set(0);
  for (int e = 4 * q; e <= 5 * q; ++e)
    h.step(e, caller.get());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cudaStreamQuery(caller.get()), cudaErrorNotReady) << "ran before the gated peer";
  gate.set(1);  // before any check can return: a closed gate would hold the streams forever
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (cudaStreamQuery(caller.get()) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (cudaStreamQuery(caller.get()) == cudaErrorNotReady) {
    h.runner().release_waits();
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    FAIL() << "the calls after the caller's graph did not finish within 20 s";
  }
  for (int e = 4 * q; e <= 5 * q; ++e)
    h.expect_landed(e);
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
}

INSTANTIATE_TEST_SUITE_P(Topologies, AgStream,
                         ::testing::Combine(::testing::Values(Topo{1, 4}, Topo{2, 2}, Topo{3, 2},
                                                              Topo{2, 4}),
                                            ::testing::Bool(), ::testing::Bool()));

// NOTE [CUDA call sequences] 5: a call held back by a closed gate is found by stalled() once
// the timeout has passed, named with the gate; release_waits() lets the streams drain, and the
// runner refuses every later call.
TEST(CudaSequence, WatchFindsAStalledCallAndReleasesIt) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  Gate gate;
  CudaSequenceOptions options = gated(gate, 1);
  RsHarness h(Topo{1, 4}, seed, options, false, /*mapped=*/true);
  Stream caller;
  const auto buffers = h.buffers();
  std::vector<std::unique_ptr<RsCallData>> data;
  for (int e = 0; e < 3; ++e)
    data.push_back(h.data(1.0f));
  for (int e = 0; e < 2; ++e)
    h.step(*buffers, *data[static_cast<std::size_t>(e)], 1.0f, caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  EXPECT_TRUE(h.runner().idle());
  EXPECT_FALSE(h.runner().stalled(std::chrono::milliseconds(0)).has_value())
      << "completed calls reported as stalled";

  gate.set(0);
  h.step(*buffers, *data[2], 1.0f, caller.get());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(h.runner().idle());
  EXPECT_FALSE(h.runner().stalled(std::chrono::hours(1)).has_value())
      << "a call reported before its timeout";
  const std::optional<exec::CudaStalledCall> stall =
      h.runner().stalled(std::chrono::milliseconds(100));
  ASSERT_TRUE(stall.has_value()) << "the held call was not found";
  EXPECT_EQ(stall->call, 2);
  EXPECT_GE(stall->seconds, 0.3);
  ASSERT_FALSE(stall->waits.empty());
  EXPECT_NE(stall->waits[0].find("rank 1: held by the test gate"), std::string::npos)
      << stall->waits[0];

  h.runner().release_waits();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (cudaStreamQuery(caller.get()) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(cudaStreamQuery(caller.get()), cudaSuccess) << "the released call did not drain";
  EXPECT_TRUE(h.runner().idle());
  EXPECT_FALSE(h.runner().stuck());
  try {
    h.step(*buffers, *data[0], 1.0f, caller.get());
    ADD_FAILURE() << "a call after release_waits() was accepted";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
  }
}

// Seed 636197128 at M x L = 1 x 4, across ranks (it once failed on the H200): a gradient piece
// whose 3 rows of 6 bytes are contiguous in the caller's tensor lands in staging rows of pitch 8, a
// 2-D copy on its destination side. The test's rule must count it as the runner does (it once
// looked at the source alone). No GPU needed.
TEST(CudaSequence, TwoDRuleCountsAContiguousGradientIntoStridedRows) {
  std::mt19937_64 rng(636197128);
  const int count = 1 + static_cast<int>(rng() % 4);
  const GroupLayout layout(Topology(1, 4), odd_shapes(rng, count), DType::kBf16, DType::kBf16);
  const RsPlan plan(layout, RsHarness::rs_options(Topo{1, 4}, RsSubSlices::kAcrossRanks));
  const CallSequence seq = program::rs_call_sequence(
      plan, {}, program::rs_arena_layout(plan, program::LandingStyle::kPull));
  bool contiguous_into_strided = false;
  for (const program::CallTemplate& t : seq.templates)
    for (const program::Op& op : t.program.ops)
      for (const program::CopyDescriptor& c : program::copies_of(op))
        contiguous_into_strided =
            contiguous_into_strided ||
            (c.src.buffer.space == program::Space::kTensor && c.src.rows > 1 &&
             c.src.pitch == c.src.width && c.dst.pitch != c.dst.width);
  EXPECT_TRUE(contiguous_into_strided) << "the seed no longer makes the case";
  EXPECT_TRUE(reads_gradients_in_2d(seq));
}

// NOTE [CUDA call sequences] 6: calls from two host threads, each on its own caller stream with
// its own buffers, while a third thread polls the watch and the counts as the runtime's
// watchdog does. With `agreed` the threads take turns (FSDP2's main and autograd threads call
// in an order every rank agrees on); otherwise they race for the runner's lock. Every call
// must match bitwise, and the runner must count every call.
void calls_from_two_threads(bool agreed, bool graphs) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED), agreed " +
               std::to_string(agreed) + ", graphs " + std::to_string(graphs));
  CudaSequenceOptions options;
  options.replay_graphs = graphs;
  RsHarness h(Topo{1, 4}, seed, options, /*accumulate=*/true);
  const int per_thread = 2 * h.runner().event_slots() + 2;
  Stream streams[2];
  std::vector<std::unique_ptr<RsBuffers>> buffers;
  std::vector<std::vector<std::unique_ptr<RsCallData>>> data(2);
  std::vector<std::vector<float>> alphas(2);
  for (int t = 0; t < 2; ++t) {
    buffers.push_back(h.buffers());
    for (int k = 0; k < per_thread; ++k) {
      alphas[static_cast<std::size_t>(t)].push_back(k % 2 == 0 ? 1.0f : 0.5f);
      data[static_cast<std::size_t>(t)].push_back(
          h.data(alphas[static_cast<std::size_t>(t)].back()));
    }
  }
  std::atomic<int> turn = 0;
  std::atomic<bool> failed = false;
  std::atomic<bool> stop = false;
  std::atomic<int> polls = 0;
  std::thread watchdog([&] {
    while (!stop) {
      (void)h.runner().stalled(std::chrono::hours(1));
      (void)h.runner().idle();
      (void)h.runner().calls();
      (void)h.runner().graph_launches();
      (void)h.runner().repointed_launches();
      ++polls;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::string> errors(2);
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t) {
    callers.emplace_back([&, t] {
      try {
        for (int k = 0; k < per_thread; ++k) {
          if (agreed)
            while (turn.load() % 2 != t && !failed)
              std::this_thread::yield();
          const auto ut = static_cast<std::size_t>(t);
          h.step(*buffers[ut], *data[ut][static_cast<std::size_t>(k)],
                 alphas[ut][static_cast<std::size_t>(k)], streams[t].get());
          if (agreed) ++turn;
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
        failed = true;  // let the other thread finish
      }
    });
  }
  for (std::thread& c : callers)
    c.join();
  stop = true;
  watchdog.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  TIDE_CUDA_CHECK(cudaStreamSynchronize(streams[0].get()));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(streams[1].get()));
  EXPECT_GT(polls, 0);
  EXPECT_EQ(h.runner().calls(), 2 * per_thread);
  EXPECT_TRUE(h.runner().idle());
  for (int t = 0; t < 2; ++t)
    for (int k = 0; k < per_thread; ++k)
      h.expect_equal(*data[static_cast<std::size_t>(t)][static_cast<std::size_t>(k)],
                     "thread " + std::to_string(t) + " call " + std::to_string(k));
}

TEST(CudaSequence, CallsFromTwoThreadsInAnAgreedOrder) {
  TIDE_REQUIRE_GPU();
  calls_from_two_threads(true, true);
}

TEST(CudaSequence, CallsFromTwoThreadsRacingForTheLock) {
  TIDE_REQUIRE_GPU();
  calls_from_two_threads(false, true);
  calls_from_two_threads(false, false);
}

// Unrelated work that another thread captures: two device-to-device copies of a random pattern.
struct Unrelated {
  static constexpr std::size_t kBytes = std::size_t{1} << 16;
  Dev src{kBytes}, dst{kBytes};
  std::vector<unsigned char> pattern = std::vector<unsigned char>(kBytes);
  cudaGraphExec_t exec = nullptr;
  Unrelated() {
    std::mt19937_64 rng(kBytes);
    for (unsigned char& b : pattern)
      b = static_cast<unsigned char>(rng());
    src.upload(pattern.data());
    dst.fill(0);
  }
  ~Unrelated() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
  }
  Unrelated(const Unrelated&) = delete;
  Unrelated& operator=(const Unrelated&) = delete;
  // After the held call drained (a launch now could queue behind its waits): the graph runs.
  void expect_graph_runs(cudaStream_t s) {
    ASSERT_NE(exec, nullptr);
    TIDE_CUDA_CHECK(cudaGraphLaunch(exec, s));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<unsigned char> got(kBytes);
    TIDE_CUDA_CHECK(cudaMemcpy(got.data(), dst.get(), kBytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, pattern) << "the captured copies did not run";
  }
};

// Runs `poll` on this thread while another thread captures `work` into a graph in the global
// capture mode (and instantiates it). Returns what cudaStreamEndCapture said.
cudaError_t capture_elsewhere_while(Unrelated& work, const std::function<void()>& poll) {
  std::atomic<int> phase = 0;
  cudaError_t end = cudaErrorUnknown;
  std::thread capturer([&] {
    (void)cudaSetDevice(0);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;  // this thread: the default
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    cudaStream_t s = nullptr;
    (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    (void)cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    auto* d = static_cast<std::byte*>(work.dst.get());
    const auto* from = static_cast<const std::byte*>(work.src.get());
    const std::size_t half = Unrelated::kBytes / 2;
    (void)cudaMemcpyAsync(d, from, half, cudaMemcpyDeviceToDevice, s);
    phase = 1;
    while (phase.load() != 2)
      std::this_thread::yield();
    (void)cudaMemcpyAsync(d + half, from + half, half, cudaMemcpyDeviceToDevice, s);
    cudaGraph_t graph = nullptr;
    end = cudaStreamEndCapture(s, &graph);
    if (end == cudaSuccess && graph != nullptr) {
      if (cudaGraphInstantiate(&work.exec, graph, 0) != cudaSuccess) work.exec = nullptr;
    }
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    (void)cudaStreamDestroy(s);
  });
  while (phase.load() != 1)
    std::this_thread::yield();
  poll();
  phase = 2;
  capturer.join();
  return end;
}

TEST(CudaSequence, WatchQueriesLeaveAGlobalCaptureElsewhereIntact) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  Gate gate;
  RsHarness h(Topo{1, 4}, seed, gated(gate, 1), false, /*mapped=*/true);
  Stream caller;
  const auto buffers = h.buffers();
  const auto d = h.data(1.0f);
  // Allocated and filled before the held call: a synchronous copy or memset could queue behind
  // one of its waits (streams share hardware queues).
  Unrelated control_work, direct_work, dog_work;
  gate.set(0);
  h.step(*buffers, *d, 1.0f, caller.get());  // held: its events stay pending
  cudaEvent_t pending = nullptr;
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&pending, cudaEventDisableTiming));
  TIDE_CUDA_CHECK(cudaEventRecord(pending, caller.get()));

  const cudaError_t control = capture_elsewhere_while(control_work, [&] {
    (void)cudaEventQuery(pending);
    (void)cudaGetLastError();
  });
  if (control == cudaSuccess) {
    std::printf(
        "note: a plain cudaEventQuery did not invalidate a global capture on another "
        "thread here; the checks below prove less\n");
  } else {
    std::printf("control: a plain cudaEventQuery ended the capture with %s\n",
                cudaGetErrorName(control));
  }

  int stalls = 0;
  const cudaError_t direct = capture_elsewhere_while(direct_work, [&] {
    for (int i = 0; i < 5; ++i) {
      stalls += h.runner().stalled(std::chrono::milliseconds(0)).has_value() ? 1 : 0;
      EXPECT_FALSE(h.runner().idle());
      EXPECT_FALSE(h.runner().stuck());
    }
  });
  EXPECT_EQ(direct, cudaSuccess) << cudaGetErrorName(direct)
                                 << ": the watch's queries invalidated the capture";
  EXPECT_EQ(stalls, 5) << "the held call was not seen (the queries did not reach the device)";

  std::atomic<int> checks = 0;
  const cudaError_t dog = capture_elsewhere_while(dog_work, [&] {
    runtime::detail::Watchdog watchdog(
        [&]() -> std::optional<std::string> {
          (void)h.runner().stalled(std::chrono::milliseconds(0));
          (void)h.runner().idle();
          ++checks;
          return std::nullopt;
        },
        [](const std::string&) {}, std::chrono::milliseconds(1));
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (checks < 5 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  EXPECT_GE(checks, 5);
  EXPECT_EQ(dog, cudaSuccess) << cudaGetErrorName(dog)
                              << ": the watchdog thread's queries invalidated the capture";

  gate.set(1);
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  if (direct == cudaSuccess) direct_work.expect_graph_runs(caller.get());
  if (dog == cudaSuccess) dog_work.expect_graph_runs(caller.get());
  (void)cudaEventDestroy(pending);
  h.expect_equal(*d, "the held call");
}

// ---- Rail messages (NOTE [CUDA call sequences] 6) -------------------------------------------

// M > 1 emulated nodes of `topo.gpus` ranks on the virtual fabric: every put and signal between
// nodes travels as a message through the rendezvous transport (SequenceTestOptions, NOTE
// [rendezvous transport]: a send waits on the device for its receive), although the fabric
// could store directly. The transport numbers its messages on the device, so calls with
// messages run in graphs (`graphs`) as any other (NOTE [CUDA call sequences] 3, 6).
SequenceTestOptions forced_messages(Topo topo, bool graphs = true) {
  SequenceTestOptions o;
  o.replay_graphs = graphs;
  o.node_size = topo.gpus;
  return o;
}

void expect_messages(const CudaSequenceRunner& runner) {
  EXPECT_GT(runner.message_ops(), 0.0);
  EXPECT_GT(runner.messages_sent(), 0);
  EXPECT_EQ(runner.graphs_unavailable(), "");
  EXPECT_EQ(runner.message_path(), "test-rendezvous");
}

class RsMessages : public ::testing::TestWithParam<std::tuple<Topo, bool, RsSubSlices>> {};

// Many reduce-scatter calls, fresh pointers, poisoned outputs, every inter-node transfer a
// message, on the stream path and with graphs on (fresh calls: replays where the slot can
// re-point, else the stream path): bitwise the definition (rs_expected, TIDE's arithmetic
// order), so the two paths agree bitwise.
TEST_P(RsMessages, CallsThroughTheRendezvousTransportMatchTheDefinition) {
  TIDE_REQUIRE_GPU();
  const auto [topo, accumulate, geometry] = GetParam();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  for (const bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "graphs" : "stream path");
    RsHarness h(topo, seed, forced_messages(topo, graphs), accumulate, false, geometry);
    run_fresh_calls(h);
    expect_messages(h.runner());
    if (!graphs) {
      EXPECT_EQ(h.runner().graph_launches(), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MultiNode, RsMessages,
                         ::testing::Combine(::testing::Values(Topo{2, 2}, Topo{3, 2}, Topo{2, 3}),
                                            ::testing::Bool(),
                                            ::testing::Values(RsSubSlices::kAcrossRanks,
                                                              RsSubSlices::kPerRank,
                                                              RsSubSlices::kNodeContiguous)));

// NOTE [slot graph policy] with messages: captures, replays and re-points over fresh and
// unchanged pointers as the host model counts them, every call's output bitwise the definition.
class RsMessageGraphs : public ::testing::TestWithParam<std::tuple<Topo, RsSubSlices, bool>> {};

TEST_P(RsMessageGraphs, SlotGraphsWithMessagesCaptureAndReplay) {
  TIDE_REQUIRE_GPU();
  const auto [topo, geometry, repoint] = GetParam();
  SequenceTestOptions options = forced_messages(topo);
  options.repoint_graphs = repoint;
  EXPECT_GT(slot_policy_case(topo, geometry, options), 0) << "no call ran as a graph";
}

INSTANTIATE_TEST_SUITE_P(MultiNode, RsMessageGraphs,
                         ::testing::Combine(::testing::Values(Topo{2, 2}, Topo{3, 2}, Topo{2, 3}),
                                            ::testing::Values(RsSubSlices::kAcrossRanks,
                                                              RsSubSlices::kNodeContiguous),
                                            ::testing::Bool()));

class AgMessages : public ::testing::TestWithParam<std::tuple<Topo, bool, bool>> {};

// Many all-gather calls (poisoned landings), every inter-node transfer a message, on the
// stream path or with graphs: every rank's shard lands bitwise in every rank's landing. With
// graphs, from the second visit of each slot on, calls replay (re-pointed to fresh masters
// with a cast) unless the slot's messages move caller memory, whose fresh calls take the
// stream path.
TEST_P(AgMessages, CallsThroughTheRendezvousTransportLandEveryShard) {
  TIDE_REQUIRE_GPU();
  const auto [topo, cast, graphs] = GetParam();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  AgHarness h(topo, cast, 7, seed, forced_messages(topo, graphs));
  Stream caller;
  for (int e = 0; e < h.calls(); ++e)
    h.step(e, caller.get());
  TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
  expect_messages(h.runner());
  bool caller_messages = false;
  for (const program::CallTemplate& t : h.sequence().templates)
    caller_messages = caller_messages || messages_move_caller_memory(t, topo.gpus);
  const int q = h.runner().event_slots();
  const bool fresh_stream = caller_messages && cast;  // fresh masters every call
  EXPECT_EQ(h.runner().graph_launches(), graphs && !fresh_stream ? h.calls() - q : 0)
      << h.runner().repoint_failure();
  EXPECT_EQ(h.runner().repointed_launches(),
            graphs && cast && !fresh_stream ? h.calls() - 2 * q : 0);
  for (int e = 0; e < h.calls(); ++e)
    h.expect_landed(e);
}

INSTANTIATE_TEST_SUITE_P(MultiNode, AgMessages,
                         ::testing::Combine(::testing::Values(Topo{2, 2}, Topo{3, 2}, Topo{2, 3}),
                                            ::testing::Bool(), ::testing::Bool()));

// NOTE [one-sided messages] on one GPU: the same calls with every inter-node transfer a
// one-sided put through the loopback transport (NOTE [loopback one-sided transport]): routes,
// numbered abort tokens, signal waits. Not capturable, so every call takes the stream path;
// outputs bitwise the definition, as with the rendezvous transport.
SequenceTestOptions one_sided_messages(Topo topo) {
  SequenceTestOptions o = forced_messages(topo, /*graphs=*/false);
  o.one_sided = true;
  return o;
}

void expect_one_sided(const CudaSequenceRunner& runner) {
  EXPECT_GT(runner.messages_sent(), 0);
  EXPECT_EQ(runner.one_sided_refusal(), "");
  EXPECT_EQ(runner.message_path(), "test-one-sided");
  EXPECT_NE(runner.graphs_unavailable().find("one-sided"), std::string::npos)
      << runner.graphs_unavailable();
  EXPECT_EQ(runner.graph_launches(), 0);
}

class RsOneSided : public ::testing::TestWithParam<std::tuple<Topo, RsSubSlices>> {};

TEST_P(RsOneSided, CallsThroughTheLoopbackTransportMatchTheDefinition) {
  TIDE_REQUIRE_GPU();
  const auto [topo, geometry] = GetParam();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  RsHarness h(topo, seed, one_sided_messages(topo), false, false, geometry);
  run_fresh_calls(h);
  expect_one_sided(h.runner());
}

INSTANTIATE_TEST_SUITE_P(MultiNode, RsOneSided,
                         ::testing::Combine(::testing::Values(Topo{2, 2}, Topo{3, 2}),
                                            ::testing::Values(RsSubSlices::kAcrossRanks,
                                                              RsSubSlices::kNodeContiguous)));

TEST(CudaSequence, AllGatherOneSidedLandsEveryShard) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  for (const Topo topo : {Topo{2, 2}, Topo{3, 2}}) {
    AgHarness h(topo, /*cast=*/true, 7, seed, one_sided_messages(topo));
    Stream caller;
    for (int e = 0; e < h.calls(); ++e)
      h.step(e, caller.get());
    TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
    expect_one_sided(h.runner());
    for (int e = 0; e < h.calls(); ++e)
      h.expect_landed(e);
  }
}

// NOTE [CUDA call sequences] 4 with messages: the caller captures Q calls with messages into
// its graph and launches it three times with new data, Q ordinary calls (slot graphs) after
// each launch; the transport numbers every message on the device, so graph launches, slot
// graphs and stream-path calls interleave, and every call matches the definition bitwise.
TEST(CudaSequence, CallsWithMessagesInTheCallersGraphReplay) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  const Topo topo{2, 2};
  RsHarness h(topo, seed, forced_messages(topo), false);
  const int q = h.runner().event_slots();
  const float alpha = 0.75f;
  Stream caller;
  CallerGraph captured_steps(h, q, alpha, caller.get());
  const exec::CudaCapturedCalls captured = h.runner().take_captured();
  EXPECT_EQ(captured.calls, q);
  EXPECT_EQ(h.runner().calls(), 0) << "capture does not advance the runner";
  EXPECT_EQ(h.runner().messages_sent(), 0) << "nothing was sent yet";
  std::vector<std::unique_ptr<RsCallData>> ordinary;
  for (int launch = 0; launch < 3; ++launch) {
    for (int k = 0; k < q; ++k)  // new data in the captured calls' buffers
      refill(h, *captured_steps.data[static_cast<std::size_t>(k)], alpha);
    h.runner().prepare_replay(captured);
    TIDE_CUDA_CHECK(cudaGraphLaunch(captured_steps.exec, caller.get()));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));
    for (int k = 0; k < q; ++k)
      h.expect_equal(*captured_steps.data[static_cast<std::size_t>(k)],
                     "launch " + std::to_string(launch) + " call " + std::to_string(k));
    for (int k = 0; k < q; ++k) {  // the same buffers: slot graphs from the second round on
      ordinary.push_back(h.data(alpha));
      h.step(*captured_steps.buffers[static_cast<std::size_t>(k)], *ordinary.back(), alpha,
             caller.get());
      TIDE_CUDA_CHECK(cudaStreamSynchronize(caller.get()));  // `buffers` is reused
      h.expect_equal(*ordinary.back(), "ordinary call " + std::to_string(k) + " after launch " +
                                           std::to_string(launch));
    }
  }
  EXPECT_EQ(h.runner().calls(), 6 * q);
  EXPECT_GT(h.runner().graph_launches(), 0) << "the ordinary calls never replayed";
  const std::int64_t per_call = h.runner().messages_sent() / h.runner().calls();
  EXPECT_GT(per_call, 0);
  EXPECT_EQ(h.runner().messages_sent(), per_call * h.runner().calls())
      << "a launch's messages were not counted";
  expect_messages(h.runner());
}

// NOTE [rendezvous transport]: a send waits on the device for its receive. The send is
// enqueued first and must not complete while no receive is posted; once the receive is
// posted both complete and the bytes arrive, twice on one pair (the second matching the
// second), with a byte count that needs the 1-byte path.
TEST(RendezvousTransport, ASendWaitsForItsReceive) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED)");
  std::printf("%s\n", tide::testing::seed_trace(seed).c_str());
  std::mt19937_64 rng(seed);
  int device = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  tide::testing::RendezvousTransport t(2, device);
  Stream a, b;
  for (const std::size_t bytes : {std::size_t{4096}, std::size_t{1003}}) {
    std::vector<unsigned char> host(bytes);
    for (unsigned char& v : host)
      v = static_cast<unsigned char>(rng());
    Dev src(bytes), dst(bytes);
    src.upload(host.data());
    dst.fill(0xFF);
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    t.send(0, 1, src.get(), bytes, a.get());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(cudaStreamQuery(a.get()), cudaErrorNotReady) << "the send ran without a receive";
    t.recv(1, 0, dst.get(), bytes, b.get());
    TIDE_CUDA_CHECK(cudaStreamSynchronize(b.get()));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(a.get()));
    const auto got = dst.download();
    EXPECT_EQ(std::memcmp(got.data(), host.data(), bytes), 0) << bytes << " bytes";
  }
  EXPECT_EQ(t.messages(), 2);
}

// NOTE [rendezvous transport], Order: two ranks that each send before they receive, on one
// stream each, cross: each send waits for a receive that its partner's stream holds behind
// its own send, so neither completes (as NCCL's two-sided sends would hang). With a 300 ms
// bound the wait kernels name the message and trap (a death test: a trapped context is lost,
// so it runs in a child process).
void cross_two_sends() {
  // Device printf goes to stdout; the death test reads stderr.
  (void)std::fflush(stdout);
  if (dup2(2, 1) < 0) std::abort();
  int device = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  tide::testing::RendezvousTransport t(2, device, 300ull * 1000 * 1000);
  Stream a, b;
  Dev x(64), y(64), u(64), v(64);
  t.send(0, 1, x.get(), 64, a.get());
  t.recv(0, 1, u.get(), 64, a.get());
  t.send(1, 0, y.get(), 64, b.get());
  t.recv(1, 0, v.get(), 64, b.get());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (cudaStreamQuery(a.get()) != cudaErrorNotReady ||
      cudaStreamQuery(b.get()) != cudaErrorNotReady)
    std::fprintf(stderr, "crossed sends completed\n");
  const cudaError_t err = cudaStreamSynchronize(a.get());
  std::fprintf(stderr, "after the bound: %s\n", cudaGetErrorName(err));
  std::fflush(nullptr);
  std::_Exit(err == cudaSuccess ? 0 : 3);
}

TEST(RendezvousTransportDeathTest, CrossedSendsDeadlockAndTheBoundNamesThem) {
  TIDE_REQUIRE_GPU();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(cross_two_sends(), ::testing::ExitedWithCode(3),
              "TIDE rendezvous transport: message 1 from rank [01] to rank [01]: the receive's "
              "posted word holds 0 after 300 ms(.|\n)*after the bound: cudaError");
}

}  // namespace
}  // namespace tide
