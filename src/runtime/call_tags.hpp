// NOTE [runtime] 10's call-order tags: what a group's call adds to its lane's tag word, and
// what the ranks' words say about a stalled call. Pure host arithmetic (the words are read by
// the CUDA sequence runner's watch: NOTE [CUDA call sequences] 7).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace tide::runtime::detail {

// What each call of group `index` adds to its lane's word: 1 in the low half (the lane's
// calls counted), index + 1 in the high half (their groups summed, modulo 2^32).
constexpr std::uint64_t call_tag_of(int index) {
  return 1 + ((static_cast<std::uint64_t>(index) + 1) << 32);
}

// A peer whose word counts as many of the lane's calls as this rank's but sums other groups.
struct CallOrderMismatch {
  int peer = -1;
  std::int64_t lane_call = 0;  // the stalled call's index among the lane's calls (from 0)
  int peer_group = -1;         // the group the peer issued in its place; -1: not one of `groups`
};

// `tags` by rank (as read for a stalled call of group `group` on this rank `rank`), `groups`
// the communicator's group count. Calls of a lane run one after another, so every earlier call
// of the lane agreed: two words that count the same calls differ by their current calls' tags.
// The lowest such peer; nullopt where no word says so (a peer that is only late counts fewer).
inline std::optional<CallOrderMismatch> find_call_order_mismatch(
    std::span<const std::uint64_t> tags, int rank, int group, int groups) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= tags.size()) return std::nullopt;
  const auto calls = [](std::uint64_t tag) { return tag & 0xffffffffu; };
  const auto sums = [](std::uint64_t tag) { return tag >> 32; };
  const std::uint64_t mine = tags[static_cast<std::size_t>(rank)];
  if (calls(mine) == 0) return std::nullopt;  // no call of the lane began here
  for (std::size_t p = 0; p < tags.size(); ++p) {
    const std::uint64_t theirs = tags[p];
    if (static_cast<int>(p) == rank || calls(theirs) != calls(mine) || sums(theirs) == sums(mine))
      continue;
    const std::uint64_t other =
        (sums(theirs) - sums(mine) + static_cast<std::uint64_t>(group) + 1) & 0xffffffffu;
    CallOrderMismatch m;
    m.peer = static_cast<int>(p);
    m.lane_call = static_cast<std::int64_t>(calls(mine)) - 1;
    m.peer_group = other >= 1 && other <= static_cast<std::uint64_t>(groups)
                       ? static_cast<int>(other) - 1
                       : -1;
    return m;
  }
  return std::nullopt;
}

}  // namespace tide::runtime::detail
