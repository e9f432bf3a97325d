// Seeded random data for tests, checks and tools: never zeros, finite values of the dtype
// (tide::random_value, include/tide/core/collective_reference.hpp), drawn in a fixed order so
// that a seed always yields the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tide/core/dtype.hpp"
#include "tide/core/layout.hpp"

namespace tide::testing {

// 1..count random small shapes (rows 1..37, cols 1..6).
std::vector<ParamShape> random_shapes(std::mt19937_64& rng, int count);
// n random values representable in `dtype` (drawn one after another from rng).
std::vector<float> random_values(std::mt19937_64& rng, std::int64_t n, DType dtype);
// `values` stored in `dtype` (bf16 rounding as the reference does).
std::vector<std::byte> bytes_of(std::span<const float> values, DType dtype);

}  // namespace tide::testing
