// Seeds for the random tests: TIDE_TEST_SEED when set (to replay a failure), otherwise a
// fresh one. Every failure inside the scope of a TestSeed names the seed and how to replay it.
//
//   const tide::testing::TestSeed seed;       // in the test body
//   std::mt19937_64 rng = seed.engine();
//
// A test that needs several independent streams derives them from seed.value().
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>

namespace tide::testing {

// TIDE_TEST_SEED (decimal or 0x-prefixed hex) when set and not empty, else a fresh seed.
inline std::uint64_t pick_test_seed() {
  if (const char* text = std::getenv("TIDE_TEST_SEED"); text != nullptr && *text != '\0') {
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text, &end, 0);
    if (errno != 0 || end == text || *end != '\0') {
      throw std::invalid_argument(std::string("TIDE_TEST_SEED='") + text +
                                  "' is not an unsigned 64-bit integer");
    }
    return value;
  }
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

inline std::string seed_trace(std::uint64_t seed) {
  return "random seed " + std::to_string(seed) +
         " (replay with TIDE_TEST_SEED=" + std::to_string(seed) + ")";
}

class TestSeed {
 public:
  explicit TestSeed(const char* file = __builtin_FILE(), int line = __builtin_LINE())
      : seed_(pick_test_seed()), trace_(file, line, seed_trace(seed_)) {}

  std::uint64_t value() const { return seed_; }
  std::mt19937_64 engine() const { return std::mt19937_64(seed_); }

 private:
  std::uint64_t seed_;
  ::testing::ScopedTrace trace_;
};

}  // namespace tide::testing
