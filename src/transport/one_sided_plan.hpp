// The one-sided plan of a call's rail messages (one_sided.hpp; NOTE [one-sided messages] in
// docs/executor.md): where each message's bytes land in the receiver's
// registered window and which signals the receiver waits for. Pure C++ (no CUDA, no NCCL), so
// that the arithmetic and the checks run on the CPU.
//
// Contract of plan_one_sided():
// - Input: the messages of one call in the global schedule's order (NOTE [enqueue order]), each
//   from rank `from` to rank `to` on message lane `lane`, with its pieces: the bytes the sender
//   puts, the bytes the receiver's destination holds, the source's offset in the sender's
//   registered window and the destination's in the receiver's (kNotInWindow: caller memory,
//   not registered; NCCL puts only from and into symmetric windows); and every rank's window
//   size.
// - Output, per message in input order: one put with a signal per non-empty piece (its
//   offset into the peer's window and its source's into the sender's), then, where `token` (the
//   abort token of NOTE [abort relay], put into a window of its own), one more signalling put; a
//   message with neither (a bare signal) gives one signal. `signals` is how many signals the
//   message adds at its receiver, `ordinal` the index of its first one among the signals of its
//   (from, to, lane) in the call. Per receiver, `waits` sums them per (peer, lane): what the
//   receiver waits for before the call's arrivals' counter additions may all run.
// - Checks, with the problem and what to do: ranks and lanes in range, no message to itself
//   (tide::InvalidArgument); a destination outside its receiver's window, two destinations of
//   one receiver that overlap in one call, or a piece whose byte count differs from what the
//   receiver expects, or a source outside its sender's window (tide::InvalidArgument); a source
//   or a destination not in a window (tide::Unsupported: two-sided messages carry it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tide::transport {

inline constexpr std::int64_t kNotInWindow = -1;

struct OneSidedPiece {
  std::int64_t bytes = 0;           // what the sender puts
  std::int64_t expected_bytes = 0;  // what the receiver's destination holds
  std::int64_t dst_offset = 0;      // in the receiver's window, or kNotInWindow
  std::int64_t src_offset = 0;      // in the sender's window, or kNotInWindow
};

struct OneSidedMessage {
  int from = -1;
  int to = -1;
  int lane = 0;
  std::vector<OneSidedPiece> pieces;  // empty: a signal
};

struct PlannedPut {
  int message = -1;  // index into the input
  int from = -1, to = -1, lane = 0;
  std::int64_t offset = 0;  // in `to`'s window
  std::int64_t bytes = 0;
  std::int64_t src_offset = 0;  // in `from`'s window
};

struct PlannedMessage {
  int signals = 0;  // signals this message adds at its receiver (data puts, token, bare signal)
  int ordinal = 0;  // its first signal's index among those of (from, to, lane) in the call
  bool bare_signal = false;  // no data and no token: one ncclSignal
};

struct SignalWait {
  int receiver = -1, peer = -1, lane = 0;
  int count = 0;
};

struct OneSidedPlan {
  std::vector<PlannedPut> puts;          // in message order, pieces in order
  std::vector<PlannedMessage> messages;  // one per input message
  std::vector<SignalWait> waits;         // sorted by (receiver, peer, lane); only nonzero counts
  // The signals `receiver` waits for from `peer` on `lane` (0 where none).
  int wait_count(int receiver, int peer, int lane) const;
};

struct OneSidedLimits {
  int ranks = 0;
  int lanes = 1;
  std::span<const std::int64_t> window_bytes;  // per rank (size `ranks`)
  bool token = true;  // every message ends with its abort token's put (NOTE [abort relay])
};

OneSidedPlan plan_one_sided(std::span<const OneSidedMessage> messages,
                            const OneSidedLimits& limits);

}  // namespace tide::transport
