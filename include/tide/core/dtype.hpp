// Element types of the collectives (Sec. 2.1): the all-gather item size b_ag is 1 (fp8, u8),
// 2 (bf16) or 4 (fp32); the gradient item size b_grad is 2 (bf16) or 4 (fp32), and TIDE-RS
// always reduces into fp32.
//
// NOTE [1-byte all-gather items]
// fp8 (float8 e4m3 or e5m2 bit patterns, e.g. torchao float8 weights) and u8 (packed uint8,
// e.g. NF4) are all-gather only. TIDE-AG moves them as bytes (copy engines, rail puts) and
// never computes on them, so an fp8 group holds and moves half the bytes of a bf16 one; no
// sum, cast or landing reads them. Shard offsets are multiples of one byte only. A gradient in
// a 1-byte dtype is refused (require_gradient_dtype): TIDE-RS reduces bf16 or fp32 gradients
// into fp32 shards. The mixed-precision cast writes bf16 only (AgPlan refuses it into fp8).
#pragma once

#include <cstdint>
#include <string_view>

namespace tide {

// Serialised as its u8 value (capability descriptions): append new enumerators, never reorder.
enum class DType : std::uint8_t { kBf16, kFp32, kFp8, kU8 };
inline constexpr DType kLastDType = DType::kU8;

constexpr std::int64_t item_bytes(DType t) {
  switch (t) {
    case DType::kBf16:
      return 2;
    case DType::kFp32:
      return 4;
    case DType::kFp8:
    case DType::kU8:
      return 1;
  }
  return 0;  // not a DType (an out-of-range value): callers validate decoded values
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kBf16:
      return "bf16";
    case DType::kFp32:
      return "fp32";
    case DType::kFp8:
      return "fp8";
    case DType::kU8:
      return "u8";
  }
  return "unknown";
}

// Whether TIDE-RS (and the Level 1 sum, the landing) can read items of `t`: bf16 and fp32.
constexpr bool is_reduction_dtype(DType t) {
  return t == DType::kBf16 || t == DType::kFp32;
}

// Parses "bf16", "fp32", "fp8" or "u8"; throws InvalidArgument naming `what` (e.g.
// "--ag-dtype") otherwise.
DType parse_dtype(std::string_view text, std::string_view what);

// Throws InvalidArgument naming `what` (e.g. "grad_dtype") where `t` is not a reduction dtype
// (NOTE [1-byte all-gather items]); the message says what to pass instead.
void require_gradient_dtype(DType t, std::string_view what);

}  // namespace tide
