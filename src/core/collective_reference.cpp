// Expected reduce-scatter outputs from the definition. See the header.
#include "tide/core/collective_reference.hpp"

#include <cstring>
#include <string>

#include "tide/core/arithmetic.hpp"
#include "tide/core/error.hpp"

namespace tide {

float random_value(std::mt19937_64& rng, DType dtype) {
  if (item_bytes(dtype) == 1) {  // NOTE [1-byte all-gather items]: a byte code, never 0
    return static_cast<float>(1 + rng() % 255);
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float x = normal(rng);
  return dtype == DType::kBf16 ? arith::bf16_to_float(arith::float_to_bf16(x)) : x;
}

void store_values(std::span<const float> values, DType dtype, std::span<std::byte> out) {
  const std::size_t item = static_cast<std::size_t>(item_bytes(dtype));
  if (out.size() != values.size() * item) {
    throw InternalError("store_values: " + std::to_string(values.size()) + " values do not fill " +
                        std::to_string(out.size()) + " bytes");
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::kBf16: {
        const std::uint16_t w = arith::float_to_bf16(values[i]);
        std::memcpy(out.data() + 2 * i, &w, 2);
        break;
      }
      case DType::kFp32:
        std::memcpy(out.data() + 4 * i, &values[i], 4);
        break;
      case DType::kFp8:
      case DType::kU8: {
        const float v = values[i];
        if (!(v >= 0.0f && v <= 255.0f) || v != static_cast<float>(static_cast<int>(v))) {
          throw InternalError("store_values: " + std::to_string(v) + " is not a " +
                              std::string(dtype_name(dtype)) + " byte code (0..255)");
        }
        out[i] = static_cast<std::byte>(static_cast<std::uint8_t>(v));
        break;
      }
    }
  }
}

std::vector<RankGrads> random_grads(std::mt19937_64& rng, const GroupLayout& layout) {
  std::vector<RankGrads> grads(static_cast<std::size_t>(layout.topology().world()));
  for (RankGrads& rank : grads) {
    for (const ParamLayout& p : layout.params()) {
      std::vector<float> values(static_cast<std::size_t>(p.rows * p.cols));
      for (float& v : values)
        v = random_value(rng, layout.grad_dtype());
      rank.push_back(std::move(values));
    }
  }
  return grads;
}

const float* grad_at(const GroupLayout& layout, const std::vector<RankGrads>& grads, int rank,
                     int destination, std::int64_t e) {
  for (int p = 0; p < layout.param_count(); ++p) {
    const ParamLayout& pl = layout.param(p);
    if (e < pl.out_offset || e >= pl.out_offset + pl.shard_elems()) continue;
    const std::int64_t index = destination * pl.shard_elems() + (e - pl.out_offset);
    if (index >= pl.rows * pl.cols) return nullptr;
    return &grads[static_cast<std::size_t>(rank)][static_cast<std::size_t>(p)]
                 [static_cast<std::size_t>(index)];
  }
  return nullptr;
}

std::vector<std::vector<float>> rs_expected(const RsPlan& plan, const std::vector<RankGrads>& grads,
                                            float alpha, bool accumulate,
                                            const std::vector<std::vector<float>>& initial) {
  const GroupLayout& layout = plan.layout();
  const Topology& t = layout.topology();
  const int m = t.nodes();
  std::vector<std::vector<float>> out = initial;
  for (int r = 0; r < t.world(); ++r) {
    const int dest_node = t.node_of(r);
    auto& row = out[static_cast<std::size_t>(r)];
    for (const RsWave& wave : plan.waves()) {
      for (int s = 0; s < t.gpus_per_node(); ++s) {
        for (const RsLandingRun& run : plan.landing_runs(wave.pass, s, t.local_of(r))) {
          for (std::int64_t e = run.span_offset; e < run.span_offset + run.length; ++e) {
            std::vector<float> partials;
            for (int c = wave.first_contributor; c <= wave.last_contributor; ++c) {
              const int sender = c == m ? dest_node : mod(dest_node - c, m);
              const int owner = plan.destination_gpu(s, c);
              const float* own = grad_at(layout, grads, t.rank(sender, owner), r, e);
              if (own == nullptr) {
                partials.push_back(0.0f);
                continue;
              }
              std::vector<float> staged;
              for (int k = 0; k < t.gpus_per_node(); ++k) {
                if (k != owner) staged.push_back(*grad_at(layout, grads, t.rank(sender, k), r, e));
              }
              partials.push_back(arith::level1_partial(staged, *own, alpha));
            }
            float& y = row[static_cast<std::size_t>(e)];
            // The one-node layout writes padding as +0, accumulating or not (NOTE [arithmetic
            // order], one-node layout).
            if (plan.one_node() && grad_at(layout, grads, r, r, e) == nullptr) {
              y = 0.0f;
              continue;
            }
            y = arith::land(y, arith::wave_sum(partials), wave.wave_in_pass, accumulate);
          }
        }
      }
    }
  }
  return out;
}

std::vector<std::vector<float>> ep_rs_expected(const GroupLayout& layout,
                                               const std::vector<RankGrads>& grads, float alpha,
                                               bool accumulate,
                                               const std::vector<std::vector<float>>& initial) {
  const int m = layout.topology().world();
  std::vector<std::vector<float>> out = initial;
  for (int r = 0; r < m; ++r) {
    auto& row = out[static_cast<std::size_t>(r)];
    row.resize(static_cast<std::size_t>(layout.shard_elems()));
    for (std::int64_t e = 0; e < layout.shard_elems(); ++e) {
      float part = 0.0f;
      if (const float* own = grad_at(layout, grads, r, r, e)) {
        std::vector<float> arrivals;
        for (int c = 1; c < m; ++c)
          arrivals.push_back(*grad_at(layout, grads, mod(r - c, m), r, e));
        part = arith::level1_partial(arrivals, *own, alpha);
      }
      float& y = row[static_cast<std::size_t>(e)];
      y = accumulate ? arith::add(y, part) : part;
    }
  }
  return out;
}

std::vector<std::vector<double>> rs_float64(const GroupLayout& layout,
                                            const std::vector<RankGrads>& grads, double alpha,
                                            bool accumulate,
                                            const std::vector<std::vector<float>>& initial) {
  const Topology& t = layout.topology();
  std::vector<std::vector<double>> out(static_cast<std::size_t>(t.world()));
  for (int r = 0; r < t.world(); ++r) {
    for (std::int64_t e = 0; e < layout.shard_elems(); ++e) {
      double sum = 0;
      for (int u = 0; u < t.world(); ++u) {
        if (const float* v = grad_at(layout, grads, u, r, e)) sum += static_cast<double>(*v);
      }
      double y = alpha * sum;
      if (accumulate) {
        y += static_cast<double>(initial[static_cast<std::size_t>(r)][static_cast<std::size_t>(e)]);
      }
      out[static_cast<std::size_t>(r)].push_back(y);
    }
  }
  return out;
}

}  // namespace tide
