// The one-sided plan of a call's messages: the contract is in one_sided_plan.hpp.
#include "one_sided_plan.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "tide/core/error.hpp"

namespace tide::transport {

namespace {

std::string where(std::size_t message, std::size_t piece) {
  return "one-sided plan: message " + std::to_string(message) + ", piece " + std::to_string(piece);
}

void check_message(const OneSidedMessage& m, std::size_t index, const OneSidedLimits& limits) {
  const std::string at = "one-sided plan: message " + std::to_string(index);
  if (m.from < 0 || m.from >= limits.ranks || m.to < 0 || m.to >= limits.ranks) {
    throw InvalidArgument(at + " goes from rank " + std::to_string(m.from) + " to rank " +
                          std::to_string(m.to) + ", outside [0, " + std::to_string(limits.ranks) +
                          "); plan the call for its world");
  }
  if (m.from == m.to) {
    throw InvalidArgument(at + " goes from rank " + std::to_string(m.from) +
                          " to itself; a rank's own ops are not messages");
  }
  if (m.lane < 0 || m.lane >= limits.lanes) {
    throw InvalidArgument(at + " is on lane " + std::to_string(m.lane) + ", outside [0, " +
                          std::to_string(limits.lanes) + "); build the fabric with more lanes");
  }
}

void check_piece(const OneSidedPiece& p, std::size_t message, std::size_t piece,
                 std::int64_t window, std::int64_t source_window) {
  if (p.bytes < 0 || p.bytes != p.expected_bytes) {
    throw InvalidArgument(where(message, piece) + ": the sender puts " + std::to_string(p.bytes) +
                          " bytes, the receiver expects " + std::to_string(p.expected_bytes) +
                          "; both sides must map the same copy descriptor");
  }
  if (p.bytes == 0) return;
  if (p.dst_offset == kNotInWindow) {
    throw Unsupported(where(message, piece) +
                      ": the destination is not in the receiver's registered window (caller "
                      "memory); one-sided puts need window destinations, so two-sided messages "
                      "(ncclSend / ncclRecv, the default) must carry this call");
  }
  if (p.src_offset == kNotInWindow) {
    throw Unsupported(where(message, piece) +
                      ": the source is not in the sender's registered window (caller memory, "
                      "such as staged shards or gradients); NCCL puts only from a symmetric "
                      "window, so two-sided messages (ncclSend / ncclRecv, the default) must "
                      "carry this call");
  }
  if (p.src_offset < 0 || p.src_offset > source_window || p.bytes > source_window - p.src_offset) {
    throw InvalidArgument(where(message, piece) + ": source bytes [" +
                          std::to_string(p.src_offset) + ", " + std::to_string(p.src_offset) +
                          " + " + std::to_string(p.bytes) +
                          ") are outside the sender's window of " + std::to_string(source_window) +
                          " bytes; size the window for the program (required_window_bytes)");
  }
  // p.bytes <= window - offset: no overflow for offsets and sizes in [0, 2^63).
  if (p.dst_offset < 0 || p.dst_offset > window || p.bytes > window - p.dst_offset) {
    throw InvalidArgument(where(message, piece) + ": bytes [" + std::to_string(p.dst_offset) +
                          ", " + std::to_string(p.dst_offset) + " + " + std::to_string(p.bytes) +
                          ") are outside the receiver's window of " + std::to_string(window) +
                          " bytes; size the window for the program (required_window_bytes)");
  }
}

struct Span {
  std::int64_t begin, end;
  std::size_t message, piece;
};

// Two destinations of one receiver in one call that share a byte: the later would race the
// earlier (one-sided puts land in no order the receiver controls).
void check_overlaps(std::map<int, std::vector<Span>>& by_receiver) {
  for (auto& [receiver, spans] : by_receiver) {
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    for (std::size_t i = 1; i < spans.size(); ++i) {
      const Span& a = spans[i - 1];
      const Span& b = spans[i];
      if (b.begin < a.end) {
        throw InvalidArgument(where(a.message, a.piece) + " and " + where(b.message, b.piece) +
                              " write overlapping bytes [" + std::to_string(b.begin) + ", " +
                              std::to_string(std::min(a.end, b.end)) + ") of rank " +
                              std::to_string(receiver) +
                              "'s window in one call; a program's destinations of one call "
                              "must be disjoint");
      }
    }
  }
}

}  // namespace

int OneSidedPlan::wait_count(int receiver, int peer, int lane) const {
  const auto key = std::tuple{receiver, peer, lane};
  const auto it = std::lower_bound(waits.begin(), waits.end(), key,
                                   [](const SignalWait& w, const std::tuple<int, int, int>& k) {
                                     return std::tuple{w.receiver, w.peer, w.lane} < k;
                                   });
  if (it == waits.end() || std::tuple{it->receiver, it->peer, it->lane} != key) return 0;
  return it->count;
}

OneSidedPlan plan_one_sided(std::span<const OneSidedMessage> messages,
                            const OneSidedLimits& limits) {
  if (limits.ranks < 1 || limits.lanes < 1 ||
      limits.window_bytes.size() != static_cast<std::size_t>(limits.ranks)) {
    throw InvalidArgument("one-sided plan: " + std::to_string(limits.window_bytes.size()) +
                          " window sizes for " + std::to_string(limits.ranks) + " ranks and " +
                          std::to_string(limits.lanes) +
                          " lanes; give one size per rank and at least one lane");
  }
  OneSidedPlan plan;
  std::map<std::tuple<int, int, int>, int> counts;  // (receiver, peer, lane) -> signals
  std::map<int, std::vector<Span>> by_receiver;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const OneSidedMessage& m = messages[i];
    check_message(m, i, limits);
    const std::int64_t window = limits.window_bytes[static_cast<std::size_t>(m.to)];
    PlannedMessage planned;
    for (std::size_t k = 0; k < m.pieces.size(); ++k) {
      const OneSidedPiece& p = m.pieces[k];
      check_piece(p, i, k, window, limits.window_bytes[static_cast<std::size_t>(m.from)]);
      if (p.bytes == 0) continue;
      plan.puts.push_back(
          {static_cast<int>(i), m.from, m.to, m.lane, p.dst_offset, p.bytes, p.src_offset});
      by_receiver[m.to].push_back({p.dst_offset, p.dst_offset + p.bytes, i, k});
      ++planned.signals;
    }
    if (limits.token) {
      ++planned.signals;
    } else if (planned.signals == 0) {
      planned.bare_signal = true;
      planned.signals = 1;
    }
    int& count = counts[{m.to, m.from, m.lane}];
    planned.ordinal = count;
    count += planned.signals;
    plan.messages.push_back(planned);
  }
  check_overlaps(by_receiver);
  for (const auto& [key, count] : counts)
    plan.waits.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), count});
  return plan;
}

}  // namespace tide::transport
