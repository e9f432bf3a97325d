// Fail-stop of the CUDA sequence runner (NOTE [CUDA call sequences] 5): no garbage after a
// release. Two runners over one virtual fabric stand for two processes: runner A runs rank 0,
// runner B rank 1 (a view of the fabric in which only that rank is local). B's rank 1 is held
// by a gate (a peer that is only slow); A's watchdog (the test) finds A's call stalled
// and releases A's waits; then the gate opens. B must never complete a call that needed A's
// signals after the release: its consumer never runs, its stall names the aborted rank, and
// once B is released too every call it had not completed is void. A call that B completed
// before its own release must hold the right bits. With published abort words (peers read
// them) and without (private words), on the stream path and as replay graphs. GPU cases skip
// without a device. One process holds both runners' streams (16 for RS at 1 x 2, plus their
// readers): they run with CUDA_DEVICE_MAX_CONNECTIONS=32 (device_connections.cpp), so that no
// release copy shares a hardware queue with a held wait (else a release can drain only once the
// other runner's waits are met: the test then says so and fails, without hanging).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernels/gpu_test_util.hpp"
#include "sequence_test_kernels.hpp"
#include "sequence_test_util.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_sequence.hpp"

namespace tide {
namespace {

using exec::CudaCallBindings;
using exec::CudaSequenceRunner;
using exec::testing::launch_compute_copy;
using program::CallSequence;
using namespace sequence_testing;  // NOLINT(google-build-using-namespace)

// A virtual fabric as one process of several sees it: only `local` ranks run here; every
// rank's arena and signal words stay reachable (as LSA peers' are), other ranks' tensors and
// outputs are not addressable.
class FabricView final : public fabric::Fabric {
 public:
  FabricView(fabric::Fabric& inner, std::set<int> local)
      : inner_(inner), local_(std::move(local)) {}
  int ranks() const override { return inner_.ranks(); }
  bool local(int rank) const override { return local_.contains(rank); }
  int device() const override { return inner_.device(); }
  int device_of(int rank) const override { return inner_.device_of(rank); }
  void* pointer(const program::Buffer& b) const override {
    if (b.space != program::Space::kArena && !local(b.rank)) return nullptr;
    return inner_.pointer(b);
  }
  std::int64_t bytes(const program::Buffer& b) const override { return inner_.bytes(b); }
  std::uint64_t* signals(int owner) const override { return inner_.signals(owner); }
  std::int64_t signal_words() const override { return inner_.signal_words(); }
  void release() noexcept override {}

 private:
  fabric::Fabric& inner_;
  std::set<int> local_;
};

bool stream_done(cudaStream_t s) {
  const cudaError_t q = cudaStreamQuery(s);
  if (q != cudaSuccess && q != cudaErrorNotReady) TIDE_CUDA_CHECK(q);
  return q == cudaSuccess;
}

// Waits up to `bound` for `s` to complete its work; whether it did.
bool drains_within(cudaStream_t s, std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!stream_done(s) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return stream_done(s);
}

// Whether some line names rank `rank` among the signallers of a wait ("signalled by rank 0"
// or "... by rank 2, 0").
bool names_signaller(const std::vector<std::string>& lines, int rank) {
  for (const std::string& l : lines) {
    const std::size_t at = l.find("(signalled by rank ");
    if (at == std::string::npos) continue;
    std::string list = l.substr(at + 19, l.find(')', at) - at - 19);
    for (std::size_t p = 0; p <= list.size();) {
      const std::size_t comma = list.find(", ", p);
      const std::string item =
          list.substr(p, comma == std::string::npos ? std::string::npos : comma - p);
      if (item == std::to_string(rank)) return true;
      if (comma == std::string::npos) break;
      p = comma + 2;
    }
  }
  return false;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines)
    out += "\n  " + l;
  return out;
}

// RS at 1 x 2 split over two runners; the same buffers every call (so that calls from the
// second visit of their slot on replay graphs), fresh data per call, a snapshot per call and
// rank in mapped host memory (read while the GPU's queues are held).
class SplitRs {
 public:
  static constexpr int kRanks = 2;
  SplitRs(std::uint64_t seed, bool published, bool graphs)
      : rng_(seed),
        layout_(Topology(1, kRanks), odd_shapes(rng_, 1 + static_cast<int>(rng_() % 4)),
                DType::kBf16, DType::kBf16),
        plan_(layout_, options()),
        seq_(program::rs_call_sequence(
            plan_, {}, program::rs_arena_layout(plan_, program::LandingStyle::kPull))),
        fabric_(fabric_for(seq_)),
        view_a_(*fabric_, {0}),
        view_b_(*fabric_, {1}),
        a_(seq_, view_a_, place(published), runner_options(graphs, nullptr)),
        b_(seq_, view_b_, place(published), runner_options(graphs, &gate_)),
        poison_(out_bytes()) {
    poison_.fill(0xFF);
    bindings_.resize(kRanks);
    for (int r = 0; r < kRanks; ++r) {
      for (int p = 0; p < layout_.param_count(); ++p) {
        const ParamLayout& s = layout_.param(p);
        grads_.push_back(std::make_unique<Dev>(static_cast<std::size_t>(s.rows * s.cols * 2)));
        grads_.back()->fill(0xFF);
        bindings_[static_cast<std::size_t>(r)].tensors.push_back(grads_.back()->get());
      }
      outputs_.push_back(std::make_unique<Dev>(out_bytes()));
      bindings_[static_cast<std::size_t>(r)].output = outputs_.back()->get();
    }
  }

  static RsOptions options() {
    RsOptions o;
    o.round_width = 2;
    o.staging_chunk_elems = 8;  // several fills per call: credits within and across calls
    return o;
  }
  // fabric_for gives every rank counters + kFirstWord + 2 words: the abort word is the one
  // after the counters.
  exec::CudaSequencePlace place(bool published) const {
    exec::CudaSequencePlace p{kRegionOffset, kFirstWord};
    if (published) p.abort_word = kFirstWord + seq_.counters;
    return p;
  }
  CudaSequenceOptions runner_options(bool graphs, const Gate* gate) const {
    CudaSequenceOptions o = gate != nullptr ? gated(*gate, 1) : CudaSequenceOptions{};
    o.replay_graphs = graphs;
    return o;
  }

  std::size_t out_bytes() const { return static_cast<std::size_t>(layout_.shard_elems()) * 4; }
  CudaSequenceRunner& a() { return a_; }
  CudaSequenceRunner& b() { return b_; }
  Gate& gate() { return gate_; }

  // One call's data: sources, the expected outputs, snapshots.
  struct Call {
    std::vector<std::vector<std::unique_ptr<Dev>>> sources;  // [rank][param]
    std::vector<std::unique_ptr<Dev>> snapshot;              // [rank], mapped
    std::vector<std::vector<float>> expected;
  };
  std::unique_ptr<Call> call_data() {
    auto c = std::make_unique<Call>();
    const std::vector<RankGrads> grads = random_grads(rng_, layout_);
    c->sources.resize(kRanks);
    for (int r = 0; r < kRanks; ++r) {
      for (int p = 0; p < layout_.param_count(); ++p) {
        const auto& g = grads[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
        std::vector<std::byte> bytes(g.size() * 2);
        store_values(g, DType::kBf16, bytes);
        c->sources[static_cast<std::size_t>(r)].push_back(std::make_unique<Dev>(bytes.size()));
        c->sources[static_cast<std::size_t>(r)].back()->upload(bytes.data());
      }
      c->snapshot.push_back(std::make_unique<Dev>(out_bytes(), /*mapped=*/true));
      c->snapshot.back()->fill(0xEE);
    }
    std::vector<std::vector<float>> initial(
        kRanks, std::vector<float>(static_cast<std::size_t>(layout_.shard_elems()), 0.0f));
    c->expected = rs_expected(plan_, grads, 1.0f, false, initial);
    return c;
  }

  // The caller's step of one process: its ranks' gradients written, outputs poisoned, the
  // call, the consumer's snapshot.
  void step(bool on_a, const Call& c, cudaStream_t caller) {
    const std::set<int> ranks = on_a ? std::set<int>{0} : std::set<int>{1};
    for (const int r : ranks) {
      const auto ur = static_cast<std::size_t>(r);
      for (std::size_t p = 0; p < c.sources[ur].size(); ++p)
        launch_compute_copy(grads_[ur * c.sources[ur].size() + p]->get(), c.sources[ur][p]->get(),
                            c.sources[ur][p]->bytes(), caller);
      launch_compute_copy(bindings_[ur].output, poison_.get(), out_bytes(), caller);
    }
    (on_a ? a_ : b_).enqueue(bindings_, 1.0f, false, caller);
    for (const int r : ranks)
      launch_compute_copy(c.snapshot[static_cast<std::size_t>(r)]->get(),
                          bindings_[static_cast<std::size_t>(r)].output, out_bytes(), caller);
  }

  // Whether rank r's snapshot of `c` was not taken (still 0xEE), read by the host.
  static bool untouched(const Call& c, int r) {
    return c.snapshot[static_cast<std::size_t>(r)]->count_other_than(0xEE) == 0;
  }
  static bool exact(const Call& c, int r) {
    const auto& want = c.expected[static_cast<std::size_t>(r)];
    std::vector<std::byte> bytes(want.size() * 4);
    std::memcpy(bytes.data(), want.data(), bytes.size());
    return c.snapshot[static_cast<std::size_t>(r)]->equals(bytes);
  }

 private:
  std::mt19937_64 rng_;
  GroupLayout layout_;
  RsPlan plan_;
  CallSequence seq_;
  std::unique_ptr<fabric::VirtualFabric> fabric_;
  FabricView view_a_, view_b_;
  Gate gate_;  // before the runners: B's options point at it
  CudaSequenceRunner a_, b_;
  Dev poison_;
  std::vector<std::unique_ptr<Dev>> grads_, outputs_;
  std::vector<CudaCallBindings> bindings_;
};

class Release : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

// What a test leaves where a release could not drain: its device memory and streams, never
// freed (a free would wait for the held streams), as the runtime leaves them (NOTE [runtime] 5).
void leak(std::unique_ptr<SplitRs> h, std::vector<std::unique_ptr<SplitRs::Call>> calls) {
  static_cast<void>(h.release());
  for (auto& c : calls)
    static_cast<void>(c.release());
}

// NOTE [CUDA call sequences] 5 (a)-(c). Calls 0 .. w - 1 run with the gate open (from Q on as
// replays where graphs are on) and must match bitwise; then calls w and w + 1 are enqueued on
// both runners with B's rank 1 held. A's call w stalls (it needs rank 1's contribution); A is
// released and drains. The gate opens: B's call w + 1 needs A's signals of call w + 1, made
// after the release, so it must never complete (without the abort words A's drained signals
// would complete it on A's garbage); with published words B's call w is held too (its end
// check sees A's word). B's stall names rank 0; B is released; every call it had not
// completed is void, and a call it completed holds the exact sums.
TEST_P(Release, ReleasedRankNeverCompletesAPeersCall) {
  TIDE_REQUIRE_GPU();
  const auto [graphs, published] = GetParam();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (rerun with TIDE_TEST_SEED), published " +
               std::to_string(published) + ", graphs " + std::to_string(graphs));
  auto harness = std::make_unique<SplitRs>(seed, published, graphs);
  SplitRs& h = *harness;
  cudaStream_t sa = nullptr, sb = nullptr;  // leaked with the harness where a release is held
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking));
  const int q = h.a().event_slots();
  const int warm = graphs ? 2 * q + 1 : 3;
  std::vector<std::unique_ptr<SplitRs::Call>> calls;
  // On a failed assertion: open the gate and release both runners before anything is freed;
  // what still cannot drain is leaked, so that no free waits for a held stream.
  struct Unwind {
    std::unique_ptr<SplitRs>& harness;
    std::vector<std::unique_ptr<SplitRs::Call>>& calls;
    cudaStream_t sa, sb;
    ~Unwind() {
      if (!harness || !::testing::Test::HasFailure()) return;
      harness->gate().set(1);
      harness->a().release_waits();
      harness->b().release_waits();
      if (!drains_within(sa, std::chrono::seconds(10)) ||
          !drains_within(sb, std::chrono::seconds(10)))
        leak(std::move(harness), std::move(calls));
    }
  } unwind{harness, calls, sa, sb};
  for (int e = 0; e < warm + 2; ++e)
    calls.push_back(h.call_data());
  for (int e = 0; e < warm; ++e) {
    h.step(true, *calls[static_cast<std::size_t>(e)], sa);
    h.step(false, *calls[static_cast<std::size_t>(e)], sb);
  }
  TIDE_CUDA_CHECK(cudaStreamSynchronize(sa));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(sb));
  for (int e = 0; e < warm; ++e)
    for (int r = 0; r < SplitRs::kRanks; ++r)
      ASSERT_TRUE(SplitRs::exact(*calls[static_cast<std::size_t>(e)], r))
          << "call " << e << " rank " << r << " (two runners, gate open)";
  if (graphs) {
    EXPECT_GT(h.a().graph_launches(), 0);
    EXPECT_GT(h.b().graph_launches(), 0);
  }

  // The slow peer: B's rank 1 held; calls w and w + 1 on both.
  const int w = warm;
  const SplitRs::Call& first = *calls[static_cast<std::size_t>(w)];
  const SplitRs::Call& second = *calls[static_cast<std::size_t>(w + 1)];
  h.gate().set(0);
  h.step(true, first, sa);
  h.step(false, first, sb);
  cudaEvent_t b_first_done = nullptr;  // after B's consumer of call w
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&b_first_done, cudaEventDisableTiming));
  TIDE_CUDA_CHECK(cudaEventRecord(b_first_done, sb));
  h.step(true, second, sa);
  h.step(false, second, sb);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::optional<exec::CudaStalledCall> a_stall =
      h.a().stalled(std::chrono::milliseconds(100));
  ASSERT_TRUE(a_stall.has_value()) << "A's call did not stall behind the held peer";
  EXPECT_EQ(a_stall->call, w);

  // A's watchdog: release; A's streams drain; A's calls w and w + 1 are void.
  h.a().release_waits();
  if (!drains_within(sa, std::chrono::seconds(5))) {
    h.gate().set(1);
    h.b().release_waits();
    const bool drained =
        drains_within(sa, std::chrono::seconds(10)) && drains_within(sb, std::chrono::seconds(10));
    const std::string why =
        "A's release did not drain while B's waits held (one process holds both runners: a "
        "release copy, or a graph's node, shares a hardware queue with a held wait; run with "
        "CUDA_DEVICE_MAX_CONNECTIONS=32); after B's release too: " +
        std::string(drained ? "drained" : "still held");
    if (!drained) leak(std::move(harness), std::move(calls));
    if (graphs) GTEST_SKIP() << why;  // replay graphs place their nodes on queues of their own
    FAIL() << why;
  }
  EXPECT_TRUE(h.a().released());
  EXPECT_EQ(h.a().first_void_call(), w);
  EXPECT_FALSE(h.a().stuck());
  EXPECT_THROW(h.a().enqueue({}, 1.0f, false, sa), CudaError);

  // The peer goes on: it must never complete a call on A's released signals.
  h.gate().set(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const bool first_completed = cudaEventQuery(b_first_done) == cudaSuccess;
  (void)cudaGetLastError();
  EXPECT_FALSE(stream_done(sb)) << "B completed call " << w + 1
                                << " on signals A made after its release";
  for (int r = 1; r < SplitRs::kRanks; ++r) {
    EXPECT_TRUE(SplitRs::untouched(second, r))
        << "rank " << r << "'s consumer of call " << w + 1 << " ran after A's release";
    if (published) {
      EXPECT_TRUE(SplitRs::untouched(first, r))
          << "rank " << r << "'s consumer of call " << w << " ran after A's release";
    } else if (!SplitRs::untouched(first, r)) {  // B's call w needed nothing A sent late
      EXPECT_TRUE(SplitRs::exact(first, r))
          << "rank " << r << " completed call " << w << " with wrong bits after A's release";
    }
  }
  if (published) {
    EXPECT_FALSE(first_completed) << "B's call " << w << " passed its end check";
  }
  const std::optional<exec::CudaStalledCall> b_stall =
      h.b().stalled(std::chrono::milliseconds(100));
  ASSERT_TRUE(b_stall.has_value()) << "B's held call is not reported";
  EXPECT_EQ(b_stall->call, first_completed ? w + 1 : w);
  if (published) {
    ASSERT_FALSE(b_stall->waits.empty());
    EXPECT_NE(b_stall->waits[0].find("rank 0 aborted"), std::string::npos)
        << joined(b_stall->waits);
  } else {
    EXPECT_TRUE(names_signaller(b_stall->waits, 0)) << joined(b_stall->waits);
  }

  // B's watchdog: release; every call B had not completed is void.
  h.b().release_waits();
  if (!drains_within(sb, std::chrono::seconds(10))) {
    leak(std::move(harness), std::move(calls));
    FAIL() << "B's release did not drain";
  }
  EXPECT_EQ(h.b().first_void_call(), first_completed ? w + 1 : w);
  EXPECT_FALSE(h.b().stuck());
  EXPECT_THROW(h.b().enqueue({}, 1.0f, false, sb), CudaError);
  (void)cudaEventDestroy(b_first_done);
  harness.reset();
  (void)cudaStreamDestroy(sa);
  (void)cudaStreamDestroy(sb);
}

INSTANTIATE_TEST_SUITE_P(Words, Release, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

// The runner's checks of a published abort word: it must be a signal word outside the
// sequence's counters.
TEST(Release, AbortWordMustLieOutsideTheCounters) {
  TIDE_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  const GroupLayout layout(Topology(1, 2), odd_shapes(rng, 2), DType::kBf16, DType::kBf16);
  const RsPlan plan(layout, SplitRs::options());
  const CallSequence seq = program::rs_call_sequence(
      plan, {}, program::rs_arena_layout(plan, program::LandingStyle::kPull));
  const auto fabric = fabric_for(seq);
  for (const int word :
       {kFirstWord, kFirstWord + seq.counters - 1, static_cast<int>(fabric->signal_words())}) {
    exec::CudaSequencePlace p{kRegionOffset, kFirstWord};
    p.abort_word = word;
    EXPECT_THROW(CudaSequenceRunner(seq, *fabric, p), InvalidArgument) << "word " << word;
  }
  exec::CudaSequencePlace p{kRegionOffset, kFirstWord};
  p.abort_word = kFirstWord - 1;
  EXPECT_NO_THROW(CudaSequenceRunner(seq, *fabric, p));
}

}  // namespace
}  // namespace tide
