// Shadow state of one buffer: an interval map from byte ranges to their last writer and the
// readers since (NOTE [reference execution semantics] 3). Pieces are split only where an
// access begins or ends, and a write coalesces its range into one piece, so programs that
// touch hundreds of MB in large ranges keep few pieces.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace tide::exec::detail {

// One access: op `op` at sequence number `seq` of vector-clock component `comp`. comp < 0 is
// the caller's initial write, which happens before every op.
struct Access {
  std::int32_t comp = -1;
  std::uint32_t seq = 0;
  std::int32_t op = -1;
  bool operator==(const Access&) const = default;
};

enum class ByteState : std::uint8_t { kUnwritten, kWritten, kReleased };

struct Shadow {
  ByteState state = ByteState::kUnwritten;
  Access writer;                // kWritten / kReleased: the write or release
  std::vector<Access> readers;  // since that write, at most one per component
  // kWritten: the landing that summed these bytes since that write, or -1 (NOTE [reference
  // execution semantics] 4: a landing consumes the partials it sums).
  std::int32_t consumed_by = -1;
  bool operator==(const Shadow&) const = default;
};

class ShadowMap {
 public:
  explicit ShadowMap(std::int64_t size);

  // Calls f(begin, end, Shadow&) for the pieces covering [begin, end), in order.
  template <class F>
  void visit(std::int64_t begin, std::int64_t end, F&& f) {
    if (begin >= end) return;
    split(begin);
    split(end);
    for (auto it = pieces_.find(begin); it != pieces_.end() && it->first < end; ++it)
      f(it->first, it->second.end, it->second.shadow);
  }
  // Gives [begin, end) one state.
  void assign(std::int64_t begin, std::int64_t end, Shadow shadow);
  std::size_t pieces() const { return pieces_.size(); }

 private:
  struct Piece {
    std::int64_t end = 0;
    Shadow shadow;
  };
  void split(std::int64_t at);
  std::int64_t size_ = 0;
  std::map<std::int64_t, Piece> pieces_;  // keyed by begin; covers [0, size_)
};

}  // namespace tide::exec::detail
