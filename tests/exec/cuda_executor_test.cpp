// The CUDA executor and the virtual fabric: TIDE-AG and TIDE-RS programs run on one
// GPU with N virtual ranks, every output compared bit for bit with the CPU reference executor
// on the same random inputs; repeated runs identical; a wait that can never be satisfied
// fails with a timeout naming it. GPU cases skip with a reason without a GPU; the checks a
// program passes before any GPU work run everywhere.
#include "tide/exec/cuda_executor.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/gpu_test_util.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/error.hpp"
#include "tide/core/models.hpp"
#include "tide/exec/reference_executor.hpp"
#include "tide/fabric/virtual_fabric.hpp"
#include "tide/program/ag_builder.hpp"
#include "tide/program/rs_builder.hpp"
#include "tide/program/training_step.hpp"
#include "tide/testing/cases.hpp"

namespace tide {
namespace {

using exec::CudaExecutor;
using exec::CudaExecutorOptions;
using exec::CudaRunOptions;
using exec::ReferenceExecutor;
using fabric::VirtualFabric;
using program::Buffer;
using program::Op;
using program::OpKind;
using program::Program;
using program::Region;
using program::Space;

using Case = testing::CollectiveCase;
using Input = testing::CaseInput;
using Check = testing::CaseCheck;
using testing::bytes_of;
using testing::kPoison;
using testing::random_shapes;

void reference_outputs(const Case& c, std::vector<std::vector<std::byte>>* out) {
  *out = testing::reference_outputs(c);
}

// Poisons every buffer, uploads the inputs, runs, and returns the checked regions.
std::vector<std::vector<std::byte>> cuda_outputs(const Case& c, CudaExecutor& ex) {
  const Program& p = c.program;
  for (int r = 0; r < p.ranks; ++r) {
    const program::BufferSizes& s = p.buffers[static_cast<std::size_t>(r)];
    ex.fill(Buffer{r, Space::kArena, 0}, kPoison);
    for (std::size_t i = 0; i < s.tensor_bytes.size(); ++i)
      ex.fill(Buffer{r, Space::kTensor, static_cast<int>(i)}, kPoison);
    for (std::size_t i = 0; i < s.output_bytes.size(); ++i)
      ex.fill(Buffer{r, Space::kOutput, static_cast<int>(i)}, kPoison);
  }
  for (const Input& in : c.inputs)
    ex.upload(in.buffer, in.bytes, in.offset);
  CudaRunOptions options;
  options.timeout_s = 30.0;
  ex.run(options);
  std::vector<std::vector<std::byte>> out;
  for (const Check& k : c.checks) {
    const std::vector<std::byte> all = ex.download(k.buffer);
    const auto n =
        static_cast<std::size_t>(k.bytes < 0 ? static_cast<std::int64_t>(all.size()) : k.bytes);
    out.emplace_back(all.begin() + k.offset,
                     all.begin() + k.offset + static_cast<std::ptrdiff_t>(n));
  }
  return out;
}

void expect_same(const Case& c, const std::vector<std::vector<std::byte>>& want,
                 const std::vector<std::vector<std::byte>>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].size(), got[i].size());
    for (std::size_t b = 0; b < want[i].size(); ++b) {
      ASSERT_EQ(want[i][b], got[i][b])
          << c.name << " " << what << ": check " << i << " (rank " << c.checks[i].buffer.rank
          << ") differs first at byte " << b;
    }
  }
}

// Runs `c` on the reference and `runs` times on the GPU (one executor; counters carry over
// between runs, NOTE [CUDA executor op mapping]); every checked byte equal every time.
void run_case(const Case& c, int runs = 2, const CudaExecutorOptions& options = {},
              const fabric::VirtualFabricOptions& fabric_options = {}) {
  SCOPED_TRACE(c.name + (options.copy_streams > 1 ? " (copy-engine pool)" : "") +
               (fabric_options.devices.size() > 1 ? " (several GPUs)" : ""));
  std::vector<std::vector<std::byte>> want;
  reference_outputs(c, &want);
  VirtualFabric fab(c.program, fabric_options);
  CudaExecutor ex(c.program, fab, options);
  for (int i = 0; i < runs; ++i) {
    const auto got = cuda_outputs(c, ex);
    expect_same(c, want, got, "run " + std::to_string(i));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// --- Cases --------------------------------------------------------------------------------

Case ag_case(int m, int l, bool cast, std::uint64_t seed, DType dtype = DType::kBf16,
             std::vector<ParamShape> shapes = {}, const std::string& what = "") {
  testing::AgCaseOptions o;
  o.cast = cast;
  o.dtype = dtype;
  o.shapes = std::move(shapes);
  o.what = what;
  return testing::ag_case(m, l, seed, o);
}

Case rs_case(int m, int l, RsMode mode, DType grad, bool accumulate, std::uint64_t seed,
             std::vector<ParamShape> shapes = {}, const std::string& what = "",
             float alpha = 0.0f) {
  testing::RsCaseOptions o;
  o.mode = mode;
  o.grad = grad;
  o.accumulate = accumulate;
  o.shapes = std::move(shapes);
  o.what = what;
  o.alpha = alpha;
  return testing::rs_case(m, l, seed, o);
}

// Every (M, L) with M in 1..16, L in {1, 2, 4, 8}, N = M L <= 16, and 8 x 8.
const std::vector<std::pair<int, int>>& all_topologies() {
  static const std::vector<std::pair<int, int>> t = [] {
    std::vector<std::pair<int, int>> v;
    for (int l : {1, 2, 4, 8}) {
      for (int m = 1; m * l <= 16; ++m)
        v.emplace_back(m, l);
    }
    v.emplace_back(8, 8);
    return v;
  }();
  return t;
}

// A preset group shrunk for the tests: every dimension divided by `factor` (rounded up), so
// the parameter count, order and aspect survive while the bytes fit a CPU reference run.
std::vector<ParamShape> shrunk(const std::vector<ParamShape>& params, std::int64_t factor) {
  std::vector<ParamShape> out = params;
  for (ParamShape& s : out) {
    s.rows = (s.rows + factor - 1) / factor;
    s.cols = (s.cols + factor - 1) / factor;
  }
  return out;
}

// The first-slice subset (N = M L <= 16).
const std::vector<std::pair<int, int>>& topologies() {
  static const std::vector<std::pair<int, int>> t = {{1, 2}, {2, 1}, {2, 2}, {3, 2},
                                                     {1, 8}, {2, 4}, {4, 4}, {2, 8}};
  return t;
}

// A two-rank program built by hand: rank 0 rail-puts its arena bytes into rank 1's arena
// (adding 1 to rank 1's counter 0), rank 1 waits for it and copies them into its output.
Program handmade(bool satisfiable) {
  Program p;
  p.ranks = 2;
  const int s = p.stream("main");
  p.buffers.resize(2);
  for (auto& b : p.buffers) {
    b.arena_bytes = 256;
    b.output_bytes = {128};
  }
  p.counters = 1;
  Op put;
  auto& rail_put = put.payload.emplace<program::RailPutOp>();
  put.rank = 0;
  put.stream = s;
  put.label = "r0 put to r1";
  rail_put.copies.push_back({Region{Buffer{0, Space::kArena, 0}, 0, 128, 128, 1},
                             Region{Buffer{1, Space::kArena, 0}, 128, 128, 128, 1}});
  rail_put.counter = program::Counter{1, 0};
  rail_put.value = 1;
  p.ops.push_back(put);
  Op wait;
  auto& wait_op = wait.payload.emplace<program::WaitOp>();
  wait.rank = 1;
  wait.stream = s;
  wait.label = "r1 wait for the put";
  wait_op.counter = {1, 0};
  wait_op.value = satisfiable ? 1 : 2;
  p.ops.push_back(wait);
  Op copy;
  auto& transfer = copy.payload.emplace<program::CopyOp>();
  copy.rank = 1;
  copy.stream = s;
  copy.label = "r1 copy out";
  transfer.copies.push_back({Region{Buffer{1, Space::kArena, 0}, 128, 32, 64, 2},
                             Region{Buffer{1, Space::kOutput, 0}, 0, 32, 32, 2}});
  p.ops.push_back(copy);
  return p;
}

// --- CPU: checks before any GPU work ---------------------------------------------------------

TEST(CudaExecutorCheck, AcceptsEveryProgramOfTheTests) {
  for (auto [m, l] : topologies()) {
    for (bool cast : {false, true})
      EXPECT_NO_THROW(CudaExecutor::check(ag_case(m, l, cast, 1).program)) << m << "x" << l;
    for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
      for (DType grad : {DType::kBf16, DType::kFp32}) {
        EXPECT_NO_THROW(CudaExecutor::check(rs_case(m, l, mode, grad, true, 2).program))
            << m << "x" << l;
      }
    }
  }
  EXPECT_NO_THROW(CudaExecutor::check(handmade(true)));
}

template <typename E>
void expect_refusal(const Program& p, const std::string& needle) {
  try {
    CudaExecutor::check(p);
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CudaExecutorCheck, RefusesMalformedProgramsNamingTheOp) {
  {
    Program p = handmade(true);
    p.ops[1].as<program::WaitOp>().counter.id = 5;
    expect_refusal<InvalidArgument>(p, "r1 wait for the put");
  }
  {
    Program p = handmade(true);
    p.ops[2].as<program::CopyOp>().copies[0].dst.offset = 120;  // past the 128-byte output
    expect_refusal<InvalidArgument>(p, "past the buffer");
  }
  {
    Program p = handmade(true);
    p.ops[2].as<program::CopyOp>().copies[0].dst.width = 16;
    expect_refusal<InvalidArgument>(p, "differ in shape");
  }
  {
    Program p = handmade(true);
    p.ops[2].as<program::CopyOp>().copies[0].dst =
        Region{Buffer{1, Space::kArena, 0}, 160, 32, 64, 2};
    expect_refusal<Unsupported>(p, "overlap");
  }
  {
    Program p = handmade(true);
    p.events = 1;
    Op w;
    w.payload = program::EventWaitOp{};
    w.rank = 0;
    w.label = "wait for an event nobody records";
    p.ops.push_back(w);
    expect_refusal<InvalidArgument>(p, "is never recorded on rank");
  }
  {
    Program p = handmade(true);
    p.events = 1;
    Op rec;
    rec.payload = program::EventRecordOp{};
    rec.label = "record twice";
    p.ops.push_back(rec);
    p.ops.push_back(rec);
    expect_refusal<InvalidArgument>(p, "already recorded");
  }
  {
    Program p = handmade(true);
    p.buffers.pop_back();
    expect_refusal<InvalidArgument>(p, "sizes buffers for");
  }
}

TEST(VirtualFabricSizes, RefusesBadSizesBeforeTouchingTheGpu) {
  EXPECT_THROW(VirtualFabric::check_sizes({}), InvalidArgument);
  std::vector<program::BufferSizes> sizes(2);
  sizes[1].arena_bytes = -1;
  EXPECT_THROW(VirtualFabric::check_sizes(sizes), InvalidArgument);
  sizes[1].arena_bytes = 0;
  sizes[0].tensor_bytes = {4, -8};
  EXPECT_THROW(VirtualFabric{sizes}, InvalidArgument);
  Program p;
  p.ranks = 3;
  EXPECT_THROW(VirtualFabric{p}, InvalidArgument);
}

// --- GPU -------------------------------------------------------------------------------------

TEST(VirtualFabric, SymmetricArenasFromOneVmmAllocation) {
  TIDE_REQUIRE_GPU();
  std::vector<program::BufferSizes> sizes(5);
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    sizes[r].arena_bytes = 1000 + static_cast<std::int64_t>(r) * 3'000'000;
    sizes[r].tensor_bytes = {40, 0, 8};
    sizes[r].output_bytes = {64};
  }
  VirtualFabric fab(sizes);
  EXPECT_EQ(fab.ranks(), 5);
  EXPECT_EQ(fab.arena_stride() % (std::int64_t{2} << 20), 0);
  EXPECT_GE(fab.arena_stride(), 1000 + 4 * 3'000'000);
  EXPECT_EQ(fab.vmm_bytes(), 5 * fab.arena_stride());
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(static_cast<char*>(fab.arena(r)) - static_cast<char*>(fab.arena(0)),
              r * fab.arena_stride());
    EXPECT_EQ(fab.peer_arena((r + 1) % 5, r), fab.arena(r));
    EXPECT_EQ(fab.pointer(Buffer{r, Space::kTensor, 1}), nullptr);
    EXPECT_NE(fab.pointer(Buffer{r, Space::kTensor, 2}), nullptr);
  }
  EXPECT_EQ(fab.buffer_bytes(), 5 * (40 + 8 + 64));
  EXPECT_THROW((void)fab.pointer(Buffer{5, Space::kArena, 0}), InvalidArgument);
  EXPECT_THROW((void)fab.pointer(Buffer{0, Space::kTensor, 3}), InvalidArgument);
  // The whole arena is writable and readable by the device (last byte of the last rank).
  const std::byte b{0x5A};
  TIDE_CUDA_CHECK(cudaMemcpy(static_cast<std::byte*>(fab.arena(4)) + fab.arena_stride() - 1, &b, 1,
                             cudaMemcpyHostToDevice));
  std::byte back{0};
  TIDE_CUDA_CHECK(cudaMemcpy(&back, static_cast<std::byte*>(fab.arena(4)) + fab.arena_stride() - 1,
                             1, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, b);
}

TEST(CudaExecutor, HandmadeRailPutWaitCopyMatchesReference) {
  TIDE_REQUIRE_GPU();
  Case c;
  c.name = "handmade";
  c.program = handmade(true);
  std::vector<std::byte> bytes(128);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<std::byte>(i * 7 + 1);
  c.inputs.push_back({Buffer{0, Space::kArena, 0}, 0, bytes});
  c.checks.push_back({Buffer{1, Space::kOutput, 0}, 0, -1});
  run_case(c);
}

// One rank, one copy op of four descriptors: a 1-D copy, a short 2-D copy, a long 2-D copy,
// and a 1-D copy reading the first one's source again.
Case copy_forms_case() {
  Program p;
  p.ranks = 1;
  const int s = p.stream("main");
  p.buffers.resize(1);
  p.buffers[0].arena_bytes = 4096;
  p.buffers[0].output_bytes = {4608};
  Op copy;
  auto& transfer = copy.payload.emplace<program::CopyOp>();
  copy.rank = 0;
  copy.stream = s;
  copy.label = "four forms";
  const Buffer arena{0, Space::kArena, 0}, out{0, Space::kOutput, 0};
  transfer.copies.push_back({Region{arena, 0, 100, 100, 1}, Region{out, 0, 100, 100, 1}});
  transfer.copies.push_back({Region{arena, 200, 24, 40, 10}, Region{out, 128, 24, 24, 10}});
  transfer.copies.push_back({Region{arena, 1024, 16, 32, 80}, Region{out, 512, 16, 48, 80}});
  transfer.copies.push_back({Region{arena, 0, 100, 100, 1}, Region{out, 4400, 100, 100, 1}});
  p.ops.push_back(copy);
  Case c;
  c.name = "copy forms";
  c.program = p;
  std::vector<std::byte> bytes(4096);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<std::byte>(i * 13 + 5);
  c.inputs.push_back({arena, 0, bytes});
  c.checks.push_back({out, 0, -1});
  return c;
}

TEST(CudaExecutorCheck, AcceptsTheCopyFormsProgram) {
  const Case c = copy_forms_case();
  EXPECT_NO_THROW(CudaExecutor::check(c.program));
  std::vector<std::vector<std::byte>> want;
  reference_outputs(c, &want);  // the reference runs it clean
}

// Each descriptor is one copy call: cudaMemcpyAsync (1-D) or cudaMemcpy2DAsync (2-D).
TEST(CudaExecutor, CopyFormsMatchReference) {
  TIDE_REQUIRE_GPU();
  const Case c = copy_forms_case();
  run_case(c, 2);
  VirtualFabric fab(c.program);
  CudaExecutor ex(c.program, fab);
  const exec::CudaRunResult r = ex.run();
  EXPECT_EQ(r.copies, 4);
  EXPECT_EQ(r.copy_calls, 4);
}

TEST(CudaExecutor, AgMatchesReferenceBitwise) {
  TIDE_REQUIRE_GPU();
  std::uint64_t seed = 100;
  for (auto [m, l] : topologies()) {
    for (bool cast : {false, true})
      run_case(ag_case(m, l, cast, ++seed));
  }
}

TEST(CudaExecutor, RsInPlaceAndSlotReuseMatchReferenceBitwise) {
  TIDE_REQUIRE_GPU();
  std::uint64_t seed = 200;
  for (auto [m, l] : topologies()) {
    for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse})
      run_case(rs_case(m, l, mode, DType::kBf16, false, ++seed));
  }
}

// NOTE [one-node TIDE-RS]: In-Place on one node, the Level 1 kernel summing into the output
// with alpha and accumulate (padding +0), bitwise against the reference executor.
TEST(CudaExecutor, OneNodeInPlaceSumsIntoTheOutputBitwise) {
  TIDE_REQUIRE_GPU();
  std::uint64_t seed = 700;
  for (int l : {2, 4, 8}) {
    for (DType grad : {DType::kBf16, DType::kFp32}) {
      for (bool accumulate : {false, true}) {
        testing::RsCaseOptions o;
        o.mode = RsMode::kInPlace;
        o.grad = grad;
        o.accumulate = accumulate;
        o.one_node = true;
        o.alpha = accumulate ? 0.375f : 0.0f;
        run_case(testing::rs_case(1, l, ++seed, o));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The one-node cases below pass the executor's checks and run clean on the reference executor
// (its race detector), before any GPU work: every L, both Slot-Reuse programs, staged AG.
TEST(CudaExecutorCheck, AcceptsTheOneNodeProgramsAndTheReferenceRunsThemClean) {
  std::uint64_t seed = 900;
  for (int l : {2, 4, 8}) {
    for (int variant = 0; variant < 3; ++variant) {
      testing::RsCaseOptions o;
      o.mode = variant == 0 ? RsMode::kInPlace : RsMode::kSlotReuse;
      o.one_node = true;
      o.one_node_pull = variant == 1;
      o.accumulate = true;
      o.alpha = 0.625f;
      const Case c = testing::rs_case(1, l, ++seed, o);
      EXPECT_NO_THROW(CudaExecutor::check(c.program)) << c.name;
      std::vector<std::vector<std::byte>> want;
      EXPECT_NO_THROW(reference_outputs(c, &want)) << c.name;
      EXPECT_EQ(want.size(), static_cast<std::size_t>(l)) << c.name;
    }
    testing::AgCaseOptions ag;
    ag.staged = true;
    const Case c = testing::ag_case(1, l, ++seed, ag);
    EXPECT_NO_THROW(CudaExecutor::check(c.program)) << c.name;
    std::vector<std::vector<std::byte>> want;
    EXPECT_NO_THROW(reference_outputs(c, &want)) << c.name;
    EXPECT_EQ(want.size(), static_cast<std::size_t>(l)) << c.name;
  }
}

// NOTE [one-node TIDE-RS]: Slot-Reuse on one node, both programs: the owners pull their rows
// from the peers' gradient areas (RsOptions::one_node_pull), and the peers push from where the
// gradients lie (the runtime's variant: its adapter moved them into the vacated slot). bf16 and
// fp32 gradients, with and without accumulate, alpha = 1/N or a random alpha; bitwise against
// the reference executor, two runs on one executor (counters carry over).
TEST(CudaExecutor, OneNodeSlotReusePullAndPushFromSlotBitwise) {
  TIDE_REQUIRE_GPU();
  const std::uint64_t seed0 = 750;
  SCOPED_TRACE("seeds from " + std::to_string(seed0));
  std::uint64_t seed = seed0;
  std::mt19937_64 rng(seed0);
  for (int l : {2, 4, 8}) {
    for (bool pull : {true, false}) {
      for (DType grad : {DType::kBf16, DType::kFp32}) {
        for (bool accumulate : {false, true}) {
          testing::RsCaseOptions o;
          o.mode = RsMode::kSlotReuse;
          o.grad = grad;
          o.accumulate = accumulate;
          o.one_node = true;
          o.one_node_pull = pull;
          o.alpha = accumulate ? 0.25f + static_cast<float>(rng() % 97) / 64.0f : 0.0f;
          run_case(testing::rs_case(1, l, ++seed, o));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// The one-node programs on larger groups (several chunks per owner, the staging ring reused
// within the call): a shrunk Llama-3.1-8B layer, In-Place and both Slot-Reuse programs.
TEST(CudaExecutor, OneNodeShrunkPresetLayerEveryProgramBitwise) {
  TIDE_REQUIRE_GPU();
  const std::vector<ParamShape> layer = shrunk(find_model_group("llama3.1-8b").params, 32);
  std::uint64_t seed = 780;
  for (int l : {2, 4, 8}) {
    for (int variant = 0; variant < 3; ++variant) {
      testing::RsCaseOptions o;
      o.mode = variant == 0 ? RsMode::kInPlace : RsMode::kSlotReuse;
      o.one_node = true;
      o.one_node_pull = variant == 1;
      o.accumulate = variant != 0;
      o.alpha = 0.8125f;
      o.shapes = layer;
      o.what = " llama3.1-8b/32";
      run_case(testing::rs_case(1, l, ++seed, o));
      if (HasFatalFailure()) return;
    }
  }
}

// NOTE [one-node TIDE-AG]: staged shards at M = 1 (the cast is in AgEveryTopologyBf16Fp32Cast):
// bf16 and fp32, each rank's rows copied into its landing slot and pushed to the peers.
TEST(CudaExecutor, OneNodeAgStagedShardsBitwise) {
  TIDE_REQUIRE_GPU();
  std::uint64_t seed = 800;
  for (int l : {2, 4, 8}) {
    for (DType dtype : {DType::kBf16, DType::kFp32}) {
      testing::AgCaseOptions o;
      o.staged = true;
      o.dtype = dtype;
      run_case(testing::ag_case(1, l, ++seed, o));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(CudaExecutor, RsFp32GradientsAndAccumulate) {
  TIDE_REQUIRE_GPU();
  run_case(rs_case(2, 4, RsMode::kInPlace, DType::kFp32, false, 301));
  run_case(rs_case(3, 2, RsMode::kSlotReuse, DType::kBf16, true, 302));
  run_case(rs_case(2, 8, RsMode::kSlotReuse, DType::kFp32, true, 303));
}

// --- Coverage -----------------------------------------------------------------------------------

TEST(CudaExecutorCheck, AcceptsEveryTopologyUpTo16And8x8) {
  for (auto [m, l] : all_topologies()) {
    EXPECT_NO_THROW(CudaExecutor::check(ag_case(m, l, m % 2 == 0, 7).program)) << m << "x" << l;
    EXPECT_NO_THROW(CudaExecutor::check(ag_case(m, l, false, 8, DType::kFp32).program))
        << m << "x" << l;
    for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse})
      EXPECT_NO_THROW(CudaExecutor::check(rs_case(m, l, mode, DType::kFp32, true, 9).program))
          << m << "x" << l;
  }
}

// TIDE-AG for every (M, L) with N <= 16 and 8 x 8: bf16 (with and without the fp32 -> bf16
// cast) and an fp32 all-gather, random odd shapes.
TEST(CudaExecutor, AgEveryTopologyBf16Fp32Cast) {
  TIDE_REQUIRE_GPU();
  std::uint64_t seed = 1000;
  for (auto [m, l] : all_topologies()) {
    run_case(ag_case(m, l, false, ++seed));
    run_case(ag_case(m, l, true, ++seed));
    run_case(ag_case(m, l, false, ++seed, DType::kFp32));
    if (HasFatalFailure()) return;
  }
}

// TIDE-RS In-Place and Slot-Reuse for every (M, L) with N <= 16 and 8 x 8, bf16 and fp32
// gradients, with and without accumulate, alpha = 1/N or a random alpha.
TEST(CudaExecutor, RsEveryTopologyModesDtypesAccumulateAlpha) {
  TIDE_REQUIRE_GPU();
  std::uint64_t seed = 2000;
  std::mt19937_64 rng(77);
  int k = 0;
  for (auto [m, l] : all_topologies()) {
    for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
      for (DType grad : {DType::kBf16, DType::kFp32}) {
        const bool accumulate = (k++ % 2) == 1;
        const float alpha = (k % 3 == 0) ? 0.37f + static_cast<float>(rng() % 100) / 64.0f : 0.0f;
        run_case(rs_case(m, l, mode, grad, accumulate, ++seed, {}, "", alpha));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Random odd shapes, more parameters (P up to 40, rows up to 301, cols up to 17) on a few
// topologies.
TEST(CudaExecutor, RandomOddShapesManyParameters) {
  TIDE_REQUIRE_GPU();
  std::mt19937_64 rng(4242);
  auto odd_shapes = [&](int count) {
    std::vector<ParamShape> v(static_cast<std::size_t>(count));
    for (ParamShape& s : v) {
      s.rows = static_cast<std::int64_t>(rng() % 301) + 1;
      s.cols = static_cast<std::int64_t>(rng() % 17) + 1;
    }
    return v;
  };
  std::uint64_t seed = 3000;
  for (auto [m, l] : std::vector<std::pair<int, int>>{{3, 4}, {5, 2}, {2, 8}, {8, 8}, {7, 1}}) {
    const int p = 16 + static_cast<int>(rng() % 25);
    run_case(ag_case(m, l, false, ++seed, DType::kBf16, odd_shapes(p), " odd P"));
    run_case(ag_case(m, l, true, ++seed, DType::kBf16, odd_shapes(p), " odd P"));
    run_case(rs_case(m, l, RsMode::kInPlace, DType::kBf16, false, ++seed, odd_shapes(p), " odd P"));
    run_case(rs_case(m, l, RsMode::kSlotReuse, DType::kFp32, true, ++seed, odd_shapes(p), " odd P",
                     0.5f));
    if (HasFatalFailure()) return;
  }
}

// Every group of every model preset, shrunk 64x per dimension (same parameter count and
// order; the unshrunk layers need gigabytes per rank and minutes of CPU reference), at 2 x 2
// and 1 x 8.
TEST(CudaExecutor, ModelPresetGroupsShrunk) {
  TIDE_REQUIRE_GPU();
  std::uint64_t seed = 4000;
  for (const ModelPreset& preset : model_presets()) {
    for (const ModelGroup& group : preset.groups) {
      // Groups above TIDE's limit keep FSDP2's stock collectives (Sec. 2.5).
      if (static_cast<int>(group.params.size()) > kMaxParamsPerGroup) continue;
      const std::vector<ParamShape> shapes = shrunk(group.params, 64);
      const std::string what = " " + preset.name + ":" + group.name + " /64";
      for (auto [m, l] : std::vector<std::pair<int, int>>{{2, 2}, {1, 8}}) {
        run_case(ag_case(m, l, true, ++seed, DType::kBf16, shapes, what));
        run_case(rs_case(m, l, RsMode::kInPlace, DType::kBf16, false, ++seed, shapes, what));
        run_case(rs_case(m, l, RsMode::kSlotReuse, DType::kFp32, true, ++seed, shapes, what));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// A training step (program/training_step.hpp, the runtime's multi-call programs): three
// distinct groups, forward all-gathers then backward all-gathers and reduce-scatters in FSDP2
// order, every call's output on every rank bitwise equal to the reference executor's; three
// runs of one executor identical.
Case step_case(int m, int l, RsMode mode, DType grad, bool accumulate, std::uint64_t seed) {
  testing::StepCaseOptions o;
  o.mode = mode;
  o.grad = grad;
  o.accumulate = accumulate;
  return testing::step_case(m, l, seed, o);
}

TEST(CudaExecutorCheck, AcceptsStepPrograms) {
  EXPECT_NO_THROW(
      CudaExecutor::check(step_case(2, 4, RsMode::kSlotReuse, DType::kFp32, true, 5).program));
}

TEST(CudaExecutor, StepProgramThreeGroupsEveryCallBitwise) {
  TIDE_REQUIRE_GPU();
  run_case(step_case(2, 2, RsMode::kInPlace, DType::kBf16, false, 5001), 3);
  run_case(step_case(2, 4, RsMode::kSlotReuse, DType::kFp32, true, 5002), 3);
  run_case(step_case(3, 2, RsMode::kSlotReuse, DType::kBf16, true, 5003), 3);
  run_case(step_case(1, 8, RsMode::kInPlace, DType::kFp32, false, 5004), 3);
  run_case(step_case(4, 1, RsMode::kInPlace, DType::kBf16, true, 5005), 3);
  run_case(step_case(8, 8, RsMode::kSlotReuse, DType::kBf16, false, 5006), 2);
  run_case(step_case(2, 4, RsMode::kSlotReuse, DType::kFp32, true, 5007), 2);
}

// Many runs of one executor without re-poisoning between runs (counter epochs carry over):
// every run's outputs identical to the first run's.
TEST(CudaExecutor, RepeatedRunsBitwiseIdentical) {
  TIDE_REQUIRE_GPU();
  const Case c = rs_case(2, 4, RsMode::kSlotReuse, DType::kBf16, false, 6001);
  std::vector<std::vector<std::byte>> want;
  reference_outputs(c, &want);
  VirtualFabric fab(c.program);
  CudaExecutor ex(c.program, fab);
  expect_same(c, want, cuda_outputs(c, ex), "first run");
  for (int i = 0; i < 20; ++i) {
    const exec::CudaRunResult r = ex.run();
    EXPECT_FALSE(r.counters_reset);
    std::vector<std::vector<std::byte>> got;
    for (const Check& k : c.checks)
      got.push_back(ex.download(k.buffer));
    expect_same(c, want, got, "repeat " + std::to_string(i));
    if (HasFatalFailure()) return;
  }
  // A profiled run: kernels timed, outputs unchanged.
  CudaRunOptions profiled;
  profiled.profile = true;
  const exec::CudaRunResult r = ex.run(profiled);
  EXPECT_FALSE(r.kernels_timed.empty());
  EXPECT_EQ(r.streams.size() > 0, true);
  for (const auto& k : r.kernels_timed)
    EXPECT_GE(k.ms, 0.0);
  std::vector<std::vector<std::byte>> got;
  for (const Check& k : c.checks)
    got.push_back(ex.download(k.buffer));
  expect_same(c, want, got, "profiled run");
}

TEST(CudaExecutor, UnsatisfiableWaitTimesOutNamingTheWait) {
  TIDE_REQUIRE_GPU();
  const Program p = handmade(false);
  VirtualFabric fab(p);
  CudaExecutor ex(p, fab);
  CudaRunOptions options;
  options.timeout_s = 0.5;
  for (int attempt = 0; attempt < 2; ++attempt) {  // the executor drained and can run again
    try {
      ex.run(options);
      ADD_FAILURE() << "the run completed although its wait can never be satisfied";
    } catch (const exec::ExecutionTimeout& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("r1 wait for the put"), std::string::npos) << what;
      EXPECT_NE(what.find("for counter 0 >= 2, holds 1"), std::string::npos) << what;
    }
  }
}

// Several GPUs of one host: the ranks in consecutive blocks over every GPU,
// arenas mapped for all of them, signals added through peer access; bitwise as on one GPU.
TEST(CudaExecutor, SeveralGpusOfOneHostMatchReferenceBitwise) {
  TIDE_REQUIRE_GPU();
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) GTEST_SKIP() << "one GPU here: the multi-GPU virtual fabric needs two or more";
  fabric::VirtualFabricOptions spread;
  for (int d = 0; d < gpus; ++d)
    spread.devices.push_back(d);
  {
    const Case c = rs_case(2, 4, RsMode::kSlotReuse, DType::kBf16, true, 7001);
    VirtualFabric fab(c.program, spread);
    EXPECT_EQ(fab.device_count(), gpus);
    EXPECT_EQ(fab.device_of(0), 0);
    EXPECT_EQ(fab.device_of(c.program.ranks - 1), gpus - 1);
  }
  std::uint64_t seed = 7100;
  for (auto [m, l] : {std::pair{1, 2}, std::pair{2, 1}, std::pair{2, 4}, std::pair{4, 2},
                      std::pair{3, 2}, std::pair{8, 8}}) {
    run_case(ag_case(m, l, false, ++seed), 2, {}, spread);
    run_case(ag_case(m, l, true, ++seed), 2, {}, spread);
    run_case(rs_case(m, l, RsMode::kInPlace, DType::kBf16, false, ++seed), 2, {}, spread);
    run_case(rs_case(m, l, RsMode::kSlotReuse, DType::kFp32, true, ++seed), 2, {}, spread);
    if (HasFatalFailure()) return;
  }
  run_case(step_case(2, 4, RsMode::kSlotReuse, DType::kFp32, true, 7201), 3, {}, spread);
  run_case(step_case(4, 2, RsMode::kInPlace, DType::kBf16, false, 7202), 3, {}, spread);
  // A profiled run across devices: kernels timed, streams measured from their device's origin.
  const Case c = rs_case(2, 2, RsMode::kInPlace, DType::kBf16, false, 7301);
  VirtualFabric fab(c.program, spread);
  CudaExecutor ex(c.program, fab);
  CudaRunOptions profiled;
  profiled.profile = true;
  const exec::CudaRunResult r = ex.run(profiled);
  EXPECT_FALSE(r.kernels_timed.empty());
  for (const auto& span : r.streams)
    EXPECT_GE(span.end_ms, span.begin_ms);
}

// The copy-engine pool (NOTE [copy-engine pool]): an op's descriptors dealt over several
// streams joined by events; bitwise as with one stream, steps included.
TEST(CudaExecutor, CopyEnginePoolMatchesReferenceBitwise) {
  TIDE_REQUIRE_GPU();
  for (int k : {2, 4}) {
    CudaExecutorOptions pooled;
    pooled.copy_streams = k;
    std::uint64_t seed = 8000 + static_cast<std::uint64_t>(k) * 100;
    for (auto [m, l] : {std::pair{1, 8}, std::pair{2, 4}, std::pair{4, 2}, std::pair{8, 8}}) {
      run_case(ag_case(m, l, false, ++seed), 2, pooled);
      run_case(ag_case(m, l, true, ++seed), 2, pooled);
      run_case(rs_case(m, l, RsMode::kSlotReuse, DType::kBf16, true, ++seed), 2, pooled);
      if (HasFatalFailure()) return;
    }
    run_case(step_case(2, 4, RsMode::kInPlace, DType::kBf16, false, ++seed), 3, pooled);
  }
}

// The executor's own options are checked before any GPU work (a fabric that is never touched).
class UntouchedFabric final : public fabric::Fabric {
 public:
  int ranks() const override { return 2; }
  bool local(int) const override { return true; }
  int device() const override { return 0; }
  void* pointer(const Buffer&) const override { return nullptr; }
  std::int64_t bytes(const Buffer&) const override { return 0; }
  std::uint64_t* signals(int) const override { return nullptr; }
  std::int64_t signal_words() const override { return 0; }
  void release() noexcept override {}
};

TEST(CudaExecutorCheck, RefusesCopyStreamsOutsideOneToSixteen) {
  const Program p = handmade(true);
  UntouchedFabric fab;
  for (int k : {0, 17, -3}) {
    CudaExecutorOptions o;
    o.copy_streams = k;
    try {
      CudaExecutor ex(p, fab, o);
      ADD_FAILURE() << "copy_streams = " << k << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("copy_streams"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tide
