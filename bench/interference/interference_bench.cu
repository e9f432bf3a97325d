// The interference benchmark's driver (docs/interference.md): isolated victim medians, then
// each victim next to each load, with Eq. 4's prediction beside every measurement.
//
// Steps of one measurement (victim V, load X):
// 1. reset the device flags (started, stop, tick) and sync;
// 2. resident loads (spin): launch X on the load stream; the victim stream waits (stream
//    memop) until every load CTA is resident, runs V `reps` times between event pairs, then
//    signals stop, and the spin CTAs leave;
//    transfer loads (persistent reduction, TIDE Level 1): enqueue X's chunks (the persistent
//    kernel polls the tick flag between chunks; TIDE's chunk launches wait on it with stream
//    memops, NOTE [load residency] in loads.cu), enqueue V's reps, then the host releases one
//    tick (a "network round") every gap_us with cuStreamWriteValue32 on the rail stream;
// 3. sync; V's slowdown is its median (and mean) over its isolated median; the probe's windows
//    give first-wave clusters and displaced CTAs; the load's records give its SMs.
//
// Usage: tide_interference_bench [--json PATH] [--md PATH] [--quick]
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

struct Load {
  std::string kind;  // "none", "spin", "persistent", "tide-level1"
  int ctas = 0;
  int cluster = 1;
};

struct Setup {
  int sms = 0;
  bool quick = false;
  Stream victim, load, rail;
  DeviceBuffer flags{256};
  DeviceBuffer load_records{1024 * sizeof(CtaRecord)};
  // Transfers: `chunks` rounds, gap_us apart; each chunk is one Level 1 block of 8 x width.
  int chunks = 16;
  double gap_us = 500;
  std::int64_t width = 1 << 18;
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
  std::vector<double> victim_ms;
  double transfer_ms = 0;
  double residency = 0;  // fraction of the transfer with load CTAs resident
  int distinct_sms = 0;
};

// One victim next to one load (steps 1-3 above).
Run run_once(Setup& s, Victim& v, const Load& x, int reps) {
  const LoadFlags f = s.load_flags();
  TIDE_CUDA_CHECK(cudaMemset(s.flags.get(), 0, s.flags.bytes()));
  TIDE_CUDA_CHECK(cudaMemset(s.load_records.get(), 0, s.load_records.bytes()));
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  Run run;
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
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < s.chunks; ++k) {
      std::this_thread::sleep_until(
          t0 + std::chrono::microseconds(static_cast<std::int64_t>(k * s.gap_us)));
      tide::calibrate::stream_write_u32(s.rail, f.tick, static_cast<std::uint32_t>(k + 1));
    }
  }
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[static_cast<std::size_t>(2 * i)],
                                         ev[static_cast<std::size_t>(2 * i + 1)]));
    run.victim_ms.push_back(ms);
  }
  if (transfer) {
    float ms = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, t_start, t_end));
    run.transfer_ms = ms;
    double busy = 0;
    for (int k = 0; k < static_cast<int>(chunk_ev.size()) / 2; ++k) {
      float c = 0;
      TIDE_CUDA_CHECK(cudaEventElapsedTime(&c, chunk_ev[static_cast<std::size_t>(2 * k)],
                                           chunk_ev[static_cast<std::size_t>(2 * k + 1)]));
      busy += c;
    }
    run.residency = x.kind == "persistent" ? 1.0 : (ms > 0 ? busy / ms : 0);
  }
  if (x.kind == "spin" || x.kind == "persistent") {
    std::set<std::uint32_t> sms;
    for (const CtaRecord& r : read_load_records(s, x.ctas))
      sms.insert(r.smid);
    run.distinct_sms = static_cast<int>(sms.size());
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
  if (free <= 0) return nullptr;
  return std::ceil(n_gemm / free) / std::ceil(static_cast<double>(n_gemm) / n_slot) - 1.0;
}

std::string pct(const json& v) {
  if (v.is_null()) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100.0 * v.get<double>());
  return buf;
}

std::vector<Load> loads(bool quick) {
  std::vector<Load> out;
  const std::vector<int> single =
      quick ? std::vector<int>{1, 8, 32} : std::vector<int>{1, 2, 4, 8, 12, 16, 20, 24, 32};
  const std::vector<int> clustered =
      quick ? std::vector<int>{4, 16, 32} : std::vector<int>{4, 8, 12, 16, 20, 24, 28, 32};
  for (int c : single)
    out.push_back({"spin", c, 1});
  for (int c : clustered)
    out.push_back({"spin", c, 4});
  for (int cluster : {1, 4})
    for (int c : {8, 16})
      out.push_back({"persistent", c, cluster});
  for (int c : {4, 8, 16})
    out.push_back({"tide-level1", c, 1});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "interference_h200.json", md_path = "interference_h200.md";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--md" && i + 1 < argc) {
      md_path = argv[++i];
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--md PATH] [--quick]\n", argv[0]);
      return 2;
    }
  }
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

    // Slots: the probe's shape with twice the clusters any slot count allows, alone.
    ProbeShape shape;
    ProbeShape wide = shape;
    wide.clusters = 2 * s.sms / shape.cluster_size;
    Probe slot_probe(wide, 1);
    slot_probe.launch(0, s.victim);
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    const int n_slot = slot_probe.read(1)[0].first_wave_clusters;
    const int n_slot_api = slot_probe.predicted_slots();
    const int n_gemm = shape.clusters;
    const int spare_sms = s.sms - shape.cluster_size * n_slot;
    std::printf(
        "GPU %s, %d SMs; probe: %d-CTA clusters of %d B smem: %d slots measured (%d by "
        "cudaOccupancyMaxActiveClusters), %d SMs outside any slot\n",
        prop.name, s.sms, shape.cluster_size, slot_probe.smem_bytes(), n_slot, n_slot_api,
        spare_sms);

    const int max_windows = 512;
    Probe probe(shape, max_windows);
    std::vector<std::unique_ptr<Victim>> victims;
    victims.push_back(make_probe_victim(probe));
    victims.push_back(make_gemm_victim(256, 8192, 8192));
    victims.push_back(make_elementwise_victim(256u << 20));

    json out;
    out["gpu"] = prop.name;
    out["sms"] = s.sms;
    out["probe"] = {{"clusters", shape.clusters},
                    {"cluster_size", shape.cluster_size},
                    {"smem_bytes", slot_probe.smem_bytes()},
                    {"work_us", shape.work_us},
                    {"slots_measured", n_slot},
                    {"slots_occupancy_api", n_slot_api},
                    {"spare_sms", spare_sms}};
    out["transfer"] = {{"chunks", s.chunks},
                       {"gap_us", s.gap_us},
                       {"chunk_logical_bytes", s.level1->logical_bytes()}};
    const int reps_iso = quick ? 10 : 40;
    json isolated = json::object();
    std::map<std::string, double> iso_ms;
    for (auto& v : victims) {
      const Run r = run_once(s, *v, {"none", 0, 1}, reps_iso);
      iso_ms[v->name()] = median(r.victim_ms);
      json entry = {{"median_ms", iso_ms[v->name()]}, {"what", v->describe()}};
      if (v->name() == "probe") {
        int displaced = 0;
        for (const ProbeWindow& w : probe.read(reps_iso))
          displaced = std::max(displaced, w.displaced);
        entry["max_displaced"] = displaced;
      }
      isolated[v->name()] = entry;
      std::printf("isolated %-11s %8.4f ms  (%s)\n", v->name().c_str(), iso_ms[v->name()],
                  v->describe().c_str());
    }
    out["isolated"] = isolated;

    json rows = json::array();
    const double transfer_ms = s.chunks * s.gap_us * 1e-3;
    for (const Load& x : loads(quick)) {
      json probe_blk = nullptr;
      for (auto& v : victims) {
        const bool transfer = x.kind != "spin";
        int reps = quick ? 10 : 30;
        if (transfer)
          reps = std::clamp(static_cast<int>(transfer_ms / iso_ms[v->name()]), 10, max_windows);
        const Run r = run_once(s, *v, x, reps);
        const double med = median(r.victim_ms);
        double mean = 0;
        for (double t : r.victim_ms)
          mean += t / static_cast<double>(r.victim_ms.size());
        json row = {{"victim", v->name()},
                    {"load", x.kind},
                    {"ctas", x.ctas},
                    {"cluster", x.cluster},
                    {"reps", reps},
                    {"median_ms", med},
                    {"mean_ms", mean},
                    {"slowdown", med / iso_ms[v->name()] - 1.0},
                    {"slowdown_mean", mean / iso_ms[v->name()] - 1.0}};
        if (x.kind != "tide-level1") row["load_distinct_sms"] = r.distinct_sms;
        if (transfer) {
          row["transfer_ms"] = r.transfer_ms;
          row["load_residency"] = r.residency;
        }
        // Eq. 4 (Sec. 2.2): clustered CTAs block at least one slot per cluster; single CTAs
        // block none when they land outside the slots and up to one each.
        const double blk_hi = x.cluster > 1 ? std::ceil(x.ctas / static_cast<double>(x.cluster))
                                            : std::min(x.ctas, n_slot);
        const double blk_lo = x.cluster > 1 ? blk_hi : std::max(0, x.ctas - spare_sms);
        row["n_blk_model"] = {blk_lo, blk_hi};
        row["eq4_model_low"] = eq4(n_gemm, n_slot, blk_lo);
        row["eq4_model_high"] = eq4(n_gemm, n_slot, blk_hi);
        if (v->name() == "probe") {
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
          probe_blk = std::max(0.0, n_slot - first_med);
        }
        row["n_blk_probe"] = probe_blk;
        row["eq4_probe"] =
            probe_blk.is_null() ? json(nullptr) : eq4(n_gemm, n_slot, probe_blk.get<double>());
        if (v->name() == "elementwise") {
          // Many waves, HBM-bound: Eq. 4 does not apply; the SM share lost is an upper bound.
          row["eq4_model_low"] = nullptr;
          row["eq4_model_high"] = nullptr;
          row["eq4_probe"] = nullptr;
          row["sm_share_bound"] = static_cast<double>(s.sms) / (s.sms - x.ctas) - 1.0;
        }
        rows.push_back(row);
        std::printf("%-11s %-11s c%d x%2d: %+7.1f%% (mean %+7.1f%%)  Eq.4 %s..%s probe %s\n",
                    v->name().c_str(), x.kind.c_str(), x.cluster, x.ctas,
                    100 * row["slowdown"].get<double>(), 100 * row["slowdown_mean"].get<double>(),
                    pct(row["eq4_model_low"]).c_str(), pct(row["eq4_model_high"]).c_str(),
                    pct(row["eq4_probe"]).c_str());
      }
    }
    out["rows"] = rows;
    std::ofstream(json_path) << out.dump(2) << '\n';

    std::ofstream md(md_path);
    md << "# Interference on " << prop.name << " (" << s.sms << " SMs)\n\n"
       << "Probe: " << shape.clusters << " clusters of " << shape.cluster_size << " CTAs, "
       << slot_probe.smem_bytes() << " B shared memory each; slots measured " << n_slot
       << " (occupancy API " << n_slot_api << "), " << spare_sms << " SMs outside any slot. "
       << "Transfers: " << s.chunks << " rounds " << s.gap_us << " us apart.\n\n"
       << "| victim | load | cluster | CTAs | slowdown (median) | slowdown (mean) | Eq. 4 model | "
          "Eq. 4 (probe n_blk) | displaced (median, % windows) | load SMs | residency |\n"
       << "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const json& r : rows) {
      std::string model = pct(r["eq4_model_low"]);
      if (r["eq4_model_low"] != r["eq4_model_high"]) model += " .. " + pct(r["eq4_model_high"]);
      if (r.contains("sm_share_bound"))
        model = "n/a (SM share <= " + pct(r["sm_share_bound"]) + ")";
      std::string disp = "";
      if (r.contains("displaced_median")) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.0f, %.0f%%", r["displaced_median"].get<double>(),
                      100 * r["windows_displaced_fraction"].get<double>());
        disp = buf;
      }
      char res[32] = "";
      if (r.contains("load_residency"))
        std::snprintf(res, sizeof(res), "%.0f%%", 100 * r["load_residency"].get<double>());
      md << "| " << r["victim"].get<std::string>() << " | " << r["load"].get<std::string>() << " | "
         << r["cluster"] << " | " << r["ctas"] << " | " << pct(r["slowdown"]) << " | "
         << pct(r["slowdown_mean"]) << " | " << model << " | " << pct(r["eq4_probe"]) << " | "
         << disp << " | "
         << (r.contains("load_distinct_sms") ? std::to_string(r["load_distinct_sms"].get<int>())
                                             : std::string(""))
         << " | " << res << " |\n";
    }
    std::printf("wrote %s and %s\n", json_path.c_str(), md_path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tide_interference_bench: %s\n", e.what());
    return 1;
  }
}
