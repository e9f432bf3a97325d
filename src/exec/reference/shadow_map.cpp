// The interval map of ShadowMap: split at access boundaries, coalesce on writes.
#include "shadow_map.hpp"

#include <iterator>
#include <utility>

namespace tide::exec::detail {

ShadowMap::ShadowMap(std::int64_t size) : size_(size) {
  if (size > 0) pieces_.emplace(0, Piece{size, Shadow{}});
}

void ShadowMap::split(std::int64_t at) {
  if (at <= 0 || at >= size_) return;
  auto it = pieces_.upper_bound(at);
  --it;  // the piece containing `at`
  if (it->first == at) return;
  Piece tail{it->second.end, it->second.shadow};
  it->second.end = at;
  pieces_.emplace_hint(std::next(it), at, std::move(tail));
}

void ShadowMap::assign(std::int64_t begin, std::int64_t end, Shadow shadow) {
  if (begin >= end) return;
  split(begin);
  split(end);
  auto first = pieces_.find(begin);
  auto last = pieces_.lower_bound(end);
  pieces_.erase(first, last);
  auto it = pieces_.emplace(begin, Piece{end, std::move(shadow)}).first;
  // Coalesce with equal neighbours.
  auto next = std::next(it);
  if (next != pieces_.end() && next->second.shadow == it->second.shadow) {
    it->second.end = next->second.end;
    pieces_.erase(next);
  }
  if (it != pieces_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end == it->first && prev->second.shadow == it->second.shadow) {
      prev->second.end = it->second.end;
      pieces_.erase(it);
    }
  }
}

}  // namespace tide::exec::detail
