// The reduce-scatter's expected output, computed directly from its definition (Eq. 5) and
// independent of programs and executors: in TIDE's arithmetic order for a given plan
// (NOTE [arithmetic order]: bitwise what every executor must produce), and in float64 (the
// accuracy reference, Sec. 4.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tide/core/rs_plan.hpp"

namespace tide {

// One rank's per-parameter gradients as float values (exactly representable in the
// group's gradient dtype): [param][D_p * K_p], row-major (D_p, K_p).
using RankGrads = std::vector<std::vector<float>>;

// A standard-normal value rounded to `dtype` (bf16 values are exactly representable).
float random_value(std::mt19937_64& rng, DType dtype);
// Fresh standard-normal gradients for every rank, in the layout's gradient dtype.
std::vector<RankGrads> random_grads(std::mt19937_64& rng, const GroupLayout& layout);

// Stores `values` in `dtype` (bf16 as 16-bit words, little-endian) into `out`, which holds
// exactly values.size() items.
void store_values(std::span<const float> values, DType dtype, std::span<std::byte> out);

// The gradient of `rank` that feeds span element `e` of destination rank `destination`'s
// output, or nullptr where that element is padding (rows past D_p).
const float* grad_at(const GroupLayout& layout, const std::vector<RankGrads>& grads, int rank,
                     int destination, std::int64_t e);

// out[r][e] of Eq. 5 in TIDE's arithmetic order for `plan`; `initial` is the output before
// the call (read only when accumulating).
std::vector<std::vector<float>> rs_expected(const RsPlan& plan, const std::vector<RankGrads>& grads,
                                            float alpha, bool accumulate,
                                            const std::vector<std::vector<float>>& initial);

// out[r][e] of Eq. 5 in the expert-parallel lane's order (NOTE [arithmetic order], lane) for
// an M x 1 `layout`; padding is +0.
std::vector<std::vector<float>> ep_rs_expected(const GroupLayout& layout,
                                               const std::vector<RankGrads>& grads, float alpha,
                                               bool accumulate,
                                               const std::vector<std::vector<float>>& initial);
// Eq. 5 in float64: alpha * sum over all ranks, plus the initial output when accumulating.
std::vector<std::vector<double>> rs_float64(const GroupLayout& layout,
                                            const std::vector<RankGrads>& grads, double alpha,
                                            bool accumulate,
                                            const std::vector<std::vector<float>>& initial);

}  // namespace tide
