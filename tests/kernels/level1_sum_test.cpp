// Level 1 sum kernel (paper Sec. 4.1): bitwise equality with tide::arith::level1_partial and
// the M = 1 landing rule, on fresh random bf16 and fp32 inputs with NaN, +-inf, subnormals;
// odd widths and pitches, single-element runs, misaligned row starts and source offsets;
// padding written as +0.0f; output poisoned before every run; CTA-count and tuning
// invariance (architecture invariant 2); a CUDA-graph capture and replay.
#include "tide/kernels/level1_sum.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/error.hpp"

namespace tide::kernels {
namespace {

using testing::DeviceBuffer;

enum class Layout { kAligned, kRandom, kTiny, kEmpty };

struct Level1Case {
  std::string name;
  DType dtype = DType::kBf16;
  int rows = 8;
  std::int64_t width = 4096;
  int num_staged = 7;
  bool accumulate = false;
  float alpha = 0.125f;
  int ctas = 4;
  std::int64_t staged_pitch_pad = 0;   // staged_pitch = width + pad
  std::int64_t staged_stride_pad = 0;  // staged_stride = rows * staged_pitch + pad
  std::int64_t out_pitch_pad = 0;
  std::int64_t staged_misalign = 0;  // elements added to the staged base pointer
  std::int64_t out_misalign = 0;
  Layout layout = Layout::kAligned;
  int num_params = 6;
  bool aligned_grads = false;  // gradient bases 16-byte aligned (else misaligned by p % 8)
  Level1Tuning tuning{};
  bool quick = true;  // kept under TIDE_KERNEL_TEST_QUICK=1
};

void PrintTo(const Level1Case& c, std::ostream* os) {
  *os << c.name;
}

// Host copy of one problem: inputs, table, and everything needed to run and check it.
class Level1Problem {
 public:
  explicit Level1Problem(const Level1Case& c, std::uint64_t seed) : c_(c), rng_(seed) {
    esz_ = item_bytes(c.dtype);
    staged_pitch_ = c.width + c.staged_pitch_pad;
    staged_stride_ = c.rows * staged_pitch_ + c.staged_stride_pad;
    out_pitch_ = c.width + c.out_pitch_pad;
    make_runs();
    make_inputs();
    table_ = std::make_unique<Level1SegmentTable>(c.rows, c.width, specs_);
  }

  // Runs the kernel with `ctas` and `tuning` on a freshly poisoned (or freshly initialised,
  // with accumulate) output; returns the out buffer (rows x out_pitch, from the misaligned
  // base).
  std::vector<float> run(int ctas, const Level1Tuning& tuning) {
    upload_out();
    launch_level1_sum(args(ctas), nullptr, tuning);
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    return download_out();
  }

  Level1SumArgs args(int ctas) const {
    Level1SumArgs a;
    a.out = out_dev_->as<float>() + c_.out_misalign;
    a.out_pitch = out_pitch_;
    a.dtype = c_.dtype;
    a.staged = c_.num_staged > 0
                   ? static_cast<const void*>(staged_dev_->as() + c_.staged_misalign * esz_)
                   : nullptr;
    a.num_staged = c_.num_staged;
    a.staged_stride = staged_stride_;
    a.staged_pitch = staged_pitch_;
    a.gradients = grad_ptrs_.data();
    a.num_gradients = static_cast<int>(grad_ptrs_.size());
    a.table = table_->view();
    a.alpha = c_.alpha;
    a.accumulate = c_.accumulate;
    a.ctas = ctas;
    return a;
  }

  // Poisons the output (or restores its initial values, with accumulate).
  void upload_out() {
    out_dev_->upload_at(static_cast<std::size_t>(c_.out_misalign * 4), out_init_.data(),
                        out_init_.size() * 4);
  }
  std::vector<float> download_out() const {
    std::vector<float> got(out_init_.size());
    TIDE_CUDA_CHECK(cudaMemcpy(got.data(), out_dev_->as<float>() + c_.out_misalign, got.size() * 4,
                               cudaMemcpyDeviceToHost));
    return got;
  }

  // Expected out buffer, per NOTE [arithmetic order].
  std::vector<float> reference() const {
    std::vector<float> expect = out_init_;
    std::vector<float> staged(static_cast<std::size_t>(c_.num_staged));
    for (int r = 0; r < c_.rows; ++r) {
      for (std::int64_t col = 0; col < c_.width; ++col) {
        const std::size_t oi = static_cast<std::size_t>(r * out_pitch_ + col);
        const std::size_t ci = static_cast<std::size_t>(r * c_.width + col);
        if (own_param_[ci] < 0) {
          expect[oi] = 0.0f;
          continue;
        }
        for (int k = 0; k < c_.num_staged; ++k) {
          staged[static_cast<std::size_t>(k)] =
              staged_value(c_.staged_misalign + k * staged_stride_ + r * staged_pitch_ + col);
        }
        const float own = grad_value(own_param_[ci], own_src_[ci]);
        const float part = arith::level1_partial(staged, own, c_.alpha);
        const float wave = arith::wave_sum(std::span<const float>(&part, 1));
        expect[oi] = arith::land(out_init_[oi], wave, 0, c_.accumulate);
      }
    }
    return expect;
  }

  std::int64_t out_pitch() const { return out_pitch_; }
  const Level1Case& config() const { return c_; }

 private:
  float staged_value(std::int64_t i) const {
    return c_.dtype == DType::kBf16
               ? arith::bf16_to_float(staged_bf16_[static_cast<std::size_t>(i)])
               : staged_f32_[static_cast<std::size_t>(i)];
  }
  float grad_value(int p, std::int64_t i) const {
    const std::size_t pi = static_cast<std::size_t>(p);
    const std::size_t k = static_cast<std::size_t>(grad_misalign_[pi] + i);
    return c_.dtype == DType::kBf16 ? arith::bf16_to_float(grad_bf16_[pi][k]) : grad_f32_[pi][k];
  }

  void add_run(int r, std::int64_t col, std::int64_t len, int p, std::int64_t src) {
    specs_.push_back(Level1RunSpec{r, col, len, p, src});
    for (std::int64_t i = 0; i < len; ++i) {
      const std::size_t ci = static_cast<std::size_t>(r * c_.width + col + i);
      own_param_[ci] = p;
      own_src_[ci] = src + i;
    }
  }

  void make_runs() {
    const std::size_t cells = static_cast<std::size_t>(c_.rows * c_.width);
    own_param_.assign(cells, -1);
    own_src_.assign(cells, 0);
    grad_len_.assign(static_cast<std::size_t>(c_.num_params), 0);
    std::uniform_int_distribution<int> pick_param(0, c_.num_params - 1);
    for (int r = 0; r < c_.rows && c_.layout != Layout::kEmpty; ++r) {
      std::int64_t col = 0;
      if (c_.layout == Layout::kAligned) {
        // Parameter shards back to back, 16-byte aligned, a short padded tail.
        const std::int64_t covered = c_.width - std::min<std::int64_t>(c_.width / 16, 40);
        while (col < covered) {
          std::int64_t len = 64 * (1 + static_cast<std::int64_t>(rng_() % 96));
          len = std::min(len, covered - col);
          const int p = pick_param(rng_);
          std::int64_t& end = grad_len_[static_cast<std::size_t>(p)];
          const std::int64_t src = (end + 7) / 8 * 8;
          end = src + len;
          add_run(r, col, len, p, src);
          col += len;
        }
      } else {
        const std::int64_t max_len = c_.layout == Layout::kTiny ? 3 : 3000;
        while (col < c_.width) {
          if (rng_() % 4 == 0) col += static_cast<std::int64_t>(rng_() % 6);  // padding gap
          if (col >= c_.width) break;
          const std::int64_t len = std::min<std::int64_t>(
              1 + static_cast<std::int64_t>(rng_() % static_cast<std::uint64_t>(max_len)),
              c_.width - col);
          const int p = pick_param(rng_);
          std::int64_t& end = grad_len_[static_cast<std::size_t>(p)];
          const std::int64_t src = end + static_cast<std::int64_t>(rng_() % 5);  // any offset
          end = src + len;
          add_run(r, col, len, p, src);
          col += len;
        }
      }
    }
  }

  void make_inputs() {
    // Staged: the whole area, padding included, holds random data (stale chunks look so).
    const std::int64_t staged_elems =
        c_.staged_misalign + std::max(c_.num_staged, 1) * staged_stride_;
    if (c_.dtype == DType::kBf16) {
      staged_bf16_.resize(static_cast<std::size_t>(staged_elems));
      for (auto& v : staged_bf16_)
        v = testing::random_bf16(rng_);
    } else {
      staged_f32_.resize(static_cast<std::size_t>(staged_elems));
      for (auto& v : staged_f32_)
        v = testing::random_float(rng_);
    }
    staged_dev_ = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(staged_elems * esz_));
    staged_dev_->upload(c_.dtype == DType::kBf16 ? static_cast<const void*>(staged_bf16_.data())
                                                 : static_cast<const void*>(staged_f32_.data()),
                        static_cast<std::size_t>(staged_elems * esz_));
    // Gradients: one buffer each, base misaligned by p % 8 elements.
    const std::size_t np = static_cast<std::size_t>(c_.num_params);
    grad_bf16_.resize(np);
    grad_f32_.resize(np);
    grad_misalign_.resize(np);
    for (std::size_t p = 0; p < np; ++p) {
      grad_misalign_[p] = c_.aligned_grads ? 0 : static_cast<std::int64_t>(p % 8);
      const std::int64_t n = grad_misalign_[p] + grad_len_[p] + 8;
      if (c_.dtype == DType::kBf16) {
        grad_bf16_[p].resize(static_cast<std::size_t>(n));
        for (auto& v : grad_bf16_[p])
          v = testing::random_bf16(rng_);
      } else {
        grad_f32_[p].resize(static_cast<std::size_t>(n));
        for (auto& v : grad_f32_[p])
          v = testing::random_float(rng_);
      }
      grad_dev_.push_back(std::make_unique<DeviceBuffer>(static_cast<std::size_t>(n * esz_)));
      grad_dev_.back()->upload(c_.dtype == DType::kBf16
                                   ? static_cast<const void*>(grad_bf16_[p].data())
                                   : static_cast<const void*>(grad_f32_[p].data()),
                               static_cast<std::size_t>(n * esz_));
      grad_ptrs_.push_back(grad_dev_.back()->as() + grad_misalign_[p] * esz_);
    }
    // Output: poison everywhere (pitch gaps included); with accumulate, random initial values
    // in the block.
    const std::int64_t out_elems = c_.rows * out_pitch_;
    out_init_.assign(static_cast<std::size_t>(out_elems),
                     std::bit_cast<float>(testing::kPoisonFp32));
    if (c_.accumulate) {
      for (int r = 0; r < c_.rows; ++r) {
        for (std::int64_t col = 0; col < c_.width; ++col) {
          out_init_[static_cast<std::size_t>(r * out_pitch_ + col)] = testing::random_float(rng_);
        }
      }
    }
    out_dev_ =
        std::make_unique<DeviceBuffer>(static_cast<std::size_t>((c_.out_misalign + out_elems) * 4));
  }

  Level1Case c_;
  std::mt19937_64 rng_;
  std::int64_t esz_ = 2;
  std::int64_t staged_pitch_ = 0;
  std::int64_t staged_stride_ = 0;
  std::int64_t out_pitch_ = 0;
  std::vector<Level1RunSpec> specs_;
  std::vector<int> own_param_;
  std::vector<std::int64_t> own_src_;
  std::vector<std::int64_t> grad_len_;
  std::vector<std::int64_t> grad_misalign_;
  std::vector<std::uint16_t> staged_bf16_;
  std::vector<float> staged_f32_;
  std::vector<std::vector<std::uint16_t>> grad_bf16_;
  std::vector<std::vector<float>> grad_f32_;
  std::vector<float> out_init_;
  std::unique_ptr<DeviceBuffer> staged_dev_;
  std::vector<std::unique_ptr<DeviceBuffer>> grad_dev_;
  std::vector<const void*> grad_ptrs_;
  std::unique_ptr<DeviceBuffer> out_dev_;
  std::unique_ptr<Level1SegmentTable> table_;
};

void expect_bitwise(const std::vector<float>& got, const std::vector<float>& want,
                    std::int64_t pitch, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const std::int64_t i =
      testing::first_bit_difference(got.data(), want.data(), static_cast<std::int64_t>(got.size()));
  if (i >= 0) {
    std::int64_t bad = 0;
    for (std::size_t k = 0; k < got.size(); ++k) {
      bad += std::bit_cast<std::uint32_t>(got[k]) != std::bit_cast<std::uint32_t>(want[k]);
    }
    FAIL() << what << ": " << bad << " elements differ; first at row " << i / pitch << ", column "
           << i % pitch << ": got " << testing::bits_hex(got[static_cast<std::size_t>(i)])
           << ", want " << testing::bits_hex(want[static_cast<std::size_t>(i)]);
  }
}

class Level1SumTest : public ::testing::TestWithParam<Level1Case> {};

TEST_P(Level1SumTest, BitwiseEqualToReference) {
  TIDE_REQUIRE_GPU();
  const Level1Case& c = GetParam();
  if (testing::quick_mode() && !c.quick) GTEST_SKIP() << "large case skipped in quick mode";
  for (std::uint64_t seed : {1u, 2u}) {
    Level1Problem prob(c, 0x7E1D0000u + seed * 7919u + std::hash<std::string>{}(c.name));
    const std::vector<float> want = prob.reference();
    const std::vector<float> got = prob.run(c.ctas, c.tuning);
    expect_bitwise(got, want, prob.out_pitch(), c.name + " seed " + std::to_string(seed));
  }
}

std::vector<Level1Case> level1_cases() {
  std::vector<Level1Case> cases;
  for (DType dt : {DType::kBf16, DType::kFp32}) {
    for (bool acc : {false, true}) {
      const std::string sfx =
          std::string(dt == DType::kBf16 ? "_bf16" : "_fp32") + (acc ? "_acc" : "");
      for (int ns : {0, 1, 3, 7}) {
        Level1Case c;
        c.name = "aligned_L" + std::to_string(ns + 1) + sfx;
        c.dtype = dt;
        c.accumulate = acc;
        c.num_staged = ns;
        c.width = 20000;
        c.ctas = 4;
        c.alpha = ns == 3 ? 1.0f : 0.125f;
        cases.push_back(c);
      }
      {
        Level1Case c;  // odd everything
        c.name = "odd" + sfx;
        c.dtype = dt;
        c.accumulate = acc;
        c.rows = 3;
        c.width = 1001;
        c.num_staged = 5;
        c.staged_pitch_pad = 3;
        c.staged_stride_pad = 1;
        c.out_pitch_pad = 5;
        c.staged_misalign = 1;
        c.out_misalign = 1;
        c.layout = Layout::kRandom;
        c.alpha = 0.37f;
        c.ctas = 3;
        cases.push_back(c);
      }
      {
        Level1Case c;  // many tiny runs: > 32 per row, search and cursor
        c.name = "tiny_runs" + sfx;
        c.dtype = dt;
        c.accumulate = acc;
        c.rows = 5;
        c.width = 3001;
        c.num_staged = 7;
        c.staged_pitch_pad = 1;
        c.layout = Layout::kTiny;
        c.num_params = 256;
        c.ctas = 2;
        c.tuning.tile_bytes = 512;
        cases.push_back(c);
      }
      {
        Level1Case c;  // one element
        c.name = "one_element" + sfx;
        c.dtype = dt;
        c.accumulate = acc;
        c.rows = 1;
        c.width = 1;
        c.num_staged = 2;
        c.layout = Layout::kRandom;
        c.ctas = 8;
        cases.push_back(c);
      }
      {
        Level1Case c;  // all padding
        c.name = "empty_table" + sfx;
        c.dtype = dt;
        c.accumulate = acc;
        c.rows = 2;
        c.width = 77;
        c.num_staged = 7;
        c.layout = Layout::kEmpty;
        c.ctas = 1;
        cases.push_back(c);
      }
      {
        Level1Case c;  // large, random layout, odd pitches, 32 CTAs
        c.name = "large_random" + sfx;
        c.dtype = dt;
        c.accumulate = acc;
        c.rows = 8;
        c.width = 150001;
        c.num_staged = 7;
        c.staged_pitch_pad = 7;
        c.out_pitch_pad = 2;
        c.layout = Layout::kRandom;
        c.num_params = 40;
        c.ctas = 32;
        c.quick = false;
        cases.push_back(c);
      }
    }
  }
  for (DType dt : {DType::kBf16, DType::kFp32}) {
    for (bool acc : {false, true}) {
      for (Layout lay : {Layout::kRandom, Layout::kAligned, Layout::kTiny}) {
        Level1Case c;  // warp-direct kernel: no shared memory, every input loaded directly
        c.name = std::string("warp_direct_") +
                 (lay == Layout::kRandom    ? "random"
                  : lay == Layout::kAligned ? "aligned"
                                            : "tiny") +
                 (dt == DType::kBf16 ? "_bf16" : "_fp32") + (acc ? "_acc" : "");
        c.dtype = dt;
        c.rows = lay == Layout::kTiny ? 3 : 6;
        c.width = lay == Layout::kAligned ? 20000 : 3001;
        c.num_staged = acc ? 7 : 5;
        c.staged_pitch_pad = lay == Layout::kAligned ? 0 : 5;
        c.staged_misalign = lay == Layout::kAligned ? 0 : 1;
        c.out_misalign = lay == Layout::kAligned ? 0 : 1;
        c.layout = lay;
        c.accumulate = acc;
        c.num_params = lay == Layout::kTiny ? 256 : 6;
        c.ctas = 3;
        c.tuning.warp_direct = true;
        cases.push_back(c);
      }
    }
  }
  // The warp-direct fast path (whole tiles inside one run, 16-byte aligned; its specialised
  // kernels for L = 8 and alpha == 1, and a value no arithmetic touched at L = 1, alpha == 1,
  // whose NaN payloads must still be canonicalised), next to its general path at run ends;
  // at L = 8 in bf16 without accumulate its deeper kernel (8 warps, 4 chunks in flight).
  for (DType dt : {DType::kBf16, DType::kFp32}) {
    for (bool acc : {false, true}) {
      for (int ns : {0, 3, 7}) {
        for (float alpha : {1.0f, 0.375f}) {
          Level1Case c;
          c.name = "warp_fast_L" + std::to_string(ns + 1) + (alpha == 1.0f ? "_alpha1" : "") +
                   (dt == DType::kBf16 ? "_bf16" : "_fp32") + (acc ? "_acc" : "");
          c.dtype = dt;
          c.rows = 4;
          c.width = 40000;
          c.num_staged = ns;
          c.alpha = alpha;
          c.accumulate = acc;
          c.layout = Layout::kAligned;
          c.aligned_grads = true;
          c.ctas = 2;
          c.tuning.warp_direct = true;
          cases.push_back(c);
          if (dt == DType::kFp32) {  // fp32 inputs at 8 warps a CTA (255 registers a thread)
            c.name += "_8warps";
            c.tuning.direct_warps = 8;
            cases.push_back(c);
          }
        }
      }
    }
  }
  for (int stages : {2, 4}) {
    Level1Case c;
    c.name = "stages" + std::to_string(stages);
    c.width = 9000;
    c.layout = Layout::kRandom;
    c.tuning.stages = stages;
    c.tuning.consumer_warps = stages == 2 ? 3 : 12;
    c.tuning.tile_bytes = stages == 2 ? 1024 : 16384;
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, Level1SumTest, ::testing::ValuesIn(level1_cases()),
                         [](const ::testing::TestParamInfo<Level1Case>& param_info) {
                           return param_info.param.name;
                         });

// Invariant 2: CTA counts and pipeline tuning do not change a bit.
TEST(Level1Sum, CtaCountAndTuningInvariance) {
  TIDE_REQUIRE_GPU();
  Level1Case c;
  c.name = "invariance";
  c.width = testing::quick_mode() ? 5000 : 60001;
  c.layout = Layout::kRandom;
  c.accumulate = false;
  Level1Problem prob(c, 99);
  const std::vector<float> want = prob.reference();
  struct Variant {
    int ctas;
    Level1Tuning t;
  };
  // {ctas, {stages, tile_bytes, consumer_warps, warp_direct}}
  std::vector<Variant> variants = {{1, {}},
                                   {2, {}},
                                   {5, {}},
                                   {32, {}},
                                   {132, {}},
                                   {1000, {}},
                                   {4, {2, 2048, 4}},
                                   {4, {4, 4096, 12}},
                                   {7, {3, 512, 1}},
                                   {4, {3, 8192, 8, true}},
                                   {1, {3, 8192, 8, true}},
                                   {9, {3, 8192, 8, true}},
                                   {33, {3, 8192, 8, true}},
                                   {200, {3, 8192, 8, true}}};
  for (const Variant& v : variants) {
    const std::vector<float> got = prob.run(v.ctas, v.t);
    expect_bitwise(got, want, prob.out_pitch(),
                   "ctas " + std::to_string(v.ctas) + " stages " + std::to_string(v.t.stages) +
                       " tile " + std::to_string(v.t.tile_bytes) + " warps " +
                       std::to_string(v.t.consumer_warps));
  }
}

// Habit 10: capture a launch in a CUDA graph and replay it.
TEST(Level1Sum, GraphCaptureAndReplay) {
  TIDE_REQUIRE_GPU();
  Level1Case c;
  c.name = "graph";
  c.width = 3000;
  c.layout = Layout::kRandom;
  Level1Problem prob(c, 5);
  const std::vector<float> want = prob.reference();
  const std::vector<float> direct = prob.run(4, {});
  expect_bitwise(direct, want, prob.out_pitch(), "direct");
  cudaStream_t stream = nullptr;
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  TIDE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  launch_level1_sum(prob.args(4), stream);
  TIDE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  TIDE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    prob.upload_out();
    TIDE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(stream));
    expect_bitwise(prob.download_out(), want, prob.out_pitch(),
                   "graph replay " + std::to_string(replay));
  }
  TIDE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  TIDE_CUDA_CHECK(cudaGraphDestroy(graph));
  TIDE_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Argument validation happens before any CUDA call, so these run without a GPU.
TEST(Level1SumArgs, RejectsBadArguments) {
  Level1SumArgs a;
  a.table.rows = 8;
  a.table.width = 100;
  float dummy[4] = {};
  a.out = dummy;
  a.out_pitch = 100;
  a.num_staged = 8;
  EXPECT_THROW(launch_level1_sum(a, nullptr), InvalidArgument);
  a.num_staged = 0;
  a.out_pitch = 99;
  EXPECT_THROW(launch_level1_sum(a, nullptr), InvalidArgument);
  a.out_pitch = 100;
  a.ctas = 0;
  EXPECT_THROW(launch_level1_sum(a, nullptr), InvalidArgument);
  a.ctas = 4;
  // Pipeline shapes outside its limits (checked before any CUDA call).
  Level1Tuning t;
  t.consumer_warps = 13;
  EXPECT_THROW(launch_level1_sum(a, nullptr, t), InvalidArgument);
  t.consumer_warps = 8;
  t.stages = 5;
  EXPECT_THROW(launch_level1_sum(a, nullptr, t), InvalidArgument);
  t.stages = 3;
  t.tile_bytes = 3000;
  EXPECT_THROW(launch_level1_sum(a, nullptr, t), InvalidArgument);
  t.tile_bytes = 8192;
  t.warp_direct = true;
  t.direct_warps = 8;  // 8 warps only for fp32 inputs
  a.dtype = DType::kBf16;
  EXPECT_THROW(launch_level1_sum(a, nullptr, t), InvalidArgument);
  t.direct_warps = 12;
  a.dtype = DType::kFp32;
  EXPECT_THROW(launch_level1_sum(a, nullptr, t), InvalidArgument);
  t = Level1Tuning{};
  a.table.rows = 9;
  EXPECT_THROW(launch_level1_sum(a, nullptr), InvalidArgument);
  a.table.rows = 8;
  a.num_staged = 2;
  a.staged = nullptr;
  EXPECT_THROW(launch_level1_sum(a, nullptr), InvalidArgument);
}

TEST(Level1SumArgs, RecommendedTuning) {
  EXPECT_TRUE(recommended_level1_tuning(4).warp_direct);
  EXPECT_TRUE(recommended_level1_tuning(32).warp_direct);
  EXPECT_FALSE(recommended_level1_tuning(132).warp_direct);
}

TEST(Level1SegmentTableArgs, RejectsBadRuns) {
  const std::vector<Level1RunSpec> overlap = {{0, 0, 10, 0, 0}, {0, 5, 10, 1, 0}};
  EXPECT_THROW(Level1SegmentTable(1, 100, overlap), InvalidArgument);
  const std::vector<Level1RunSpec> outside = {{0, 95, 10, 0, 0}};
  EXPECT_THROW(Level1SegmentTable(1, 100, outside), InvalidArgument);
  const std::vector<Level1RunSpec> bad_param = {{0, 0, 10, 256, 0}};
  EXPECT_THROW(Level1SegmentTable(1, 100, bad_param), InvalidArgument);
  const std::vector<Level1RunSpec> bad_row = {{1, 0, 10, 0, 0}};
  EXPECT_THROW(Level1SegmentTable(1, 100, bad_row), InvalidArgument);
  EXPECT_THROW(Level1SegmentTable(9, 100, {}), InvalidArgument);
}

}  // namespace
}  // namespace tide::kernels
