// The runtime's window: what one rank of a GPU backend shares with its peers (NOTE [runtime
// window]). Header-only arithmetic, the same for every fabric that serves the runtime.
#pragma once

#include <cstdint>

namespace tide::fabric {

// NOTE [runtime window]
// The runtime keeps every registered group in one window per rank (NOTE [runtime] 2): the
// arena's regions from offset 0, then `signal_words` 64-bit signal words at the regions' end
// rounded up to 4 KiB. The offset is the same on every rank, so a peer's words are at the
// same offset of its window. The NCCL window fabric (one symmetric window) and the ipc
// fabric (one exported allocation per rank) lay it out alike. The ipc fabric over emulated
// hosts adds a message area at the window's end rounded up to 4 KiB (NOTE [ipc rendezvous
// transport]): kMessageChannelSets sets (one per runtime lane: all-gathers, reduce-scatters)
// of one channel of kMessageChannelBytes per sending rank, in rank order.
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
