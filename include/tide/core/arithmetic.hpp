// The reference arithmetic of TIDE: bf16 conversion and the exact order of every fp32
// operation in TIDE-RS and in the mixed-precision all-gather cast.
//
// NOTE [arithmetic order]
// Both executors (CPU reference and CUDA) and every kernel follow this order, so they are
// bitwise identical for the same plan and inputs (architecture invariant 1; paper Sec. 4.3).
// All operations are IEEE-754 binary32 with round-to-nearest-even, never contracted into
// fused multiply-adds (host code builds with -ffp-contract=off; kernels use __fadd_rn and
// __fmul_rn). Any NaN an operation produces is the canonical quiet NaN 0x7FFFFFFF (what
// the GPU produces; x86 would propagate a payload), and bf16 NaN is 0x7FFF.
//
//   Level 1 (Sec. 4.1), for one element of one destination rank, computed by the owner j
//   of its sub-slice on the contributing node:
//     acc  = x[l0]                       l0 < l1 < ... the local ranks other than j,
//     acc  = acc + x[l1] ... + x[lL-2]   in increasing local-rank order (staged copies),
//     acc  = acc + x[j]                  then the owner's own contribution (read in place),
//     part = alpha * acc                 one multiply; alpha folds FSDP2's divide factors.
//   With L = 1 there are no staged copies: acc = x[j]. bf16 inputs are widened exactly.
//
//   Level 2 (Sec. 4.2), for one element of the output shard of destination rank r:
//     contributors c = 1..M (c = M is the own node) are split in increasing order into
//     waves of at most W_wave (Prop. 4.1); for wave w with contributors c_a < ... < c_b:
//       wave = part[c_a] + part[c_a+1] + ... + part[c_b]     left to right,
//       out  = (w == 0 && !accumulate) ? wave : out + wave.
//   A single node (M = 1) is one wave with one contributor: out = acc ? out + part : part.
//   The one-node layout (NOTE [one-node TIDE-RS]) computes the same, but writes padding
//   elements (rows past D_p) as +0 whether accumulating or not; the multi-node landing
//   leaves out + 0. A multimem landing sums in the switch's order (not bitwise comparable).
//
//   Expert-parallel lane (App. F, M x 1, M <= 8), for one element of rank r's output:
//   part = level1_partial(arrivals in contributor order c = 1..M-1 (rank (r - c) mod M,
//   Eq. 6), own, alpha); out = accumulate ? out + part : part. Bitwise TIDE-RS's M x 1 order
//   only with alpha = 1 and no accumulation (docs/core.md, Arithmetic).
//
//   All-gather cast (Sec. 3.1): bf16 = round-to-nearest-even(fp32); NaN -> 0x7FFF.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

namespace tide::arith {

constexpr std::uint32_t kCanonicalNanFp32 = 0x7FFFFFFFu;
constexpr std::uint16_t kCanonicalNanBf16 = 0x7FFFu;

constexpr bool is_nan_bits(std::uint32_t bits) {
  return (bits & 0x7FFFFFFFu) > 0x7F800000u;
}

// Returns `x`, with any NaN replaced by the canonical one.
inline float canonical(float x) {
  return is_nan_bits(std::bit_cast<std::uint32_t>(x)) ? std::bit_cast<float>(kCanonicalNanFp32) : x;
}

inline float bf16_to_float(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if (is_nan_bits(bits)) return kCanonicalNanBf16;
  const std::uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding_bias) >> 16);
}

inline float add(float a, float b) {
  return canonical(a + b);
}
inline float mul(float a, float b) {
  return canonical(a * b);
}

// Level 1 for one element. `staged` holds the other local ranks' values in increasing
// local-rank order; `own` is the owner's value.
inline float level1_partial(std::span<const float> staged, float own, float alpha) {
  float acc = own;
  if (!staged.empty()) {
    acc = staged[0];
    for (std::size_t i = 1; i < staged.size(); ++i)
      acc = add(acc, staged[i]);
    acc = add(acc, own);
  }
  return mul(alpha, canonical(acc));
}

// Level 2: the sum of one wave's partials, in increasing contributor order.
inline float wave_sum(std::span<const float> partials_in_contributor_order) {
  float acc = canonical(partials_in_contributor_order[0]);
  for (std::size_t i = 1; i < partials_in_contributor_order.size(); ++i) {
    acc = add(acc, partials_in_contributor_order[i]);
  }
  return acc;
}

// Level 2: folds wave `wave_index`'s sum into the output element.
inline float land(float out, float wave, int wave_index, bool accumulate) {
  return (wave_index == 0 && !accumulate) ? wave : add(out, wave);
}

}  // namespace tide::arith
