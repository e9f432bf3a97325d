// The runtime's window: what one rank of a GPU backend shares with its peers (NOTE [runtime
// window]). Header-only arithmetic, the same for every fabric that serves the runtime.
#pragma once

#include <cstdint>

namespace tide::fabric {

// NOTE [runtime window]
// One window per rank (NOTE [runtime] 2), laid out alike by the NCCL window and ipc fabrics:
// the arena's regions from 0, then `signal_words` 64-bit words at the regions' end rounded up
// to 4 KiB (the same offset on every rank); over emulated hosts, a message area after them
// (rounded up to 4 KiB): per runtime lane a set of one kMessageChannelBytes channel per
// sending rank, in rank order (NOTE [ipc rendezvous transport]).
inline constexpr std::int64_t kWindowPage = 4096;
// A channel: one 4 KiB page of words, then a bounce buffer of kMessageBounceBytes.
inline constexpr std::int64_t kMessageBounceBytes = std::int64_t{1} << 20;
inline constexpr std::int64_t kMessageChannelBytes = kWindowPage + kMessageBounceBytes;
inline constexpr int kMessageChannelSets = 2;

constexpr std::int64_t window_signal_offset(std::int64_t arena_bytes) {
  return (arena_bytes + kWindowPage - 1) / kWindowPage * kWindowPage;
}

constexpr std::int64_t window_bytes(std::int64_t arena_bytes, std::int64_t signal_words) {
  return window_signal_offset(arena_bytes) +
         (signal_words > 0 ? signal_words : 1) * static_cast<std::int64_t>(sizeof(std::uint64_t));
}

// Where the message area starts in a window, and what a message area for `ranks` ranks takes.
constexpr std::int64_t window_message_offset(std::int64_t arena_bytes, std::int64_t signal_words) {
  return (window_bytes(arena_bytes, signal_words) + kWindowPage - 1) / kWindowPage * kWindowPage;
}
constexpr std::int64_t message_area_bytes(int ranks) {
  return kMessageChannelSets * ranks * kMessageChannelBytes;
}

}  // namespace tide::fabric
