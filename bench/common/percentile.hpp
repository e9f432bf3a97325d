// The benchmarks' one order statistic: the q-quantile of a sample by nearest rank (q in [0, 1];
// 0 for an empty sample). Medians, p10 and p90 in bench/results/ are this function's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tide::bench {

inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace tide::bench
