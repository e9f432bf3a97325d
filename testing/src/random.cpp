// Seeded random data (tide/testing/random.hpp).
#include "tide/testing/random.hpp"

#include "tide/core/collective_reference.hpp"

namespace tide::testing {

std::vector<ParamShape> random_shapes(std::mt19937_64& rng, int count) {
  std::vector<ParamShape> shapes(static_cast<std::size_t>(count));
  for (ParamShape& s : shapes) {
    s.rows = static_cast<std::int64_t>(rng() % 37) + 1;
    s.cols = static_cast<std::int64_t>(rng() % 6) + 1;
  }
  return shapes;
}

std::vector<float> random_values(std::mt19937_64& rng, std::int64_t n, DType dtype) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v)
    x = random_value(rng, dtype);
  return v;
}

std::vector<std::byte> bytes_of(std::span<const float> values, DType dtype) {
  std::vector<std::byte> out(values.size() * static_cast<std::size_t>(item_bytes(dtype)));
  store_values(values, dtype, out);
  return out;
}

}  // namespace tide::testing
