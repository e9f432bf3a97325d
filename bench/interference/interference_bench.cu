// The interference benchmark's driver (docs/interference.md): isolated victim medians, then
// each victim next to each load, with Eq. 4's prediction beside every measurement.
//
// Row order (the comparison that matters first): TIDE's Level 1 sum (4, 8, 16 short-lived
// CTAs) and the NCCL-style persistent reduction (8, 16 CTAs, cluster 1 and 4) moving the same
// bytes, then resident spin loads (cluster 1: 1..32 CTAs; cluster 4: 4..32). JSON and markdown
// are rewritten after every row, and rows stop at --budget-s, so a timeout still leaves results.
//
// NOTE [no wait on later work]
// The version before this one hung on its first row (Level 1 sum next to the GEMM): the load
// and victim streams waited with cuStreamWaitValue32 (unbounded) for a "tick" that the host
// wrote only after it had launched everything, and the host's first launch of the Level 1 sum
// kernel (never launched before in the process: CUDA's lazy module loading) may synchronise
// the context, i.e. wait for those blocked streams: a deadlock the 3 s watchdog (checked only
// after the launches) and the 1 s kernel bounds (the waits were stream memops, not kernels)
// could not break. Rules now: no stream memop waits at all; every device wait is a kernel
// poll bounded by kSpinBoundNs that waits only for a kernel launched before it (so even a
// context synchronise inside a CUDA call ends within that bound); every kernel is launched
// once (loaded) in a warm-up before the first row; the host polls
// streams with a deadline and never calls an unbounded synchronise while a row runs; a
// watchdog thread ends the process if any stage overruns, so the run always finishes.
//
// Steps of one measurement (victim V, load X):
// 1. reset the device flags (started, stop, t0, gate_timeout) and the probe's records; sync;
// 2. spin: launch X on the load stream, then on the victim stream a gate kernel (waits until
//    every X CTA has incremented `started`, at most 1 s), V `reps` times between event pairs,
//    and a stream write of stop; the spin CTAs then leave (at most 1 s after entry);
//    persistent: launch X (its rounds arrive by %globaltimer every gap_us from its first CTA's
//    entry, no host involvement), then gate + V back to back for about the transfer;
//    tide-level1: the host launches round 0 of the Level 1 sum on the load stream, enqueues
//    the V launches on the victim stream, and launches round k at k * gap_us (host clock; as
//    TIDE's host-driven network path, and no stream waits for it). Whether a V launch
//    overlapped a sum is read from the events afterwards, not forced;
// 3. poll both streams until idle (a deadline, then a rescue: wait_idle); V's slowdown is
//    its median (and min) over its isolated median (and min), counted over the V launches
//    that started before the transfer ended; the probe's windows give first-wave clusters and
//    displaced CTAs; the load's records give its SMs.
//
// Usage: tide_interference_bench [--json PATH] [--md PATH] [--quick] [--budget-s S]
//        [--hard-limit-s S] [--rows level1,persistent,spin] [--max-rows N] [--self-check]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "interference.hpp"
#include "interference_model.hpp"
#include "tide/calibrate/level1_problem.hpp"
#include "tide/calibrate/stream_memops.hpp"
#include "tide/calibrate/timing.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/level1_sum.hpp"

namespace {

using namespace tide::bench;
using nlohmann::json;
using tide::calibrate::DeviceBuffer;
using tide::calibrate::median;
using tide::calibrate::Stream;
using Clock = std::chrono::steady_clock;

// Ends the process when a stage overruns its deadline or the whole run its hard limit: the
// last resort if a CUDA call blocks the host. The JSON and markdown already hold every row
// finished (they are rewritten after each), with status "running".
class Watchdog {
 public:
  Watchdog(Clock::time_point t0, double hard_limit_s)
      : t0_(t0), hard_(t0 + std::chrono::milliseconds(static_cast<long long>(hard_limit_s * 1e3))) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    done_ = true;
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // The stage now running and how long it may take.
  void arm(const std::string& stage, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    stage_ = stage;
    deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<long long>(seconds * 1e3));
  }

 private:
  void loop() {
    while (!done_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard<std::mutex> lock(mu_);
      const auto now = Clock::now();
      if (now > deadline_ || now > hard_) {
        std::printf(
            "WATCHDOG: stage '%s' %s at %.1f s; exiting (rc 3). The JSON and markdown hold the "
            "rows finished before it.\n",
            stage_.c_str(), now > hard_ ? "ran past the hard limit" : "ran past its deadline",
            std::chrono::duration<double>(now - t0_).count());
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(3);
      }
    }
  }
  Clock::time_point t0_, hard_;
  std::mutex mu_;
  std::string stage_ = "start-up";
  Clock::time_point deadline_ = Clock::time_point::max();
  std::atomic<bool> done_{false};
  std::thread thread_;
};

struct Setup {
  int sms = 0;
  bool quick = false;
  Stream victim, load, rescue;
  DeviceBuffer flags{256};
  DeviceBuffer load_records{1024 * sizeof(CtaRecord)};
  std::uint32_t* release = nullptr;  // pinned: what the rescue copies over the flags
  // Transfers: `chunks` rounds, gap_us apart; each chunk is one Level 1 block of 8 x width.
  int chunks = 16;
  double gap_us = 500;
  std::int64_t width = 1 << 18;
  // How long the streams of one measurement may stay busy before the rescue (every device
  // wait is bounded by kSpinBoundNs = 1 s and a measurement takes ~10 ms, so 4 s means a bug).
  double idle_deadline_s = 4.0;
  std::unique_ptr<tide::calibrate::Level1Problem> level1;
  DeviceBuffer reduce_in, reduce_out;
  LoadFlags load_flags() const {
    auto* f = flags.as<std::uint32_t>();
    return {f, f + 16, reinterpret_cast<unsigned long long*>(f + 32), f + 48};
  }
  ~Setup() {
    if (release) cudaFreeHost(release);
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
  int load_ctas_recorded = 0;
  double load_max_resident_ms = 0;  // longest load CTA residence (spin: about the victim run)
  double load_start_spread_us = 0;  // last load CTA entry - first (all resident at once: small)
  bool gate_timed_out = false;      // the victims started before every load CTA was resident
  bool rescued = false;             // the streams overran idle_deadline_s; flags released
};

float elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

bool streams_idle(const Setup& s) {
  for (cudaStream_t st : {s.victim.get(), s.load.get(), s.rescue.get()}) {
    const cudaError_t e = cudaStreamQuery(st);
    if (e == cudaErrorNotReady) return false;
    TIDE_CUDA_CHECK(e);
  }
  return true;
}

bool poll_idle(const Setup& s, double seconds) {
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<long long>(seconds * 1e3));
  while (!streams_idle(s)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// Polls the victim and load streams until idle (never an unbounded synchronise). Past
// s.idle_deadline_s it copies release values over the flags from pinned memory on the rescue
// stream (a copy engine, no SM) and polls again; if even that does not drain them the run
// cannot continue safely: it throws (main writes the outputs and exits).
bool wait_idle(Setup& s) {
  if (poll_idle(s, s.idle_deadline_s)) return true;
  TIDE_CUDA_CHECK(cudaMemcpyAsync(s.flags.get(), s.release, 64 * sizeof(std::uint32_t),
                                  cudaMemcpyHostToDevice, s.rescue));
  if (poll_idle(s, 3.0)) return false;
  throw std::runtime_error("streams still busy 3 s after the rescue released every flag");
}

// Device flags reset, in stream order on both streams, then polled to completion.
void reset_flags(Setup& s) {
  TIDE_CUDA_CHECK(cudaMemsetAsync(s.flags.get(), 0, s.flags.bytes(), s.load));
  TIDE_CUDA_CHECK(cudaMemsetAsync(s.load_records.get(), 0, s.load_records.bytes(), s.load));
  if (!poll_idle(s, s.idle_deadline_s)) throw std::runtime_error("flag reset did not finish");
}

// One victim next to one load (steps 1-3 in the header).
Run run_once(Setup& s, Victim& v, const Load& x, int reps, Probe* probe) {
  const LoadFlags f = s.load_flags();
  if (probe != nullptr) probe->clear();      // legacy-stream memset: the sync below orders it
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());  // nothing of ours is queued: bounded
  reset_flags(s);
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
  const tide::kernels::Level1Tuning tuning =
      tide::kernels::recommended_level1_tuning(std::max(1, x.ctas));
  auto level1_round = [&](int k) {
    TIDE_CUDA_CHECK(cudaEventRecord(chunk_ev[static_cast<std::size_t>(2 * k)], s.load));
    tide::kernels::launch_level1_sum(s.level1->args(k, x.ctas), s.load, tuning);
    TIDE_CUDA_CHECK(cudaEventRecord(chunk_ev[static_cast<std::size_t>(2 * k + 1)], s.load));
  };
  // The load first (its kernel is then ahead of anything the victim stream waits on, even if
  // both streams share a hardware queue).
  if (x.kind == "spin") {
    launch_spin(x.ctas, x.cluster, f, s.load_records.as<CtaRecord>(), s.load);
    launch_gate(f.started, static_cast<std::uint32_t>(x.ctas), f, s.victim);
  } else if (x.kind == "persistent") {
    ReduceArgs a;
    a.in = s.reduce_in.as<std::uint16_t>();
    a.chunk_elems = 8 * s.width;
    a.stride = a.chunk_elems * s.chunks;
    a.out = s.reduce_out.as<float>();
    a.chunks = s.chunks;
    a.gap_ns = static_cast<std::uint64_t>(s.gap_us * 1e3);
    launch_persistent_reduce(x.ctas, x.cluster, a, f, s.load_records.as<CtaRecord>(), s.load);
    TIDE_CUDA_CHECK(cudaEventRecord(t_end, s.load));
    // Every persistent CTA resident before the first victim launch (bounded).
    launch_gate(f.started, static_cast<std::uint32_t>(x.ctas), f, s.victim);
  } else if (x.kind == "tide-level1") {
    chunk_ev.resize(static_cast<std::size_t>(2 * s.chunks));
    for (auto& e : chunk_ev)
      TIDE_CUDA_CHECK(cudaEventCreate(&e));
    level1_round(0);
  }
  const auto rail_t0 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    TIDE_CUDA_CHECK(cudaEventRecord(ev[static_cast<std::size_t>(2 * i)], s.victim));
    v.launch(i, s.victim);
    TIDE_CUDA_CHECK(cudaEventRecord(ev[static_cast<std::size_t>(2 * i + 1)], s.victim));
  }
  if (x.kind == "spin") tide::calibrate::stream_write_u32(s.victim, f.stop, 1);
  if (x.kind == "tide-level1") {
    // The rail: round k at k * gap_us on the host clock (TIDE's host-driven network path).
    // Plain launches on the load stream: nothing on the GPU waits for them.
    for (int k = 1; k < s.chunks; ++k) {
      std::this_thread::sleep_until(
          rail_t0 + std::chrono::microseconds(static_cast<std::int64_t>(k * s.gap_us)));
      level1_round(k);
    }
    TIDE_CUDA_CHECK(cudaEventRecord(t_end, s.load));
  }
  run.rescued = !wait_idle(s);
  std::uint32_t gate_flag = 0;
  TIDE_CUDA_CHECK(
      cudaMemcpy(&gate_flag, f.gate_timeout, sizeof(gate_flag), cudaMemcpyDeviceToHost));
  run.gate_timed_out = gate_flag != 0 && !run.rescued;
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
    std::uint64_t first = ~0ull, last = 0;
    for (const CtaRecord& r : read_load_records(s, x.ctas)) {
      if (r.end_ns == 0) continue;
      ++run.load_ctas_recorded;
      run.load_sms.insert(r.smid);
      first = std::min(first, r.start_ns);
      last = std::max(last, r.start_ns);
      run.load_max_resident_ms =
          std::max(run.load_max_resident_ms, static_cast<double>(r.end_ns - r.start_ns) * 1e-6);
    }
    if (run.load_ctas_recorded > 0) run.load_start_spread_us = (last - first) * 1e-3;
  }
  for (auto& e : ev)
    cudaEventDestroy(e);
  for (auto& e : chunk_ev)
    cudaEventDestroy(e);
  if (t_start) cudaEventDestroy(t_start);
  if (t_end) cudaEventDestroy(t_end);
  return run;
}

// Eq. 4 as JSON (null when unknown or no slot is left); see eq4_slowdown.
json eq4(int n_gemm, int n_slot, double n_blk) {
  const std::optional<double> v = eq4_slowdown(n_gemm, n_slot, n_blk);
  return v ? json(*v) : json(nullptr);
}

std::string pct(const json& v) {
  if (v.is_null()) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.1f%%", 100.0 * v.get<double>());
  return buf;
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
  double budget_s = 90, hard_limit_s = 115;
  std::vector<std::string> groups;
  int max_rows = -1;
  const char* usage =
      "usage: %s [--json PATH] [--md PATH] [--quick] [--budget-s S] [--hard-limit-s S]\n"
      "          [--rows level1,persistent,spin] [--max-rows N] [--self-check]\n";
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
    } else if (a == "--hard-limit-s" && i + 1 < argc) {
      hard_limit_s = std::stod(argv[++i]);
    } else if (a == "--rows" && i + 1 < argc) {
      groups = split_names(argv[++i]);
      for (std::string& g : groups) {
        if (g == "tide-level1") g = "level1";
        if (!known_group(g)) {
          std::fprintf(stderr, "unknown row group '%s' (level1, persistent, spin)\n", g.c_str());
          return 2;
        }
      }
    } else if (a == "--max-rows" && i + 1 < argc) {
      max_rows = std::stoi(argv[++i]);
    } else if (a == "--self-check") {
      const std::vector<std::string> fail = check_model();
      for (const std::string& f : fail)
        std::printf("self-check FAILED: %s\n", f.c_str());
      std::printf("self-check: %s\n", fail.empty() ? "row list and Eq. 4 ok" : "FAILED");
      return fail.empty() ? 0 : 1;
    } else {
      std::fprintf(stderr, usage, argv[0]);
      return 2;
    }
  }
  const std::vector<Load> rows = select_rows(quick, groups, max_rows);
  const auto t0 = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  Watchdog watchdog(t0, hard_limit_s);
  watchdog.arm("start-up (device, buffers, slot probes, victims)", 60);
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
    TIDE_CUDA_CHECK(cudaMallocHost(&s.release, 64 * sizeof(std::uint32_t)));
    std::fill(s.release, s.release + 64, 0u);
    s.release[0] = 0x7fffffffu;  // started: every gate passes
    s.release[16] = 1;           // stop: spin CTAs leave
    s.release[32] = 1;           // t0: a persistent CTA entering now finds every round due
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
      const int predicted = p.predicted_slots();
      if (api) *api = predicted;
      int measured = p.read(1)[0].first_wave_clusters;
      if (measured <= 0) {
        std::printf(
            "WARNING: the %d-CTA slot probe recorded no first wave; using the occupancy "
            "API's %d slots\n",
            cluster_size, predicted);
        measured = predicted;
      }
      return std::make_pair(measured, p.smem_bytes());
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
                       {"chunk_logical_bytes", s.level1->logical_bytes()},
                       {"pacing",
                        "tide-level1: host launches round k at k * gap_us, overlap read from "
                        "events; persistent: rounds due at the first CTA's entry + k * gap_us "
                        "(%globaltimer); no stream waits"}};
    json selected = json::array();
    for (const Load& x : rows)
      selected.push_back(x.label());
    out["rows_selected"] = selected;
    // Warm-up (cuBLASLt's first call, module loads), then the isolated medians.
    for (auto& v : victims)
      for (int i = 0; i < 3; ++i)
        v->launch(i, s.victim);
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    // Warm-up of every load kernel and the gate, in the pattern the rows use, so no row is the
    // first to launch a kernel (NOTE [no wait on later work]); bounded like a row.
    {
      const LoadFlags f = s.load_flags();
      reset_flags(s);
      launch_spin(1, 1, f, s.load_records.as<CtaRecord>(), s.load);
      launch_gate(f.started, 1, f, s.victim);
      tide::calibrate::stream_write_u32(s.victim, f.stop, 1);
      if (!wait_idle(s)) std::printf("WARNING: spin warm-up needed the rescue\n");
      reset_flags(s);
      ReduceArgs a;
      a.in = s.reduce_in.as<std::uint16_t>();
      a.chunk_elems = 8 * s.width;
      a.stride = a.chunk_elems * s.chunks;
      a.out = s.reduce_out.as<float>();
      a.chunks = 1;
      launch_persistent_reduce(1, 1, a, f, s.load_records.as<CtaRecord>(), s.load);
      tide::kernels::launch_level1_sum(s.level1->args(0, 4), s.load,
                                       tide::kernels::recommended_level1_tuning(4));
      if (!wait_idle(s)) std::printf("WARNING: load warm-up needed the rescue\n");
      TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    }
    const char* loading = std::getenv("CUDA_MODULE_LOADING");
    std::printf("warm-up done at %.1f s (CUDA_MODULE_LOADING=%s); %zu rows to run\n", since(),
                loading ? loading : "(unset)", rows.size());
    watchdog.arm("isolated victims", 30);
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
    int row_index = 0;
    for (const Load& x : rows) {
      ++row_index;
      const std::string label = x.label();
      if (since() > budget_s) {
        skipped.push_back(label);
        continue;
      }
      const double row_t0 = since();
      std::printf("row %d/%zu %s: start at %.1f s\n", row_index, rows.size(), label.c_str(),
                  row_t0);
      for (auto& v : victims) {
        // One measurement takes ~10 ms; the rescue path at most ~8 s.
        watchdog.arm("row " + label + ", victim " + v->name(), 15);
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
        if (r.rescued) notes += "TIMED OUT (streams busy past the deadline; flags released); ";
        if (r.gate_timed_out) notes += "load not resident within 1 s (gate timed out); ";
        row["rescued"] = r.rescued;
        if (x.kind == "spin" || x.kind == "persistent") {
          row["load_distinct_sms"] = static_cast<int>(r.load_sms.size());
          row["load_max_resident_ms"] = r.load_max_resident_ms;
          row["load_ctas_recorded"] = r.load_ctas_recorded;
          row["load_start_spread_us"] = r.load_start_spread_us;
          row["gate_timed_out"] = r.gate_timed_out;
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
      std::printf("row %d/%zu %s: done in %.1f s (total %.1f s)\n", row_index, rows.size(),
                  label.c_str(), since() - row_t0, since());
      watchdog.arm("writing outputs after row " + label, 15);
      json waves = json::array();
      for (int cluster : {1, 4}) {
        waves.push_back(second_wave(out["rows"], "gemm", e_gemm, cluster, 0.3));
        waves.push_back(second_wave(out["rows"], "probe", e_probe, cluster, 0.3));
      }
      out["second_wave"] = waves;
      write_outputs(out, json_path, md_path);
    }
    watchdog.arm("final outputs", 15);
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
    std::fflush(stderr);
    std::_Exit(1);  // the device may still be busy: no destructors that synchronise
  }
}
