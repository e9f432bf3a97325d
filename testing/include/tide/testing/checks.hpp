// Collective data checked against the paper's equations rather than an executor: random
// shards for an all-gather and the comparisons against Eq. 2 (all-gather placement, bit for
// bit) and Eq. 5 (reduce-scatter: TIDE's arithmetic order bit for bit, and float64 within
// 1e-5 x max(1, ||y||_inf)). Used by `tide simulate` (one call and a step); cases.hpp holds the
// runnable cases compared across executors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "tide/core/collective_reference.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/rs_plan.hpp"

namespace tide::testing {

// One rank's all-gather input: the packed shard (P shards in the all-gather dtype) and the
// values it holds as floats (per parameter; for a mixed-precision cast, the fp32 masters the
// bf16 shard was rounded from).
struct AgShard {
  std::vector<std::byte> packed;
  std::vector<std::vector<float>> master;
};

// Fresh random shards for every rank; with `cast`, from random fp32 masters.
std::vector<AgShard> random_shards(std::mt19937_64& rng, const GroupLayout& layout, bool cast);

// Receives every output a check reads, in order (the CLI fingerprints them).
using OutputSink = std::function<void(std::span<const std::byte>)>;

struct CheckResult {
  bool bitwise = true;
  double max_abs_error = 0;
  double tolerance = 0;
};

// Eq. 2: rank u's shard of parameter p at Landing(p, u) in what rank r saw (`seen(r)`).
void check_landing(const GroupLayout& layout, const std::vector<AgShard>& shards,
                   const std::function<std::span<const std::byte>(int)>& seen,
                   const OutputSink& record, CheckResult& result);

// Eq. 5 on every rank's fp32 shard (`out(r)`): bitwise against the arithmetic order, max
// error and tolerance against float64.
void check_reduce_scatter(const RsPlan& plan, const std::vector<RankGrads>& grads, float alpha,
                          bool accumulate, const std::vector<std::vector<float>>& initial,
                          const std::function<std::span<const std::byte>(int)>& out,
                          const OutputSink& record, CheckResult& result);
// The same against a given arithmetic order: `exact[r]` is what rank r's shard must hold bit
// for bit (e.g. ep_rs_expected for an expert-parallel lane).
void check_reduce_scatter(const GroupLayout& layout, const std::vector<std::vector<float>>& exact,
                          const std::vector<RankGrads>& grads, float alpha, bool accumulate,
                          const std::vector<std::vector<float>>& initial,
                          const std::function<std::span<const std::byte>(int)>& out,
                          const OutputSink& record, CheckResult& result);

}  // namespace tide::testing
