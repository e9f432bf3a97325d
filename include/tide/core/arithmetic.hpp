// The reference arithmetic of TIDE: bf16 conversion and the exact order of every fp32
// operation in TIDE-RS and in the mixed-precision all-gather cast.
// NOTE [arithmetic order]
// Every executor and kernel follows this order, so all are bitwise identical for the same
// plan and inputs (invariant 1; Sec. 4.3): IEEE-754 binary32, round-to-nearest-even, never
// fused (-ffp-contract=off; __fadd_rn, __fmul_rn); every NaN produced is 0x7FFFFFFF (bf16 0x7FFF).
//   Level 1 (Sec. 4.1), one element, by the owner j of its sub-slice on the contributing node:
//     acc = x[l0] + x[l1] + ... + x[lL-2]   the other local ranks in increasing order, left to
//     acc = acc + x[j]                      right, then the owner's own (L = 1: acc = x[j]);
//     part = alpha * acc                    one multiply. bf16 inputs are widened exactly.
//   Level 2 (Sec. 4.2), one element of rank r's output: contributors c = 1..M (M the own node)
//   in increasing order, in waves of at most W_wave; per wave w, left to right:
//     wave = part[c_a] + ... + part[c_b];  out = (w == 0 && !accumulate) ? wave : out + wave.
//   M = 1: out = accumulate ? out + part : part; the one-node layout (NOTE [one-node TIDE-RS])
//   writes padding as +0 either way. A multimem landing is not bitwise comparable.
//   Expert-parallel lane (App. F): part = level1_partial(arrivals in contributor order, rank
//   (r - c) mod M for c = 1..M-1, own, alpha); out = accumulate ? out + part : part.
//   All-gather cast (Sec. 3.1): bf16 = round-to-nearest-even(fp32); NaN -> 0x7FFF.
// Consequences (padding, the lane against TIDE-RS): docs/core.md, Arithmetic.
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
