// NOTE [runtime] 10's call-order tags (src/runtime/call_tags.hpp): what the ranks' tag words
// say about a stalled call, for random call orders of random groups.
#include "call_tags.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "test_seed.hpp"

namespace tide::runtime::detail {
namespace {

// The lane's tag words after each rank began the calls `issued[r]` (group indices, in order).
std::vector<std::uint64_t> words_of(const std::vector<std::vector<int>>& issued) {
  std::vector<std::uint64_t> words(issued.size(), 0);
  for (std::size_t r = 0; r < issued.size(); ++r)
    for (const int g : issued[r])
      words[r] += call_tag_of(g);
  return words;
}

TEST(CallTags, ASwappedCallIsNamedWithBothGroups) {
  const testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int trial = 0; trial < 500; ++trial) {
    const int ranks = std::uniform_int_distribution<int>(2, 16)(rng);
    const int groups = std::uniform_int_distribution<int>(2, 300)(rng);
    const int agreed = std::uniform_int_distribution<int>(0, 200)(rng);
    std::uniform_int_distribution<int> any_group(0, groups - 1);
    std::vector<int> prefix(static_cast<std::size_t>(agreed));
    for (int& g : prefix)
      g = any_group(rng);
    const int mine = any_group(rng);
    int theirs = any_group(rng);
    while (theirs == mine)
      theirs = any_group(rng);
    const int rank = std::uniform_int_distribution<int>(0, ranks - 1)(rng);
    int peer = std::uniform_int_distribution<int>(0, ranks - 2)(rng);
    if (peer >= rank) ++peer;
    std::vector<std::vector<int>> issued(static_cast<std::size_t>(ranks), prefix);
    for (int r = 0; r < ranks; ++r)
      issued[static_cast<std::size_t>(r)].push_back(r == peer ? theirs : mine);
    const std::optional<CallOrderMismatch> m =
        find_call_order_mismatch(words_of(issued), rank, mine, groups);
    ASSERT_TRUE(m.has_value()) << "trial " << trial;
    EXPECT_EQ(m->peer, peer);
    EXPECT_EQ(m->lane_call, agreed);
    EXPECT_EQ(m->peer_group, theirs);
  }
}

TEST(CallTags, AgreeingOrLatePeersAreNoMismatch) {
  const testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int trial = 0; trial < 500; ++trial) {
    const int ranks = std::uniform_int_distribution<int>(2, 16)(rng);
    const int groups = std::uniform_int_distribution<int>(1, 300)(rng);
    const int calls = std::uniform_int_distribution<int>(1, 200)(rng);
    std::vector<int> order(static_cast<std::size_t>(calls));
    for (int& g : order)
      g = std::uniform_int_distribution<int>(0, groups - 1)(rng);
    // Every rank issued the same order; some are one call behind (still in the handoff).
    std::vector<std::vector<int>> issued(static_cast<std::size_t>(ranks), order);
    for (auto& calls_of : issued)
      if (std::bernoulli_distribution(0.4)(rng)) calls_of.pop_back();
    const int rank = std::uniform_int_distribution<int>(0, ranks - 1)(rng);
    issued[static_cast<std::size_t>(rank)] = order;
    EXPECT_FALSE(find_call_order_mismatch(words_of(issued), rank, order.back(), groups))
        << "trial " << trial;
  }
}

TEST(CallTags, SumsWrapAndUnknownGroupsAreNamedAsSuch) {
  // High halves that wrap modulo 2^32 still decode to the peer's group.
  const std::uint64_t wrap = (std::uint64_t{0xffffffff} << 32) + 7;  // 7 calls, sum 2^32 - 1
  std::vector<std::uint64_t> words = {wrap + call_tag_of(3), wrap + call_tag_of(5)};
  std::optional<CallOrderMismatch> m = find_call_order_mismatch(words, 0, 3, 10);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->peer, 1);
  EXPECT_EQ(m->lane_call, 7);
  EXPECT_EQ(m->peer_group, 5);
  // A peer's sum that names no group of the communicator (a corrupted or foreign word).
  words = {call_tag_of(0), call_tag_of(0) + (std::uint64_t{1000} << 32)};
  m = find_call_order_mismatch(words, 0, 0, 4);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->peer_group, -1);
  // No call of the lane began on this rank, or a rank outside the words: nothing to say.
  EXPECT_FALSE(find_call_order_mismatch(std::vector<std::uint64_t>{0, call_tag_of(1)}, 0, 0, 2));
  EXPECT_FALSE(find_call_order_mismatch(std::vector<std::uint64_t>{call_tag_of(1)}, 3, 0, 2));
}

}  // namespace
}  // namespace tide::runtime::detail
