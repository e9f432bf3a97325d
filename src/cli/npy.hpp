// Writes NumPy .npy files (format version 1.0), so that a third party can check a simulated
// collective with numpy alone.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tide::cli {

// `descr` is a NumPy type string: "<u2" (bf16 words), "<f4". Throws on I/O failure.
void write_npy(const std::string& path, const std::string& descr,
               const std::vector<std::int64_t>& shape, std::span<const std::byte> data);

}  // namespace tide::cli
