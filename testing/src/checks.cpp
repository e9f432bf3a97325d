#include "tide/testing/checks.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tide/core/arithmetic.hpp"
#include "tide/core/error.hpp"
#include "tide/testing/random.hpp"

namespace tide::testing {
namespace {

// Item i as a number: fp32, bf16, or a 1-byte item's code 0..255 (NOTE [1-byte all-gather
// items]: compared as bytes, its "error" is a code distance).
double element(const std::byte* base, std::int64_t i, std::int64_t item) {
  if (item == 1) return static_cast<double>(std::to_integer<std::uint8_t>(base[i]));
  if (item == 4) {
    float f;
    std::memcpy(&f, base + i * 4, 4);
    return static_cast<double>(f);
  }
  std::uint16_t w;
  std::memcpy(&w, base + i * 2, 2);
  return static_cast<double>(arith::bf16_to_float(w));
}

double error_of(double diff) {
  return std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
}

}  // namespace

std::vector<AgShard> random_shards(std::mt19937_64& rng, const GroupLayout& layout, bool cast) {
  const std::int64_t item = item_bytes(layout.ag_dtype());
  std::vector<AgShard> shards(static_cast<std::size_t>(layout.topology().world()));
  for (AgShard& shard : shards) {
    shard.packed.resize(static_cast<std::size_t>(layout.shard_bytes()));
    for (const ParamLayout& pl : layout.params()) {
      std::vector<float> master =
          random_values(rng, pl.shard_elems(), cast ? DType::kFp32 : layout.ag_dtype());
      store_values(master, layout.ag_dtype(),
                   std::span<std::byte>(shard.packed)
                       .subspan(static_cast<std::size_t>(pl.offset),
                                static_cast<std::size_t>(pl.shard_elems() * item)));
      shard.master.push_back(std::move(master));
    }
  }
  return shards;
}

void check_landing(const GroupLayout& layout, const std::vector<AgShard>& shards,
                   const std::function<std::span<const std::byte>(int)>& seen,
                   const OutputSink& record, CheckResult& result) {
  const std::int64_t item = item_bytes(layout.ag_dtype());
  for (int r = 0; r < layout.topology().world(); ++r) {
    const std::span<const std::byte> view = seen(r);
    if (static_cast<std::int64_t>(view.size()) != layout.unsharded_bytes()) {
      throw InternalError("the all-gather program has no consumer output to check");
    }
    record(view);
    for (int u = 0; u < layout.topology().world(); ++u) {
      for (int p = 0; p < layout.param_count(); ++p) {
        const ParamLayout& pl = layout.param(p);
        const std::byte* got = view.data() + layout.landing_offset(p, u);
        const std::byte* want = shards[static_cast<std::size_t>(u)].packed.data() + pl.offset;
        if (std::memcmp(got, want, static_cast<std::size_t>(pl.shard_bytes)) == 0) continue;
        result.bitwise = false;
        for (std::int64_t i = 0; i < pl.shard_elems(); ++i) {
          result.max_abs_error =
              std::max(result.max_abs_error,
                       error_of(std::abs(element(got, i, item) - element(want, i, item))));
        }
      }
    }
  }
}

void check_reduce_scatter(const RsPlan& plan, const std::vector<RankGrads>& grads, float alpha,
                          bool accumulate, const std::vector<std::vector<float>>& initial,
                          const std::function<std::span<const std::byte>(int)>& out,
                          const OutputSink& record, CheckResult& result) {
  if (!plan.one_node() || !accumulate) {
    check_reduce_scatter(plan.layout(), rs_expected(plan, grads, alpha, accumulate, initial), grads,
                         alpha, accumulate, initial, out, record, result);
    return;
  }
  // The one-node layout writes padding as +0 even when accumulating (NOTE [arithmetic order]):
  // the float64 reference starts its padding from +0 too.
  const GroupLayout& layout = plan.layout();
  std::vector<std::vector<float>> start = initial;
  for (int r = 0; r < layout.topology().world(); ++r) {
    auto& row = start[static_cast<std::size_t>(r)];
    for (std::int64_t e = 0; e < layout.shard_elems(); ++e) {
      if (grad_at(layout, grads, r, r, e) == nullptr) row[static_cast<std::size_t>(e)] = 0.0f;
    }
  }
  check_reduce_scatter(layout, rs_expected(plan, grads, alpha, accumulate, initial), grads, alpha,
                       accumulate, start, out, record, result);
}

void check_reduce_scatter(const GroupLayout& layout, const std::vector<std::vector<float>>& exact,
                          const std::vector<RankGrads>& grads, float alpha, bool accumulate,
                          const std::vector<std::vector<float>>& initial,
                          const std::function<std::span<const std::byte>(int)>& out,
                          const OutputSink& record, CheckResult& result) {
  const auto ref = rs_float64(layout, grads, static_cast<double>(alpha), accumulate, initial);
  double norm = 1;
  for (const auto& row : ref) {
    for (double y : row)
      norm = std::max(norm, std::abs(y));
  }
  result.tolerance = std::max(result.tolerance, 1e-5 * norm);
  for (int r = 0; r < layout.topology().world(); ++r) {
    const std::span<const std::byte> bytes = out(r);
    record(bytes);
    const auto& want = exact[static_cast<std::size_t>(r)];
    const auto& ref_r = ref[static_cast<std::size_t>(r)];
    if (bytes.size() != want.size() * 4) {
      throw InternalError("the reduce-scatter output has the wrong size");
    }
    for (std::size_t e = 0; e < ref_r.size(); ++e) {
      float got;
      std::memcpy(&got, bytes.data() + 4 * e, 4);
      result.max_abs_error =
          std::max(result.max_abs_error, error_of(std::abs(static_cast<double>(got) - ref_r[e])));
      if (std::memcmp(&got, &want[e], 4) != 0) result.bitwise = false;
    }
  }
}

}  // namespace tide::testing
