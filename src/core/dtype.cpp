#include "tide/core/dtype.hpp"

#include <string>

#include "tide/core/error.hpp"

namespace tide {

DType parse_dtype(std::string_view text, std::string_view what) {
  if (text == "bf16") return DType::kBf16;
  if (text == "fp32") return DType::kFp32;
  if (text == "fp8") return DType::kFp8;
  if (text == "u8") return DType::kU8;
  throw InvalidArgument(std::string(what) + " '" + std::string(text) +
                        "' is not a dtype TIDE moves; use bf16, fp32, fp8 or u8");
}

void require_gradient_dtype(DType t, std::string_view what) {
  if (is_reduction_dtype(t)) return;
  throw InvalidArgument(std::string(what) + " " + std::string(dtype_name(t)) +
                        " is an all-gather-only dtype: TIDE-RS reduces bf16 or fp32 gradients "
                        "into fp32 shards; give the gradient dtype bf16 or fp32 (the all-gather "
                        "dtype may stay " +
                        std::string(dtype_name(t)) + ")");
}

}  // namespace tide
