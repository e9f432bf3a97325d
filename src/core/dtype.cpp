#include "tide/core/dtype.hpp"

#include <string>

#include "tide/core/error.hpp"

namespace tide {

DType parse_dtype(std::string_view text, std::string_view what) {
  if (text == "bf16") return DType::kBf16;
  if (text == "fp32") return DType::kFp32;
  throw InvalidArgument(std::string(what) + " '" + std::string(text) +
                        "' is not a dtype TIDE moves; use bf16 or fp32");
}

}  // namespace tide
