// Host-only parts of the interference benchmark that need no GPU: the row list (with the
// --rows / --max-rows filter) and Eq. 4's arithmetic (paper Sec. 2.2). `tide_interference_bench
// --self-check` runs check_model() without touching CUDA (docs/interference.md).
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tide::bench {

struct Load {
  std::string kind;  // "none", "spin", "persistent", "tide-level1"
  int ctas = 0;
  int cluster = 1;
  std::string label() const {
    return kind + " c" + std::to_string(cluster) + " x" + std::to_string(ctas);
  }
};

// The --rows name of a load kind: level1, persistent, spin.
inline std::string row_group(const std::string& kind) {
  return kind == "tide-level1" ? "level1" : kind;
}

// Every row, in the order that matters: TIDE's Level 1 sum, the NCCL-style persistent
// reduction (cluster 1 then 4), resident spin loads (cluster 1 then 4).
inline std::vector<Load> all_rows(bool quick) {
  std::vector<Load> out;
  const std::vector<int> sum = quick ? std::vector<int>{4, 16} : std::vector<int>{4, 8, 16};
  const std::vector<int> pers = quick ? std::vector<int>{16} : std::vector<int>{8, 16};
  const std::vector<int> single =
      quick ? std::vector<int>{1, 4, 16} : std::vector<int>{1, 2, 4, 8, 16, 32};
  const std::vector<int> clustered =
      quick ? std::vector<int>{4, 16} : std::vector<int>{4, 8, 16, 32};
  for (int c : sum)
    out.push_back({"tide-level1", c, 1});
  for (int cluster : {1, 4})
    for (int c : pers)
      out.push_back({"persistent", c, cluster});
  for (int c : single)
    out.push_back({"spin", c, 1});
  for (int c : clustered)
    out.push_back({"spin", c, 4});
  return out;
}

// Splits "a,b,c" (empty pieces dropped).
inline std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s + ",") {
    if (ch == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return out;
}

inline bool known_group(const std::string& g) {
  return g == "level1" || g == "persistent" || g == "spin";
}

// The rows to run: `groups` empty means all; order stays all_rows' order; at most max_rows
// (< 0: no limit).
inline std::vector<Load> select_rows(bool quick, const std::vector<std::string>& groups,
                                     int max_rows) {
  std::vector<Load> out;
  for (const Load& x : all_rows(quick)) {
    if (!groups.empty() &&
        std::find(groups.begin(), groups.end(), row_group(x.kind)) == groups.end())
      continue;
    if (max_rows >= 0 && static_cast<int>(out.size()) >= max_rows) break;
    out.push_back(x);
  }
  return out;
}

// Eq. 4 as a slowdown: ceil(n_gemm / (n_slot - n_blk)) / ceil(n_gemm / n_slot) - 1; nullopt
// when a term is unknown (n_gemm or n_slot <= 0) or the load leaves no slot.
inline std::optional<double> eq4_slowdown(int n_gemm, int n_slot, double n_blk) {
  if (n_gemm <= 0 || n_slot <= 0) return std::nullopt;
  const double free = n_slot - n_blk;
  if (free <= 0) return std::nullopt;
  return std::ceil(n_gemm / free) / std::ceil(static_cast<double>(n_gemm) / n_slot) - 1.0;
}

// One victim's terms of Eq. 4: n_gemm clusters of g CTAs, n_slot slots for that shape, and the
// SMs outside any slot.
struct Eq4Victim {
  int n_gemm = 0;
  int g = 1;
  int n_slot = 0;
  int spare = 0;
  bool estimate = false;
  // n_blk from the paper's rule. Best placement (low): single load CTAs fill the spare SMs
  // first, the rest pack g to a slot; clustered ones block ceil(c / g) slots per cluster.
  // Worst placement (high): single CTAs spread, one slot each; clusters as low.
  std::pair<double, double> blk(int ctas, int cluster) const {
    if (cluster > 1 && cluster >= g) {
      const double b = std::ceil(ctas / static_cast<double>(cluster)) *
                       std::ceil(cluster / static_cast<double>(g));
      return {b, b};
    }
    const int fit_spare = cluster == 1 ? spare : 0;
    const double lo = std::max(0.0, std::ceil((ctas - fit_spare) / static_cast<double>(g)));
    const double hi = std::max(lo, static_cast<double>(std::min(ctas, n_slot)));
    return {lo, hi};
  }
};

// Pure checks of the above (no GPU); returns the failures, empty when all hold.
inline std::vector<std::string> check_model() {
  std::vector<std::string> fail;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) fail.push_back(what);
  };
  auto near = [](std::optional<double> v, double want) {
    return v.has_value() && std::fabs(*v - want) < 1e-12;
  };
  // The H200 GEMM of the first run: 64 two-CTA clusters in 66 slots.
  expect(near(eq4_slowdown(64, 66, 0), 0.0), "eq4(64, 66, 0) = 0");
  expect(near(eq4_slowdown(64, 66, 2), 0.0), "eq4(64, 66, 2) = 0 (one wave)");
  expect(near(eq4_slowdown(64, 66, 3), 1.0), "eq4(64, 66, 3) = +100% (second wave)");
  expect(near(eq4_slowdown(32, 33, 1), 0.0), "paper: 32 clusters, 33 slots, 1 blocked: 0");
  expect(near(eq4_slowdown(32, 33, 2), 1.0), "paper: 2 blocked: +100%");
  expect(!eq4_slowdown(64, 0, 0), "n_slot 0: unknown");
  expect(!eq4_slowdown(0, 66, 0), "n_gemm 0: unknown");
  expect(!eq4_slowdown(64, 66, 66), "no slot left: unknown");
  const Eq4Victim gemm{64, 2, 66, 0, true};
  expect(gemm.blk(4, 1) == std::make_pair(2.0, 4.0), "4 single CTAs block 2..4 two-CTA slots");
  expect(gemm.blk(8, 4) == std::make_pair(4.0, 4.0), "two 4-CTA clusters block 4 slots");
  const Eq4Victim probe{29, 4, 30, 12, false};
  expect(probe.blk(12, 1) == std::make_pair(0.0, 12.0), "12 single CTAs fit the 12 spare SMs");
  expect(probe.blk(16, 1) == std::make_pair(1.0, 16.0), "16 single CTAs: 1..16 slots");
  const std::vector<Load> all = all_rows(false);
  expect(all.size() == 3 + 4 + 6 + 4, "17 full rows");
  expect(!all.empty() && all.front().kind == "tide-level1", "Level 1 rows first");
  expect(all_rows(true).size() == 2 + 2 + 3 + 2, "9 quick rows");
  const std::vector<Load> spin = select_rows(false, {"spin"}, -1);
  expect(spin.size() == 10 && spin.front().label() == "spin c1 x1", "--rows spin");
  const std::vector<Load> two = select_rows(false, {"spin", "level1"}, 4);
  expect(two.size() == 4 && two[0].kind == "tide-level1" && two[3].label() == "spin c1 x1",
         "--rows spin,level1 --max-rows 4 keeps the row order");
  expect(select_rows(false, {}, 0).empty(), "--max-rows 0");
  expect(split_names("level1,,spin") == std::vector<std::string>{"level1", "spin"}, "split");
  return fail;
}

}  // namespace tide::bench
