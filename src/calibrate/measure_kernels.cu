// Per-CTA and full-grid rates of TIDE's SM kernels for `tide calibrate` (App. G BW_sum,
// BW_land, BW_cap; the cost model's sum_cta_gbps, land_cta_gbps, land_cap_gbps,
// cast_cta_gbps). The Level 1 sum counts logical bytes as the paper does (8 bf16 reads + 1
// fp32 write per element, L = 8); the landing counts fp32 output bytes (Eq. 14 divides
// S_fp32 by it); the cast counts source + destination bytes. Inputs rotate over sets larger
// than the L2; each point is the median of CUDA-event-timed launches.
#include <cuda_runtime_api.h>

#include <set>
#include <string>
#include <vector>

#include "measure_parts.hpp"
#include "tide/calibrate/level1_problem.hpp"
#include "tide/calibrate/timing.hpp"
#include "tide/core/cta_budgets.hpp"
#include "tide/kernels/cast.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"

namespace tide::calibrate::detail {
namespace {

double gbps(double bytes, double ms) {
  return bytes / (ms * 1e-3) / 1e9;
}

std::vector<int> cta_counts(const Context& c, int extra) {
  std::set<int> counts = {1, 2, 4, 8, 16, 32, extra, c.sms};
  return {counts.begin(), counts.end()};
}

void measure_sum(Context& c, Stream& s) {
  const std::int64_t width = c.options.quick ? (1 << 18) : (1 << 20);
  const Level1Problem problem(width, 3);
  nlohmann::json per_cta = nlohmann::json::object();
  double at_budget = 0, full = 0;
  for (int ctas : cta_counts(c, c.options.sum_ctas)) {
    const kernels::Level1Tuning tuning = kernels::recommended_level1_tuning(ctas);
    const double ms = median_ms(s, 2, c.reps(ctas <= 2 ? 8 : 20), [&](int i) {
      kernels::launch_level1_sum(problem.args(i, ctas), s, tuning);
    });
    const double rate = gbps(problem.logical_bytes(), ms);
    per_cta[std::to_string(ctas)] = rate / ctas;
    if (ctas == c.options.sum_ctas) at_budget = rate / ctas;
    if (ctas == c.sms) full = rate;
  }
  c.measured("sum_cta_gbps", at_budget,
             "Level 1 sum, L=8 bf16 -> fp32, 8 x " + std::to_string(width) + " block, " +
                 std::to_string(c.options.sum_ctas) +
                 " CTAs (--sum-ctas), recommended tuning, logical bytes (8x2 read + 4 written "
                 "per element) / time / CTAs");
  c.out.details["level1_sum"] = {{"block_rows", Level1Problem::kRows},
                                 {"block_width", width},
                                 {"logical_bytes_per_launch", problem.logical_bytes()},
                                 {"gbps_per_cta_by_ctas", per_cta},
                                 {"full_grid_gbps", full},
                                 {"full_grid_ctas", c.sms}};
  c.say("Level 1 sum: " + std::to_string(at_budget) + " GB/s per CTA at " +
        std::to_string(c.options.sum_ctas) + " CTAs, full grid " + std::to_string(full) + " GB/s");
}

// Peer-capable devices other than ours (partials are pulled from them when there are any).
std::vector<int> peer_devices(const Context& c) {
  std::vector<int> peers;
  for (int d = 0; d < c.device_count; ++d) {
    int can = 0;
    if (d != c.device && cudaDeviceCanAccessPeer(&can, c.device, d) == cudaSuccess && can)
      peers.push_back(d);
  }
  return peers;
}

void measure_landing(Context& c, Stream& s) {
  constexpr int kWave = 8;
  const std::int64_t n = c.options.quick ? (std::int64_t{4} << 20) : (std::int64_t{16} << 20);
  const std::size_t bytes = static_cast<std::size_t>(n) * 4;
  const std::vector<int> peers = peer_devices(c);
  for (int d : peers) {
    const cudaError_t e = cudaDeviceEnablePeerAccess(d, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) TIDE_CUDA_CHECK(e);
    (void)cudaGetLastError();
  }
  constexpr int kSets = 2;
  std::vector<DeviceBuffer> partials, outs;
  for (int set = 0; set < kSets; ++set) {
    for (int w = 0; w < kWave; ++w) {
      const int dev = peers.empty() ? c.device : peers[static_cast<std::size_t>(w) % peers.size()];
      TIDE_CUDA_CHECK(cudaSetDevice(dev));
      partials.emplace_back(bytes);
      fill_random(partials.back().get(), n, 4, 77 + static_cast<std::uint64_t>(set * kWave + w),
                  nullptr);
      TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    }
    TIDE_CUDA_CHECK(cudaSetDevice(c.device));
    outs.emplace_back(bytes);
  }
  auto args = [&](int set, int ctas) {
    kernels::LandingArgs a;
    a.out = outs[static_cast<std::size_t>(set)].as<float>();
    a.n = n;
    for (int w = 0; w < kWave; ++w)
      a.partials[w] = partials[static_cast<std::size_t>(set * kWave + w)].as<float>();
    a.num_partials = kWave;
    a.ctas = ctas;
    return a;
  };
  nlohmann::json per_cta = nlohmann::json::object();
  double at_budget = 0, full = 0;
  for (int ctas : cta_counts(c, c.options.landing_ctas)) {
    const double ms = median_ms(s, 1, c.reps(ctas <= 2 ? 6 : 16), [&](int i) {
      kernels::launch_landing(args(i % kSets, std::min(ctas, kernels::kMaxLandingCtas)), s);
    });
    const double rate = gbps(static_cast<double>(bytes), ms);
    per_cta[std::to_string(ctas)] = rate / ctas;
    if (ctas == c.options.landing_ctas) at_budget = rate / ctas;
    if (ctas == c.sms) full = rate;
  }
  const std::string where =
      peers.empty()
          ? "W=8 local fp32 partials (one GPU: in-situ NVLink pulls are slower, the "
            "paper's 21 GB/s/CTA)"
          : "W=8 fp32 partials pulled from " + std::to_string(peers.size()) + " peer GPU(s)";
  c.measured("land_cta_gbps", at_budget,
             "pull landing, " + where + ", " + std::to_string(c.options.landing_ctas) +
                 " CTAs (--landing-ctas), fp32 output bytes / time / CTAs");
  c.measured("land_cap_gbps", full,
             "pull landing, " + where + ", full grid (" + std::to_string(c.sms) +
                 " CTAs), fp32 output bytes / time");
  c.out.details["landing"] = {{"wave", kWave},
                              {"out_elems", n},
                              {"peer_devices", peers},
                              {"out_gbps_per_cta_by_ctas", per_cta},
                              {"full_grid_out_gbps", full}};
  c.say("landing: " + std::to_string(at_budget) + " GB/s per CTA at " +
        std::to_string(c.options.landing_ctas) + " CTAs, ceiling " + std::to_string(full) +
        " GB/s (" + (peers.empty() ? "local" : "peer") + ")");
}

void measure_cast(Context& c, Stream& s) {
  const std::int64_t n = c.options.quick ? (std::int64_t{16} << 20) : (std::int64_t{64} << 20);
  DeviceBuffer src[2] = {DeviceBuffer(static_cast<std::size_t>(n) * 4),
                         DeviceBuffer(static_cast<std::size_t>(n) * 4)};
  DeviceBuffer dst[2] = {DeviceBuffer(static_cast<std::size_t>(n) * 2),
                         DeviceBuffer(static_cast<std::size_t>(n) * 2)};
  for (auto& b : src)
    fill_random(b.get(), n, 4, 5, nullptr);
  constexpr int kCtas = kDefaultCastCtas;  // TIDE-AG's cast budget
  const double ms = median_ms(s, 1, c.reps(8), [&](int i) {
    kernels::launch_cast_fp32_to_bf16(dst[i % 2].as<std::uint16_t>(), src[i % 2].as<float>(), n, s,
                                      kCtas);
  });
  const double rate = gbps(static_cast<double>(n) * 6, ms);
  c.measured("cast_cta_gbps", rate / kCtas,
             "fp32 -> bf16 cast, " + std::to_string(n) +
                 " elements, 4 CTAs (TIDE-AG's budget), (4 + 2) bytes per element / time / CTAs");
  c.out.details["cast"] = {{"elems", n}, {"ctas", kCtas}, {"gbps", rate}};
}

}  // namespace

void measure_kernels(Context& c) {
  Stream s;
  measure_sum(c, s);
  measure_landing(c, s);
  measure_cast(c, s);
}

}  // namespace tide::calibrate::detail
