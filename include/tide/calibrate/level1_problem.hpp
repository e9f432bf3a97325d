// A Level 1 sum problem of the shape the paper counts BW_sum on (App. G): one outbox block of
// L = 8 rows, 7 staged bf16 contributions and the owner's bf16 gradients (16 parameters,
// 16-byte aligned runs), fp32 output; `sets` copies to rotate through so that consecutive
// launches do not hit in the L2. Used by `tide calibrate` and the interference benchmark.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "tide/calibrate/timing.hpp"
#include "tide/kernels/level1_sum.hpp"

namespace tide::calibrate {

// Fills n bf16 (esz = 2) or fp32 (esz = 4) values in [-2, 2) from `seed` on `stream`.
void fill_random(void* p, std::int64_t n, int esz, std::uint64_t seed, cudaStream_t stream);

class Level1Problem {
 public:
  static constexpr int kRows = 8;
  static constexpr int kStaged = 7;
  static constexpr int kParams = 16;

  Level1Problem(std::int64_t width, int sets);
  kernels::Level1SumArgs args(int set, int ctas) const;
  // Logical bytes of one launch as App. G counts them: 8 bf16 reads + 1 fp32 write per element.
  double logical_bytes() const { return static_cast<double>(kRows) * width_ * (8 * 2 + 4); }
  int sets() const { return static_cast<int>(sets_.size()); }

 private:
  struct Set {
    DeviceBuffer staged, grads, out;
    std::vector<const void*> grad_ptrs;
  };
  std::int64_t width_;
  std::int64_t per_param_ = 0;
  std::vector<Set> sets_;
  std::unique_ptr<kernels::Level1SegmentTable> table_;
};

}  // namespace tide::calibrate
