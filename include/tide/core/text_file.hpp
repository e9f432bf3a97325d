// Reading a small text input (a cost model, a calibration) that a user names on the command
// line: a regular file of at most kMaxTextFileBytes, or InvalidArgument naming `what`, the
// path and the problem. Never reads without a bound (a device such as /dev/zero never ends).
#pragma once

#include <cstdint>
#include <string>

namespace tide {

inline constexpr std::uintmax_t kMaxTextFileBytes = std::uintmax_t{16} << 20;

std::string read_text_file(const std::string& path, const std::string& what);

}  // namespace tide
