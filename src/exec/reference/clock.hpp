// Vector clocks for happens-before (NOTE [reference execution semantics] 3). One component
// per (rank, stream); the k-th op of a stream has sequence number k (1-based). A stream's
// clock is a shared immutable base (the joins so far) plus its own sequence number, so an
// op's clock is copied in O(1) and only a join (an event or counter wait) copies a vector.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "shadow_map.hpp"

namespace tide::exec::detail {

using ClockVec = std::vector<std::uint32_t>;

struct ClockRef {
  std::shared_ptr<const ClockVec> base;
  std::int32_t comp = -1;
  std::uint32_t seq = 0;
  std::uint64_t version = 0;  // unique per distinct base contents (0: none)

  std::uint32_t at(std::int32_t component) const {
    return component == comp ? seq : (*base)[static_cast<std::size_t>(component)];
  }
};

// Whether `access` happens before the op whose clock is `clock`.
inline bool happens_before(const Access& access, const ClockRef& clock) {
  return access.comp < 0 || clock.at(access.comp) >= access.seq;
}

// Clock vectors are padded to a multiple of kClockBlock entries so the elementwise max
// below runs on whole blocks, which the compiler vectorises at -O2.
inline constexpr std::size_t kClockBlock = 16;
inline std::size_t clock_size(std::size_t components) {
  return (components + kClockBlock - 1) / kClockBlock * kClockBlock;
}

// dst = max(dst, src), elementwise; both of clock_size entries. Out of line, in a unit
// built with -ftree-vectorize (src/exec/CMakeLists.txt): it is the executor's hot loop.
// Returns whether dst changed.
bool join_into(ClockVec& dst, const ClockVec& src);
// Whether max(a, b) == a, i.e. b adds nothing to a.
bool dominates(const ClockVec& a, const ClockVec& b);

inline bool join_into(ClockVec& dst, const ClockRef& src) {
  bool changed = join_into(dst, *src.base);
  auto& own = dst[static_cast<std::size_t>(src.comp)];
  if (src.seq > own) {
    own = src.seq;
    changed = true;
  }
  return changed;
}

}  // namespace tide::exec::detail
