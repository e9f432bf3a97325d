// The reduce-scatter's expected output from its definition (Eq. 5), independent of programs
// and executors: in TIDE's order for a plan (NOTE [arithmetic order]: bitwise what executors
// must produce), and in float64 (the accuracy reference, Sec. 4.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tide/core/rs_plan.hpp"

namespace tide {

// One rank's gradients, [param][D_p * K_p] row-major, exact in the gradient dtype.
using RankGrads = std::vector<std::vector<float>>;

// A standard-normal value rounded to `dtype` (bf16 values are exactly representable). For a
// 1-byte dtype (fp8, u8: NOTE [1-byte all-gather items]) a uniform byte code in 1..255 as a
// float: the bit pattern TIDE-AG moves, never 0 (so a missed write shows), never computed on.
float random_value(std::mt19937_64& rng, DType dtype);
// Fresh standard-normal gradients for every rank, in the layout's gradient dtype.
std::vector<RankGrads> random_grads(std::mt19937_64& rng, const GroupLayout& layout);

// Stores `values` in `dtype` (bf16: 16-bit words, little-endian; fp8, u8: each value a byte
// code 0..255, as random_value draws them) into `out`, exactly sized.
void store_values(std::span<const float> values, DType dtype, std::span<std::byte> out);

// `rank`'s gradient feeding element `e` of `destination`'s output; nullptr for padding.
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
