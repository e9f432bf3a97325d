// Element types of the collectives (Sec. 2.1): the all-gather item size b_ag and the
// gradient item size b_grad are each 2 (bf16) or 4 (fp32); TIDE-RS always reduces into fp32.
#pragma once

#include <cstdint>
#include <string_view>

namespace tide {

enum class DType : std::uint8_t { kBf16, kFp32 };

constexpr std::int64_t item_bytes(DType t) {
  return t == DType::kBf16 ? 2 : 4;
}

constexpr std::string_view dtype_name(DType t) {
  return t == DType::kBf16 ? "bf16" : "fp32";
}

// Parses "bf16" or "fp32"; throws InvalidArgument naming `what` (e.g. "--ag-dtype") otherwise.
DType parse_dtype(std::string_view text, std::string_view what);

}  // namespace tide
