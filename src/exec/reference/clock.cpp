// The elementwise max of vector clocks, vectorised (see clock.hpp).
#include "clock.hpp"

namespace tide::exec::detail {

bool join_into(ClockVec& dst, const ClockVec& src) {
  std::uint32_t* d = dst.data();
  const std::uint32_t* s = src.data();
  std::uint32_t changed = 0;
  for (std::size_t i = 0; i < dst.size(); i += kClockBlock) {
    for (std::size_t j = 0; j < kClockBlock; ++j) {
      changed |= s[i + j] > d[i + j] ? 1u : 0u;
      d[i + j] = d[i + j] > s[i + j] ? d[i + j] : s[i + j];
    }
  }
  return changed != 0;
}

bool dominates(const ClockVec& a, const ClockVec& b) {
  const std::uint32_t* x = a.data();
  const std::uint32_t* y = b.data();
  for (std::size_t i = 0; i < a.size(); i += kClockBlock) {
    std::uint32_t later = 0;
    for (std::size_t j = 0; j < kClockBlock; ++j)
      later |= y[i + j] > x[i + j] ? 1u : 0u;
    if (later) return false;
  }
  return true;
}

}  // namespace tide::exec::detail
