// Level 1 of TIDE-RS (paper Sec. 4.1): the node-local sum kernel and its launcher.
// One launch writes an fp32 block of `rows` (<= 8) by `width` elements:
//     out[r][c] = alpha * (staged[0][r][c] + ... + staged[S-1][r][c] + own[r][c])   (Eq. 5)
// in the order of NOTE [arithmetic order]; S <= 7 staged contributions, the own one read in
// place from the gradients through a segment table; uncovered columns are padding (+0.0f).
// With `accumulate`: out = out + alpha * sum. Also the expert-parallel lane's fixed 8-source
// sum (one row, the arrived inbox blocks staged). Host-compilable (raw pointers, a stream).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tide/core/cta_budgets.hpp"
#include "tide/core/dtype.hpp"

namespace tide::kernels {

inline constexpr int kMaxLevel1Rows = 8;    // L <= 8 destination ranks per node
inline constexpr int kMaxLevel1Staged = 7;  // L - 1 staged contributions
inline constexpr int kMaxLevel1Gradients = 256;
// The planner uses 1..32 sum CTAs (App. G, Eq. 13); the kernel runs on any grid.
inline constexpr int kMaxLevel1Ctas = 1024;

// A run of the own contribution: block columns [dst_col, +length) of one row from elements
// [src_offset, +length) of gradient `param` (24 bytes, device-resident).
struct Level1Run {
  std::int64_t src_offset;
  std::uint32_t dst_col;
  std::uint32_t length;
  std::uint32_t param;
  std::uint32_t reserved;
};
static_assert(sizeof(Level1Run) == 24);

// A run as the planner describes it (host side, any order).
struct Level1RunSpec {
  int row;
  std::int64_t dst_col;
  std::int64_t length;
  int param;
  std::int64_t src_offset;
};

// What a launch needs to know about a registered table: plain data, passed by value.
struct Level1TableView {
  const Level1Run* runs = nullptr;  // device memory, sorted by (row, col)
  std::uint32_t row_begin[kMaxLevel1Rows + 1] =
      {};  // runs of row r: [row_begin[r], row_begin[r+1])
  int rows = 0;
  std::int64_t width = 0;
  int num_params = 0;  // largest param index + 1
};

// Owns a block's segment table on the device (built at registration, Sec. 6). InvalidArgument
// unless every run is inside the block, non-empty, disjoint, param < 256, src_offset >= 0. With
// `upload` the copy is async on it (order view()'s uses after it); else synchronous.
class Level1SegmentTable {
 public:
  Level1SegmentTable(int rows, std::int64_t width, std::span<const Level1RunSpec> runs,
                     std::optional<cudaStream_t> upload = std::nullopt);
  ~Level1SegmentTable();
  Level1SegmentTable(const Level1SegmentTable&) = delete;
  Level1SegmentTable& operator=(const Level1SegmentTable&) = delete;
  Level1SegmentTable(Level1SegmentTable&& other) noexcept;
  Level1SegmentTable& operator=(Level1SegmentTable&& other) noexcept;

  const Level1TableView& view() const { return view_; }
  // The sorted runs as uploaded (for host references and tests).
  const std::vector<Level1Run>& host_runs() const { return host_runs_; }

 private:
  Level1TableView view_{};
  std::vector<Level1Run> host_runs_;
  void* device_ = nullptr;
};

struct Level1SumArgs {
  float* out = nullptr;  // rows x width fp32, row pitch out_pitch (elements)
  std::int64_t out_pitch = 0;
  DType dtype = DType::kBf16;              // of the staged contributions and of the gradients
  const void* staged = nullptr;            // contribution k, row r, column c at
  int num_staged = 0;                      //   staged[k * staged_stride + r * staged_pitch + c]
  std::int64_t staged_stride = 0;          // elements between contributions
  std::int64_t staged_pitch = 0;           // elements between rows
  const void* const* gradients = nullptr;  // host array of num_gradients device pointers,
  int num_gradients = 0;                   // copied into the kernel parameters (<= 256)
  Level1TableView table{};
  float alpha = 1.0f;
  bool accumulate = false;
  int ctas = kDefaultSumCtas;  // the CTA budget; CTAs retire when their tiles are done
};

// Kernel choice and pipeline shape (no bit depends on it, invariant 2; docs/kernels.md).
struct Level1Tuning {
  int stages = 3;          // pipeline: shared-memory stages (2..4)
  int tile_bytes = 8192;   // pipeline: bytes per input slot and stage (a power of two, 512..65536)
  int consumer_warps = 8;  // pipeline: warps that convert, add and store (1..12)
  bool warp_direct = false;  // no pipeline: every warp loads its inputs directly
  int direct_warps = 0;      // warp-direct: warps per CTA, 8 or 16 (0: the launcher's choice)
};

// TIDE's tuning for a CTA budget: warp-direct up to 32 CTAs, else the pipeline.
inline Level1Tuning recommended_level1_tuning(int ctas) {
  Level1Tuning t;
  t.warp_direct = ctas <= 32;
  return t;
}

// Validates the arguments (throws InvalidArgument) and enqueues the kernel on `stream`.
void launch_level1_sum(const Level1SumArgs& args, cudaStream_t stream,
                       const Level1Tuning& tuning = {});

// Loads every kernel launch_level1_sum can pick on the current device, before any stream can
// wait (NOTE [preloaded kernels] in src/exec/cuda/sequence_runner.cpp). Idempotent.
void prepare_level1_sum();

namespace detail {

// The kernel's parameters (plain data, 2.3 KB, passed by value).
struct Level1SumParams {
  const void* grads[kMaxLevel1Gradients];
  float* out;
  std::int64_t out_pitch;
  const unsigned char* staged;
  std::int64_t staged_stride_bytes;
  std::int64_t staged_pitch_bytes;
  const Level1Run* runs;
  std::uint32_t row_begin[kMaxLevel1Rows + 1];
  int rows;
  std::int64_t width;
  int num_staged;
  float alpha;
  int tile_elems;  // columns per tile (a multiple of 32)
  int tiles_per_row;
  int total_tiles;
  int stages;
  int stage_bytes;  // shared-memory bytes per stage
  int consumer_warps;
};

}  // namespace detail
}  // namespace tide::kernels
