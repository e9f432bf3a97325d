// The interference benchmark's driver (docs/interference.md): isolated victim medians, then
// each victim next to each load, with Eq. 4's prediction beside every measurement.
//
// Row order (the comparison that matters first): TIDE's Level 1 sum (4, 8, 16 short-lived
// CTAs) and the NCCL-style persistent reduction (8, 16 CTAs, cluster 1 and 4) moving the same
// bytes, then resident spin loads (cluster 1: 1..32 CTAs; cluster 4: 4..32). JSON and markdown
// are rewritten after every row, and rows stop at --budget-s, so a timeout still leaves results.
//
// Steps of one measurement (victim V, load X):
// 1. reset the device flags (started, stop, tick) and the probe's records, and sync;
// 2. spin: launch X on the load stream; the victim stream waits (stream memop) until every
//    load CTA has incremented `started` (all resident), runs V `reps` times between event
//    pairs, then writes stop, and the spin CTAs leave. Every V launch overlaps all X CTAs;
//    persistent: launch X; the victim stream waits until every X CTA is resident and the first
//    round is released (tick >= 1); the host releases one round every gap_us (stream memop on
//    the rail stream); V runs back to back for about the transfer. X's CTAs stay resident
//    (polling) from before the first V launch to the last round;
//    tide-level1: one Level 1 sum launch per round, each waiting (stream memop, no SM) for its
//    round; the victim stream waits for round 1 only, so the first sum launch and the first V
//    launch start together and later sums overlap whichever V runs then, as in training;
// 3. wait for both streams (a host watchdog releases every flag after 3 s, the row is marked
//    timed out); V's slowdown is its median (and min) over its isolated median (and min),
//    counted over the V launches that started before the transfer ended; the probe's windows
//    give first-wave clusters and displaced CTAs; the load's records give its SMs.
//
// Usage: tide_interference_bench [--json PATH] [--md PATH] [--quick] [--budget-s S]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "interference.hpp"
#include "level1_problem.hpp"
#include "stream_memops.hpp"
#include "tide/kernels/cuda_check.hpp"
#include "tide/kernels/level1_sum.hpp"
#include "timing.hpp"

namespace {

using namespace tide::bench;
using nlohmann::json;
using tide::calibrate::DeviceBuffer;
using tide::calibrate::median;
using tide::calibrate::Stream;
using Clock = std::chrono::steady_clock;

struct Load {
  std::string kind;  // "none", "spin", "persistent", "tide-level1"
  int ctas = 0;
  int cluster = 1;
};

struct Setup {
  int sms = 0;
  bool quick = false;
  Stream victim, load, rail, rescue;
  DeviceBuffer flags{256};
  DeviceBuffer load_records{1024 * sizeof(CtaRecord)};
  // Transfers: `chunks` rounds, gap_us apart; each chunk is one Level 1 block of 8 x width.
  int chunks = 16;
  double gap_us = 500;
  std::int64_t width = 1 << 18;
  double watchdog_s = 3.0;
  std::unique_ptr<tide::calibrate::Level1Problem> level1;
  DeviceBuffer reduce_in, reduce_out;
  LoadFlags load_flags() const {
    auto* f = flags.as<std::uint32_t>();
    return {f, f + 16, f + 32};
  }
};

std::vector<CtaRecord> read_load_records(const Setup& s, int ctas) {
  std::vector<CtaRecord> r(static_cast<std::size_t>(ctas));
  TIDE_CUDA_CHECK(cudaMemcpy(r.data(), s.load_records.get(), r.size() * sizeof(CtaRecord),
                             cudaMemcpyDeviceToHost));
  return r;
}

struct Run {
  std::vector<double> victim_ms;  // the launches counted (see step 3)
  int launched = 0;
  double transfer_ms = 0;
  double residency = 0;   // fraction of the transfer with load CTAs resident
  double overlapped = 0;  // fraction of counted victim launches overlapping load CTAs
  std::set<std::uint32_t> load_sms;
  double load_max_resident_ms = 0;  // longest load CTA residence (spin: about the victim run)
  bool timed_out = false;
};

float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

// Waits for the victim, load and rail streams; after s.watchdog_s releases every flag from the
// rescue stream (a copy engine: it needs no SM) so a wait that never ends cannot hang the run.
bool wait_or_rescue(Setup& s) {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int>(s.watchdog_s * 1e3));
  auto idle = [&] {
    for (cudaStream_t st : {s.victim.get(), s.load.get(), s.rail.get()}) {
      const cudaError_t e = cudaStreamQuery(st);
      if (e == cudaErrorNotReady) return false;
      TIDE_CUDA_CHECK(e);
    }
    return true;
  };
  while (!idle()) {
    if (Clock::now() > deadline) {
      static const std::uint32_t release[48] = {
          0x7fffffffu, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,   // started
          1,           0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,   // stop
          0x7fffffffu, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};  // tick
      TIDE_CUDA_CHECK(cudaMemcpyAsync(s.flags.get(), release, sizeof(release),
                                      cudaMemcpyHostToDevice, s.rescue));
      TIDE_CUDA_CHECK(cudaDeviceSynchronize());
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// One victim next to one load (steps 1-3 in the header).
Run run_once(Setup& s, Victim& v, const Load& x, int reps, Probe* probe) {
  const LoadFlags f = s.load_flags();
  TIDE_CUDA_CHECK(cudaMemset(s.flags.get(), 0, s.flags.bytes()));
  TIDE_CUDA_CHECK(cudaMemset(s.load_records.get(), 0, s.load_records.bytes()));
  if (probe != nullptr) probe->clear();
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  Run run;
  run.launched = reps;
  std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * reps));
  for (auto& e : ev)
    TIDE_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<cudaEvent_t> chunk_ev;
  cudaEvent_t t_start = nullptr, t_end = nullptr;
  const bool transfer = x.kind == "persistent" || x.kind == "tide-level1";
  if (transfer) {
    TIDE_CUDA_CHECK(cudaEventCreate(&t_start));
    TIDE_CUDA_CHECK(cudaEventCreate(&t_end));
    TIDE_CUDA_CHECK(cudaEventRecord(t_start, s.load));
  }
  if (x.kind == "spin") {
    launch_spin(x.ctas, x.cluster, f, s.load_records.as<CtaRecord>(), s.load);
    tide::calibrate::stream_wait_geq_u32(s.victim, f.started, static_cast<std::uint32_t>(x.ctas));
  } else if (x.kind == "persistent") {
    ReduceArgs a;
    a.in = s.reduce_in.as<std::uint16_t>();
    a.chunk_elems = 8 * s.width;
    a.stride = a.chunk_elems * s.chunks;
    a.out = s.reduce_out.as<float>();
    a.chunks = s.chunks;
    launch_persistent_reduce(x.ctas, x.cluster, a, f, s.load_records.as<CtaRecord>(), s.load);
    // Every persistent CTA resident before the first victim launch.
    tide::calibrate::stream_wait_geq_u32(s.victim, f.started, static_cast<std::uint32_t>(x.ctas));
  } else if (x.kind == "tide-level1") {
    chunk_ev.resize(static_cast<std::size_t>(2 * s.chunks));
    for (auto& e : chunk_ev)
      TIDE_CUDA_CHECK(cudaEventCreate(&e));
    const tide::kernels::Level1Tuning tuning = tide::kernels::recommended_level1_tuning(x.ctas);
    for (int k = 0; k < s.chunks; ++k) {
      tide::calibrate::stream_wait_geq_u32(s.load, f.tick, static_cast<std::uint32_t>(k + 1));
      TIDE_CUDA_CHECK(cudaEventRecord(chunk_ev[static_cast<std::size_t>(2 * k)], s.load));
      tide::kernels::launch_level1_sum(s.level1->args(k, x.ctas), s.load, tuning);
      TIDE_CUDA_CHECK(cudaEventRecord(chunk_ev[static_cast<std::size_t>(2 * k + 1)], s.load));
    }
  }
  if (transfer) {
    TIDE_CUDA_CHECK(cudaEventRecord(t_end, s.load));
    // The victims start with the first network round.
    tide::calibrate::stream_wait_geq_u32(s.victim, f.tick, 1);
  }
  for (int i = 0; i < reps; ++i) {
    TIDE_CUDA_CHECK(cudaEventRecord(ev[static_cast<std::size_t>(2 * i)], s.victim));
    v.launch(i, s.victim);
    TIDE_CUDA_CHECK(cudaEventRecord(ev[static_cast<std::size_t>(2 * i + 1)], s.victim));
  }
  if (x.kind == "spin") tide::calibrate::stream_write_u32(s.victim, f.stop, 1);
  if (transfer) {
    // The rail: one round every gap_us, released by the host (TIDE's host-driven network path).
    const auto t0 = Clock::now();
    for (int k = 0; k < s.chunks; ++k) {
      std::this_thread::sleep_until(
          t0 + std::chrono::microseconds(static_cast<std::int64_t>(k * s.gap_us)));
      tide::calibrate::stream_write_u32(s.rail, f.tick, static_cast<std::uint32_t>(k + 1));
    }
  }
  run.timed_out = !wait_or_rescue(s);
  std::vector<std::pair<double, double>> load_busy;  // ms after t_start
  double t_end_ms = 0;
  if (transfer) {
    t_end_ms = elapsed(t_start, t_end);
    run.transfer_ms = t_end_ms;
    if (x.kind == "persistent") {
      load_busy.push_back({0.0, t_end_ms});
    } else {
      for (int k = 0; k < s.chunks; ++k)
        load_busy.push_back({elapsed(t_start, chunk_ev[static_cast<std::size_t>(2 * k)]),
                             elapsed(t_start, chunk_ev[static_cast<std::size_t>(2 * k + 1)])});
    }
    double busy = 0;
    for (const auto& [a, b] : load_busy)
      busy += b - a;
    run.residency = t_end_ms > 0 ? busy / t_end_ms : 0;
  }
  int overlapped = 0;
  for (int i = 0; i < reps; ++i) {
    const double ms =
        elapsed(ev[static_cast<std::size_t>(2 * i)], ev[static_cast<std::size_t>(2 * i + 1)]);
    if (!transfer) {
      run.victim_ms.push_back(ms);
      overlapped += x.kind == "spin" ? 1 : 0;
      continue;
    }
    const double a = elapsed(t_start, ev[static_cast<std::size_t>(2 * i)]);
    const double b = a + ms;
    if (a >= t_end_ms && !run.victim_ms.empty()) continue;  // after the transfer
    run.victim_ms.push_back(ms);
    bool hit = false;
    for (const auto& [la, lb] : load_busy)
      hit = hit || (la < b && lb > a);
    overlapped += hit ? 1 : 0;
  }
  run.overlapped =
      run.victim_ms.empty() ? 0 : overlapped / static_cast<double>(run.victim_ms.size());
  if (x.kind == "spin" || x.kind == "persistent") {
    for (const CtaRecord& r : read_load_records(s, x.ctas)) {
      if (r.end_ns == 0) continue;
      run.load_sms.insert(r.smid);
      run.load_max_resident_ms =
          std::max(run.load_max_resident_ms, static_cast<double>(r.end_ns - r.start_ns) * 1e-6);
    }
  }
  for (auto& e : ev)
    cudaEventDestroy(e);
  for (auto& e : chunk_ev)
    cudaEventDestroy(e);
  if (t_start) cudaEventDestroy(t_start);
  if (t_end) cudaEventDestroy(t_end);
  return run;
}

// Eq. 4 as a slowdown: ceil(n_gemm / (n_slot - n_blk)) / ceil(n_gemm / n_slot) - 1, or null
// when the load leaves no slot.
json eq4(int n_gemm, int n_slot, double n_blk) {
  const double free = n_slot - n_blk;
  if (n_gemm <= 0 || n_slot <= 0) return nullptr;
  if (free <= 0) return nullptr;
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

std::string pct(const json& v) {
  if (v.is_null()) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.1f%%", 100.0 * v.get<double>());
  return buf;
}

std::vector<Load> loads(bool quick) {
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

// The smallest spin-load CTA count whose median slowdown reached `threshold` (measured), and
// Eq. 4's smallest CTA count with a second wave under the worst (high n_blk) and best (low
// n_blk) placement.
json second_wave(const json& rows, const std::string& victim, const Eq4Victim& e, int cluster,
                 double threshold) {
  json out = {{"victim", victim}, {"cluster", cluster}, {"threshold", threshold}};
  json measured = nullptr;
  std::vector<int> tried;
  for (const json& r : rows) {
    if (r["victim"] != victim || r["load"] != "spin" || r["cluster"] != cluster) continue;
    tried.push_back(r["ctas"].get<int>());
    if (r["slowdown"].get<double>() >= threshold &&
        (measured.is_null() || r["ctas"].get<int>() < measured.get<int>()))
      measured = r["ctas"];
  }
  out["ctas_tried"] = tried;
  out["measured_first_ctas"] = measured;
  json hi = nullptr, lo = nullptr;
  for (int c = cluster; c <= 4 * e.n_slot * std::max(1, e.g) && e.n_gemm > 0; c += cluster) {
    const auto [blo, bhi] = e.blk(c, cluster);
    const json ph = eq4(e.n_gemm, e.n_slot, bhi), pl = eq4(e.n_gemm, e.n_slot, blo);
    if (hi.is_null() && (ph.is_null() || ph.get<double>() > 0)) hi = c;
    if (lo.is_null() && (pl.is_null() || pl.get<double>() > 0)) lo = c;
  }
  out["eq4_first_ctas_worst_placement"] = hi;
  out["eq4_first_ctas_best_placement"] = lo;
  return out;
}

std::string num(const json& v) {
  if (v.is_null()) return "n/a";
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v.get<double>());
  return buf;
}

void write_outputs(const json& out, const std::string& json_path, const std::string& md_path) {
  std::ofstream(json_path) << out.dump(2) << '\n';
  std::ofstream md(md_path);
  const json& p = out["probe"];
  const json& g = out["gemm_grid"];
  md << "# Interference on " << out["gpu"].get<std::string>() << " (" << out["sms"] << " SMs)\n\n"
     << "Probe: " << p["clusters"] << " clusters of " << p["cluster_size"] << " CTAs, "
     << p["smem_bytes"] << " B shared memory each; slots measured " << p["slots_measured"]
     << " (occupancy API " << p["slots_occupancy_api"] << "), " << p["spare_sms"]
     << " SMs outside any slot. GEMM: n_gemm = " << num(g["clusters"]) << " clusters of "
     << g["cluster_ctas"] << " CTA(s) (" << num(g["ctas"]) << " CTAs, tile " << g["tile_m"] << "x"
     << g["tile_n"] << ", split-k " << g["splitk"] << "; "
     << (g["estimate"].get<bool>() ? "an ESTIMATE: " : "") << g["how"].get<std::string>()
     << "), n_slot = " << g["slots_measured"] << " (whole-SM probe of that cluster size), "
     << g["spare_sms"] << " SMs outside. Transfers: " << out["transfer"]["chunks"] << " rounds "
     << out["transfer"]["gap_us"] << " us apart. " << out["status"].get<std::string>() << "\n\n"
     << "| victim | load | cluster | CTAs | reps | median ms | min ms | slowdown (median) | "
        "slowdown (min) | Eq. 4 | n_blk (model) | Eq. 4 (probe n_blk) | probe first-wave "
        "clusters, displaced (median, max, % windows) | load SMs | overlap | notes |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const json& r : out["rows"]) {
    std::string model = pct(r["eq4_low"]);
    if (r["eq4_low"] != r["eq4_high"]) model += " .. " + pct(r["eq4_high"]);
    std::string blk = num(r["n_blk_model"][0]);
    if (r["n_blk_model"][0] != r["n_blk_model"][1]) blk += " .. " + num(r["n_blk_model"][1]);
    if (r.contains("sm_share_bound")) {
      model = "n/a (SM share <= " + pct(r["sm_share_bound"]) + ")";
      blk = "";
    }
    std::string disp;
    if (r.contains("displaced_median")) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "%.0f; %.0f, %.0f, %.0f%%",
                    r["first_wave_clusters_median"].get<double>(),
                    r["displaced_median"].get<double>(), r["displaced_max"].get<double>(),
                    100 * r["windows_displaced_fraction"].get<double>());
      disp = buf;
    }
    char ov[32] = "";
    if (r.contains("victim_overlapped_fraction"))
      std::snprintf(ov, sizeof(ov), "%.0f%%", 100 * r["victim_overlapped_fraction"].get<double>());
    md << "| " << r["victim"].get<std::string>() << " | " << r["load"].get<std::string>() << " | "
       << r["cluster"] << " | " << r["ctas"] << " | " << r["reps"] << " | " << num(r["median_ms"])
       << " | " << num(r["min_ms"]) << " | " << pct(r["slowdown"]) << " | "
       << pct(r["slowdown_min"]) << " | " << model << " | " << blk << " | " << pct(r["eq4_probe"])
       << " | " << disp << " | "
       << (r.contains("load_distinct_sms") ? std::to_string(r["load_distinct_sms"].get<int>())
                                           : std::string(""))
       << " | " << ov << " | " << r.value("notes", std::string()) << " |\n";
  }
  if (out.contains("second_wave")) {
    md << "\n## First spin-load CTA count with a second wave\n\n"
       << "| victim | cluster | measured (median slowdown >= 30%) | Eq. 4, worst placement | "
          "Eq. 4, best placement | CTA counts tried |\n|---|---|---|---|---|---|\n";
    for (const json& w : out["second_wave"]) {
      std::string tried;
      for (const json& c : w["ctas_tried"])
        tried += (tried.empty() ? "" : ", ") + std::to_string(c.get<int>());
      md << "| " << w["victim"].get<std::string>() << " | " << w["cluster"] << " | "
         << num(w["measured_first_ctas"]) << " | " << num(w["eq4_first_ctas_worst_placement"])
         << " | " << num(w["eq4_first_ctas_best_placement"]) << " | " << tried << " |\n";
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the log survives a timeout
  std::string json_path = "interference_h200.json", md_path = "interference_h200.md";
  bool quick = false;
  double budget_s = 140;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--md" && i + 1 < argc) {
      md_path = argv[++i];
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--budget-s" && i + 1 < argc) {
      budget_s = std::stod(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--md PATH] [--quick] [--budget-s S]\n",
                   argv[0]);
      return 2;
    }
  }
  const auto t0 = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  try {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "tide_interference_bench: no CUDA device found; run it on a GPU\n");
      return 2;
    }
    TIDE_CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop{};
    TIDE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    Setup s;
    s.sms = prop.multiProcessorCount;
    s.quick = quick;
    if (quick) s.chunks = 8;
    s.level1 = std::make_unique<tide::calibrate::Level1Problem>(s.width, 4);
    const std::int64_t reduce_elems = 8 * s.width * s.chunks;
    s.reduce_in = DeviceBuffer(static_cast<std::size_t>(8 * reduce_elems * 2));
    s.reduce_out = DeviceBuffer(static_cast<std::size_t>(reduce_elems * 4));
    tide::calibrate::fill_random(s.reduce_in.get(), 8 * reduce_elems, 2, 9, nullptr);
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());

    // Slots for a cluster size: a whole-SM probe of that shape with twice the clusters any
    // slot count allows, alone; its first wave is the slot count.
    auto measure_slots = [&](int cluster_size, int* api) {
      ProbeShape wide;
      wide.cluster_size = cluster_size;
      wide.clusters = 2 * s.sms / cluster_size;
      Probe p(wide, 1);
      p.launch(0, s.victim);
      TIDE_CUDA_CHECK(cudaDeviceSynchronize());
      if (api) *api = p.predicted_slots();
      return std::make_pair(p.read(1)[0].first_wave_clusters, p.smem_bytes());
    };
    int n_slot_api = 0;
    const auto [n_slot, probe_smem] = measure_slots(4, &n_slot_api);
    // The probe victim: one wave with one spare slot, as the paper's 32 clusters in 33 slots
    // (on 132 SMs the paper's 32 would already need two waves alone).
    ProbeShape shape;
    shape.clusters = std::max(1, n_slot - 1);
    const int spare_sms = s.sms - shape.cluster_size * n_slot;
    std::printf(
        "GPU %s, %d SMs; probe: %d-CTA clusters of %d B smem: %d slots measured (%d by "
        "cudaOccupancyMaxActiveClusters), %d SMs outside any slot; probe victim: %d clusters\n",
        prop.name, s.sms, shape.cluster_size, probe_smem, n_slot, n_slot_api, spare_sms,
        shape.clusters);

    const int max_windows = 512;
    Probe probe(shape, max_windows);
    std::vector<std::unique_ptr<Victim>> victims;
    victims.push_back(make_gemm_victim(256, 8192, 8192));
    victims.push_back(make_probe_victim(probe));
    victims.push_back(make_elementwise_victim(256u << 20));

    // Eq. 4 for the GEMM from its own grid (GemmGrid); n_slot for its cluster size measured
    // with a whole-SM probe (one CTA per SM: the estimate's assumption).
    const GemmGrid& gg = *victims[0]->grid();
    Eq4Victim e_gemm;
    e_gemm.g = gg.cluster_ctas();
    e_gemm.n_gemm = gg.tile_known ? gg.clusters() : 0;
    int gemm_slot_api = 0;
    e_gemm.n_slot = e_gemm.g == 4 ? n_slot : measure_slots(e_gemm.g, &gemm_slot_api).first;
    if (e_gemm.g == 4) gemm_slot_api = n_slot_api;
    e_gemm.spare = s.sms - e_gemm.g * e_gemm.n_slot;
    e_gemm.estimate = true;
    Eq4Victim e_probe{shape.clusters, shape.cluster_size, n_slot, spare_sms, false};
    std::printf(
        "GEMM for Eq. 4: %s; n_gemm = %d clusters of %d CTA(s) (%d CTAs), n_slot = %d "
        "(%d by occupancy API), %d SMs outside (ESTIMATE: 1 CTA per SM assumed)\n",
        gg.tile_known ? "tile known" : "tile id UNKNOWN, no prediction", e_gemm.n_gemm, e_gemm.g,
        gg.ctas, e_gemm.n_slot, gemm_slot_api, e_gemm.spare);

    json out;
    out["gpu"] = prop.name;
    out["sms"] = s.sms;
    out["status"] = "running";
    out["probe"] = {{"clusters", shape.clusters}, {"cluster_size", shape.cluster_size},
                    {"smem_bytes", probe_smem},   {"work_us", shape.work_us},
                    {"slots_measured", n_slot},   {"slots_occupancy_api", n_slot_api},
                    {"spare_sms", spare_sms}};
    out["gemm_grid"] = {
        {"tile_m", gg.tile_m},
        {"tile_n", gg.tile_n},
        {"splitk", gg.splitk},
        {"cluster_ctas", e_gemm.g},
        {"cluster_known", gg.cluster_known},
        {"ctas", gg.tile_known ? json(gg.ctas) : json(nullptr)},
        {"clusters", gg.tile_known ? json(e_gemm.n_gemm) : json(nullptr)},
        {"slots_measured", e_gemm.n_slot},
        {"slots_occupancy_api", gemm_slot_api},
        {"spare_sms", e_gemm.spare},
        {"estimate", true},
        {"how", std::string("ceil(M/tile_m) x ceil(N/tile_n) x split-k from cuBLASLt's algo "
                            "config, 1 CTA per SM assumed") +
                    (gg.cluster_known ? "" : ", cluster shape AUTO/unknown taken as 1")}};
    out["transfer"] = {{"chunks", s.chunks},
                       {"gap_us", s.gap_us},
                       {"chunk_logical_bytes", s.level1->logical_bytes()}};
    // Warm-up (cuBLASLt's first call, module loads), then the isolated medians.
    for (auto& v : victims)
      for (int i = 0; i < 3; ++i)
        v->launch(i, s.victim);
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    const int reps_iso = quick ? 10 : 30;
    json isolated = json::object();
    std::map<std::string, double> iso_ms, iso_min;
    for (auto& v : victims) {
      Probe* pp = v->name() == "probe" ? &probe : nullptr;
      const Run r = run_once(s, *v, {"none", 0, 1}, reps_iso, pp);
      iso_ms[v->name()] = median(r.victim_ms);
      iso_min[v->name()] = *std::min_element(r.victim_ms.begin(), r.victim_ms.end());
      json entry = {{"median_ms", iso_ms[v->name()]},
                    {"min_ms", iso_min[v->name()]},
                    {"reps", reps_iso},
                    {"what", v->describe()}};
      if (pp) {
        int displaced = 0;
        for (const ProbeWindow& w : probe.read(reps_iso))
          displaced = std::max(displaced, w.displaced);
        entry["max_displaced"] = displaced;
      }
      isolated[v->name()] = entry;
      std::printf(
          "isolated %-11s %8.4f ms (min %.4f)  (%s)%s\n", v->name().c_str(), iso_ms[v->name()],
          iso_min[v->name()], v->describe().c_str(),
          pp ? (", max displaced " + std::to_string(entry["max_displaced"].get<int>())).c_str()
             : "");
    }
    out["isolated"] = isolated;
    out["rows"] = json::array();
    write_outputs(out, json_path, md_path);

    const double transfer_ms = s.chunks * s.gap_us * 1e-3;
    std::vector<std::string> skipped;
    for (const Load& x : loads(quick)) {
      const std::string label =
          x.kind + " c" + std::to_string(x.cluster) + " x" + std::to_string(x.ctas);
      if (since() > budget_s) {
        skipped.push_back(label);
        continue;
      }
      const double row_t0 = since();
      for (auto& v : victims) {
        const bool transfer = x.kind != "spin";
        Probe* pp = v->name() == "probe" ? &probe : nullptr;
        int reps = quick ? 8 : 20;
        if (transfer) reps = std::clamp(static_cast<int>(transfer_ms / iso_ms[v->name()]), 10, 400);
        const Run r = run_once(s, *v, x, reps, pp);
        const double med = median(r.victim_ms);
        const double mn = *std::min_element(r.victim_ms.begin(), r.victim_ms.end());
        json row = {{"victim", v->name()},
                    {"load", x.kind},
                    {"ctas", x.ctas},
                    {"cluster", x.cluster},
                    {"reps", static_cast<int>(r.victim_ms.size())},
                    {"median_ms", med},
                    {"min_ms", mn},
                    {"slowdown", med / iso_ms[v->name()] - 1.0},
                    {"slowdown_min", mn / iso_min[v->name()] - 1.0},
                    {"victim_overlapped_fraction", r.overlapped}};
        std::string notes;
        if (r.timed_out) notes += "TIMED OUT (watchdog released the flags); ";
        if (x.kind != "tide-level1") {
          row["load_distinct_sms"] = static_cast<int>(r.load_sms.size());
          row["load_max_resident_ms"] = r.load_max_resident_ms;
        }
        if (transfer) {
          row["transfer_ms"] = r.transfer_ms;
          row["load_residency"] = r.residency;
          char buf[96];
          std::snprintf(buf, sizeof(buf), "transfer %.2f ms, load resident %.0f%% of it; ",
                        r.transfer_ms, 100 * r.residency);
          notes += buf;
        }
        if (v->name() == "elementwise") {
          // Many waves, HBM-bound: Eq. 4 does not apply; the SM share lost is an upper bound.
          row["n_blk_model"] = {nullptr, nullptr};
          row["eq4_low"] = nullptr;
          row["eq4_high"] = nullptr;
          row["sm_share_bound"] = static_cast<double>(s.sms) / (s.sms - x.ctas) - 1.0;
        } else {
          const Eq4Victim& e = v->name() == "gemm" ? e_gemm : e_probe;
          const auto [blo, bhi] = e.blk(x.ctas, x.cluster);
          row["n_blk_model"] = {blo, bhi};
          row["n_gemm"] = e.n_gemm;
          row["n_slot"] = e.n_slot;
          row["eq4_low"] = eq4(e.n_gemm, e.n_slot, blo);
          row["eq4_high"] = eq4(e.n_gemm, e.n_slot, bhi);
          row["eq4_estimate"] = e.estimate;
          if (e.estimate) notes += "Eq. 4 n_gemm estimated; ";
        }
        row["eq4_probe"] = nullptr;
        if (pp) {
          std::vector<double> first, displaced;
          int windows_displaced = 0;
          for (const ProbeWindow& w : probe.read(reps)) {
            first.push_back(w.first_wave_clusters);
            displaced.push_back(w.displaced);
            windows_displaced += w.displaced > 0 ? 1 : 0;
          }
          const double first_med = median(first);
          row["first_wave_clusters_median"] = first_med;
          row["displaced_median"] = median(displaced);
          row["displaced_max"] = *std::max_element(displaced.begin(), displaced.end());
          row["windows_displaced_fraction"] = windows_displaced / static_cast<double>(reps);
          // Slots the load took as the probe saw them (only a lower bound when nothing was
          // displaced: the probe leaves one slot spare).
          row["n_blk_probe"] = n_slot - first_med;
          row["eq4_probe"] = eq4(shape.clusters, n_slot, n_slot - first_med);
          // Probe CTAs that ran on an SM holding a resident load CTA: 0 when every load CTA
          // was resident before the probe and the probe fills an SM.
          if (!r.load_sms.empty()) {
            int on_load = 0;
            for (int w = 0; w < std::min(reps, max_windows); ++w)
              for (const CtaRecord& c : probe.records(w))
                on_load += c.end_ns != 0 && r.load_sms.count(c.smid) ? 1 : 0;
            row["probe_ctas_on_load_sms"] = on_load;
            if (on_load > 0 && x.kind == "spin")
              notes += std::to_string(on_load) + " probe CTAs on load SMs (load not resident?); ";
          }
        }
        row["notes"] = notes;
        out["rows"].push_back(row);
        std::string probe_txt;
        if (pp) {
          char buf[96];
          std::snprintf(buf, sizeof(buf), "  first-wave clusters %.0f, displaced %.0f (max %.0f)",
                        row["first_wave_clusters_median"].get<double>(),
                        row["displaced_median"].get<double>(), row["displaced_max"].get<double>());
          probe_txt = buf;
        }
        std::printf("%-11s %-11s c%d x%2d: %+7.1f%% (min %+7.1f%%) n=%3d  Eq.4 %s..%s%s%s%s\n",
                    v->name().c_str(), x.kind.c_str(), x.cluster, x.ctas,
                    100 * row["slowdown"].get<double>(), 100 * row["slowdown_min"].get<double>(),
                    row["reps"].get<int>(), pct(row["eq4_low"]).c_str(),
                    pct(row["eq4_high"]).c_str(),
                    v->name() == "gemm" ? (" (n_gemm " + std::to_string(e_gemm.n_gemm) +
                                           " est., n_slot " + std::to_string(e_gemm.n_slot) + ")")
                                              .c_str()
                                        : "",
                    probe_txt.c_str(), notes.empty() ? "" : ("  [" + notes + "]").c_str());
      }
      std::printf("  row %s took %.1f s (total %.1f s)\n", label.c_str(), since() - row_t0,
                  since());
      json waves = json::array();
      for (int cluster : {1, 4}) {
        waves.push_back(second_wave(out["rows"], "gemm", e_gemm, cluster, 0.3));
        waves.push_back(second_wave(out["rows"], "probe", e_probe, cluster, 0.3));
      }
      out["second_wave"] = waves;
      write_outputs(out, json_path, md_path);
    }
    out["skipped_rows"] = skipped;
    char status[160];
    std::snprintf(status, sizeof(status), "Complete in %.0f s%s.", since(),
                  skipped.empty() ? "" : "; budget reached, rows skipped (skipped_rows)");
    out["status"] = status;
    write_outputs(out, json_path, md_path);
    for (const json& w : out["second_wave"])
      std::printf(
          "second wave: %-5s cluster %d: measured from %s CTAs; Eq. 4 from %s (worst "
          "placement) .. %s (best placement)\n",
          w["victim"].get<std::string>().c_str(), w["cluster"].get<int>(),
          num(w["measured_first_ctas"]).c_str(), num(w["eq4_first_ctas_worst_placement"]).c_str(),
          num(w["eq4_first_ctas_best_placement"]).c_str());
    std::printf("%s wrote %s and %s\n", status, json_path.c_str(), md_path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tide_interference_bench: %s\n", e.what());
    return 1;
  }
}
