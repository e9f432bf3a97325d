// The arithmetic of the graph waits (generation_wait.hpp, NOTE [CUDA call sequences] 3), on
// the host: for random periodic sequences, the threshold a wait kernel computes from its
// slot's generation equals the host threshold (what earlier calls added, plus the template's
// value) for every call of the slot, before and after the call it was captured at.
#include "generation_wait.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace tide::exec::cuda_detail {
namespace {

std::uint64_t seed() {
  const char* s = std::getenv("TIDE_TEST_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : std::random_device{}();
}

// What calls 0 .. e - 1 added to counter i.
std::int64_t base(const std::vector<std::vector<std::int64_t>>& additions, std::int64_t e,
                  std::size_t i) {
  std::int64_t sum = 0;
  for (std::int64_t c = 0; c < e; ++c)
    sum += additions[static_cast<std::size_t>(c) % additions.size()][i];
  return sum;
}

TEST(GenerationWaits, ThresholdsFollowEveryCallOfTheSlot) {
  const std::uint64_t s = seed();
  SCOPED_TRACE("seed " + std::to_string(s) + " (rerun with TIDE_TEST_SEED)");
  std::mt19937_64 rng(s);
  for (int trial = 0; trial < 300; ++trial) {
    const int p = 1 + static_cast<int>(rng() % 4);
    const int q = p * (1 + static_cast<int>(rng() % 3));
    const std::size_t counters = 1 + rng() % 5;
    std::vector<std::vector<std::int64_t>> additions(static_cast<std::size_t>(p),
                                                     std::vector<std::int64_t>(counters));
    for (auto& t : additions)
      for (auto& a : t)
        a = static_cast<std::int64_t>(rng() % 10);
    const std::vector<std::int64_t> step = slot_period_additions(additions, q);
    const std::int64_t captured = static_cast<std::int64_t>(rng() % (3 * static_cast<unsigned>(q)));
    for (std::size_t i = 0; i < counters; ++i) {
      const std::int64_t value = static_cast<std::int64_t>(rng() % 41) - 20;
      const GenerationWait w =
          generation_wait(nullptr, base(additions, captured, i) + value, step[i], captured, q);
      for (std::int64_t e = captured % q; e < captured + 6 * q; e += q) {
        ASSERT_EQ(generation_threshold(w, generation_of(e, q)), base(additions, e, i) + value)
            << "trial " << trial << " P " << p << " Q " << q << " captured at " << captured
            << " call " << e << " counter " << i;
      }
    }
  }
}

// Every call of slot j adds 1 to G_j before anything else; call e then sees generation_of(e).
TEST(GenerationWaits, EachCallSeesItsSlotsCount) {
  for (const int q : {1, 2, 3, 4, 6, 8}) {
    std::vector<std::int64_t> g(static_cast<std::size_t>(q), 0);
    for (std::int64_t e = 0; e < 10 * q; ++e) {
      ++g[static_cast<std::size_t>(e % q)];
      ASSERT_EQ(g[static_cast<std::size_t>(e % q)], generation_of(e, q)) << "Q " << q << " e " << e;
    }
  }
}

}  // namespace
}  // namespace tide::exec::cuda_detail
