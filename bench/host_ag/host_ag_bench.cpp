// tide_host_ag_bench: TIDE-AG with 1-byte items (fp8, u8: NOTE [1-byte all-gather items]) against
// bf16 on the same shapes, on the runtime's host backend: one CPU process per rank on one host,
// the arena in POSIX shared memory, real byte copies (NOTE [host execution]). A benchmark, not a
// test; results in bench/results/executor/fp8-all-gather-cpu-2026-12-07/.
//   1. Per configuration (M x L, P, shard mode, dtype) fork M L ranks; each registers one group
//      of the same shapes in the all-gather dtype (gradients bf16), fills its packed shard with
//      byte codes from the seed, and makes `warmup` + `repeats` all-gathers, releasing the
//      landing after each (not timed).
//   2. A host call runs on the caller's thread, complete when it returns: each call's time on
//      a rank is its wall time (steady clock), waits for peers included.
//   3. After the timed calls every rank checks its landing byte for byte against Eq. 2 (every
//      rank's shard is drawn from (seed, rank), so every rank knows it); a mismatch fails the run.
//   4. The parent reports, per configuration, the median over ranks of each rank's median call
//      time and the p10 / p90 over every rank's calls, and the bytes each rank receives.
// Timings are a CPU's memcpy and spin-wait costs, not a GPU's: on few cores, ranks beyond the
// core count time-share (say so when reporting).
//
// Usage: tide_host_ag_bench [--out FILE.json] [--repeats N] [--warmup N] [--elems E]
//                           [--params P] [--seed S] [--dtypes bf16,fp8,...]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../common/percentile.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/process.hpp"
#include "tide/core/store.hpp"
#include "tide/runtime/communicator.hpp"

namespace {

using nlohmann::json;
using tide::DType;
using tide::GroupLayout;
using tide::ParamShape;

struct Args {
  std::string out = "host_ag_bench.json";
  int repeats = 30;
  int warmup = 3;
  std::int64_t elems = std::int64_t{1} << 20;  // per parameter, about
  int params = 16;
  std::uint64_t seed = 1;
  std::vector<std::string> dtypes = {"bf16", "fp8"};
};

struct Config {
  int m = 1, l = 2;
  bool staged = false;  // shards by pointer per call (as tide.fsdp registers), else resident
  DType dtype = DType::kBf16;
};

// P parameters of a transformer-like layer, odd rows, about `elems` elements each (the shapes of
// tide_executor_bench).
std::vector<ParamShape> shapes(int p, std::int64_t elems) {
  std::vector<ParamShape> v;
  for (int i = 0; i < p; ++i) {
    const std::int64_t cols = (i % 3 == 0) ? 1 : 128 * (1 + i % 4);
    const std::int64_t rows = std::max<std::int64_t>(1, elems / cols / (i % 3 == 0 ? 64 : 1)) | 1;
    v.push_back({"p" + std::to_string(i), rows, cols});
  }
  return v;
}

using tide::bench::percentile;

// Rank r's packed shard: byte codes 1..255 drawn from (seed, r), whatever the dtype (the
// all-gather moves bytes; bf16 words of two random codes are finite or not, never read).
std::vector<std::byte> shard_of(const GroupLayout& layout, std::uint64_t seed, int rank) {
  std::seed_seq seq{seed, static_cast<std::uint64_t>(rank), std::uint64_t{0x66703861}};
  std::mt19937_64 rng(seq);
  std::vector<std::byte> shard(static_cast<std::size_t>(layout.shard_bytes()));
  for (std::byte& b : shard)
    b = static_cast<std::byte>(1 + rng() % 255);
  return shard;
}

// One rank: its call times (ms) as JSON, or an error.
json run_rank(const Args& a, const Config& c, int rank, const std::filesystem::path& store) {
  tide::runtime::CommunicatorOptions o;
  o.rank = rank;
  o.world = c.m * c.l;
  o.gpus_per_node = c.l;
  o.backend = tide::runtime::BackendKind::kHost;
  o.store = std::make_shared<tide::FileStore>(store);
  o.timeout = std::chrono::seconds(120);
  auto comm = tide::runtime::Communicator::create(o);
  tide::runtime::GroupSpec spec;
  spec.name = "layer";
  spec.params = shapes(a.params, a.elems);
  spec.ag_dtype = c.dtype;
  spec.grad_dtype = DType::kBf16;
  spec.staged_shards = c.staged;
  const tide::runtime::Registration reg = comm->register_group(spec);
  if (reg.group < 0) throw tide::Unsupported("the group was refused: " + reg.reason);
  const GroupLayout layout(tide::Topology(c.m, c.l), spec.params, c.dtype, DType::kBf16);
  const tide::runtime::GroupInfo& info = comm->info(reg.group);
  const std::vector<std::byte> mine = shard_of(layout, a.seed, rank);
  std::vector<const void*> pointers;
  if (c.staged) {
    for (const tide::ParamLayout& pl : layout.params())
      pointers.push_back(mine.data() + pl.offset);
  } else {
    std::memcpy(info.resident, mine.data(), mine.size());
  }
  std::vector<double> ms;
  for (int call = 0; call < a.warmup + a.repeats; ++call) {
    std::memset(info.landing, 0, static_cast<std::size_t>(info.landing_bytes));  // poison
    const auto start = std::chrono::steady_clock::now();
    comm->all_gather(reg.group, 0, pointers);
    const auto end = std::chrono::steady_clock::now();
    comm->check();
    if (call >= a.warmup)
      ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    if (call + 1 < a.warmup + a.repeats) comm->release(reg.group, 0);
  }
  std::int64_t mismatches = 0;  // the last call's landing against Eq. 2
  for (int u = 0; u < layout.topology().world(); ++u) {
    const std::vector<std::byte> theirs = shard_of(layout, a.seed, u);
    for (int p = 0; p < layout.param_count(); ++p) {
      const tide::ParamLayout& pl = layout.param(p);
      mismatches +=
          std::memcmp(info.landing + layout.landing_offset(p, u), theirs.data() + pl.offset,
                      static_cast<std::size_t>(pl.shard_bytes)) != 0;
    }
  }
  comm->release(reg.group, 0);
  return {{"rank", rank}, {"ms", ms}, {"mismatches", mismatches}};
}

json run_config(const Args& a, const Config& c, const std::filesystem::path& dir) {
  const int world = c.m * c.l;
  const std::filesystem::path store = dir / "store";
  std::filesystem::remove_all(store);
  std::filesystem::create_directories(store);
  tide::WaitPolicy policy;
  policy.deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  policy.failure_grace = std::chrono::seconds(5);
  const std::vector<tide::ChildExit> exits = tide::run_processes(
      world,
      [&](int rank) {
        return tide::fork_child(
            [&, rank] {
              json out;
              int status = 0;
              try {
                out = run_rank(a, c, rank, store);
                status = out["mismatches"].get<std::int64_t>() == 0 ? 0 : 1;
              } catch (const std::exception& e) {
                out = {{"rank", rank}, {"error", e.what()}};
                status = 1;
              }
              std::ofstream(dir / ("rank" + std::to_string(rank) + ".json")) << out.dump();
              return status;
            },
            /*die_with_parent=*/true);
      },
      policy);
  const GroupLayout layout(tide::Topology(c.m, c.l), shapes(a.params, a.elems), c.dtype,
                           DType::kBf16);
  json j = {{"topology", std::to_string(c.m) + "x" + std::to_string(c.l)},
            {"ranks", world},
            {"params", a.params},
            {"shards", c.staged ? "staged" : "resident"},
            {"ag_dtype", tide::dtype_name(c.dtype)},
            {"shard_bytes", layout.shard_bytes()},
            {"landing_bytes", layout.unsharded_bytes()},
            {"received_bytes_per_rank", layout.unsharded_bytes() - layout.shard_bytes()},
            {"repeats", a.repeats},
            {"warmup", a.warmup}};
  std::vector<double> all, medians;
  std::int64_t mismatches = 0;
  for (int r = 0; r < world; ++r) {
    json row;
    std::ifstream in(dir / ("rank" + std::to_string(r) + ".json"));
    if (!in) {
      j["error"] = "rank " + std::to_string(r) + " left no result (wait status " +
                   std::to_string(exits[static_cast<std::size_t>(r)].wait_status) + ")";
      return j;
    }
    in >> row;
    if (row.contains("error")) {
      j["error"] = "rank " + std::to_string(r) + ": " + row["error"].get<std::string>();
      return j;
    }
    const std::vector<double> ms = row["ms"].get<std::vector<double>>();
    all.insert(all.end(), ms.begin(), ms.end());
    medians.push_back(percentile(ms, 0.5));
    mismatches += row["mismatches"].get<std::int64_t>();
  }
  j["ms_median"] = percentile(medians, 0.5);
  j["ms_p10"] = percentile(all, 0.1);
  j["ms_p90"] = percentile(all, 0.9);
  j["ms_min"] = percentile(all, 0.0);
  j["ms_max"] = percentile(all, 1.0);
  j["rank_medians_ms"] = medians;
  j["mismatches"] = mismatches;
  j["gbps_received_per_rank"] =
      static_cast<double>(layout.unsharded_bytes() - layout.shard_bytes()) /
      (j["ms_median"].get<double>() * 1e6);
  return j;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(',', start);
    out.push_back(text.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const bool has = i + 1 < argc;
    if (s == "--out" && has) {
      a.out = argv[++i];
    } else if (s == "--repeats" && has) {
      a.repeats = std::max(1, std::atoi(argv[++i]));
    } else if (s == "--warmup" && has) {
      a.warmup = std::max(0, std::atoi(argv[++i]));
    } else if (s == "--elems" && has) {
      a.elems = std::max<std::int64_t>(64, std::atoll(argv[++i]));
    } else if (s == "--params" && has) {
      a.params = std::clamp(std::atoi(argv[++i]), 1, tide::kMaxParamsPerGroup);
    } else if (s == "--seed" && has) {
      a.seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (s == "--dtypes" && has) {
      a.dtypes = split(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: tide_host_ag_bench [--out FILE.json] [--repeats N] [--warmup N] "
                   "[--elems E] [--params P] [--seed S] [--dtypes bf16,fp8,...]\n");
      return 2;
    }
  }
  std::vector<DType> dtypes;
  try {
    for (const std::string& d : a.dtypes)
      dtypes.push_back(tide::parse_dtype(d, "--dtypes entry"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tide_host_ag_bench: %s\n", e.what());
    return 2;
  }
  char pattern[] = "/tmp/tide-host-ag-bench-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    std::fprintf(stderr, "tide_host_ag_bench: cannot create a temporary directory\n");
    return 1;
  }
  const std::filesystem::path dir(pattern);
  std::printf(
      "tide_host_ag_bench: TIDE-AG on the host backend (CPU processes, POSIX shared memory, "
      "%ld online CPUs), P = %d, about %lld elements per parameter, %d calls after %d warm-up, "
      "seed %llu\n",
      sysconf(_SC_NPROCESSORS_ONLN), a.params, static_cast<long long>(a.elems), a.repeats, a.warmup,
      static_cast<unsigned long long>(a.seed));
  std::printf("%-5s %-9s %-5s %12s %12s %10s %10s %10s %9s %6s\n", "MxL", "shards", "dtype",
              "shard B", "landing B", "med ms", "p10 ms", "p90 ms", "GB/s rx", "check");
  std::fflush(stdout);
  json results = json::array();
  bool ok = true;
  for (auto [m, l] : std::vector<std::pair<int, int>>{{1, 2}, {2, 1}, {2, 2}}) {
    for (const bool staged : {false, true}) {
      for (const DType dtype : dtypes) {
        const Config c{m, l, staged, dtype};
        json j;
        try {
          j = run_config(a, c, dir);
        } catch (const std::exception& e) {
          j = {{"topology", std::to_string(m) + "x" + std::to_string(l)}, {"error", e.what()}};
        }
        if (j.contains("error")) {
          ok = false;
          std::printf("%dx%d %s: FAILED: %s\n", m, l, std::string(tide::dtype_name(dtype)).c_str(),
                      j["error"].get<std::string>().c_str());
        } else {
          ok = ok && j["mismatches"].get<std::int64_t>() == 0;
          std::printf("%-5s %-9s %-5s %12lld %12lld %10.3f %10.3f %10.3f %9.2f %6s\n",
                      j["topology"].get<std::string>().c_str(),
                      j["shards"].get<std::string>().c_str(),
                      j["ag_dtype"].get<std::string>().c_str(),
                      static_cast<long long>(j["shard_bytes"].get<std::int64_t>()),
                      static_cast<long long>(j["landing_bytes"].get<std::int64_t>()),
                      j["ms_median"].get<double>(), j["ms_p10"].get<double>(),
                      j["ms_p90"].get<double>(), j["gbps_received_per_rank"].get<double>(),
                      j["mismatches"].get<std::int64_t>() == 0 ? "exact" : "FAIL");
        }
        std::fflush(stdout);
        results.push_back(j);
      }
    }
  }
  std::filesystem::remove_all(dir);
  const json out = {{"bench", "tide_host_ag_bench"},
                    {"online_cpus", sysconf(_SC_NPROCESSORS_ONLN)},
                    {"params", a.params},
                    {"elems_per_param_about", a.elems},
                    {"repeats", a.repeats},
                    {"warmup", a.warmup},
                    {"seed", a.seed},
                    {"results", results}};
  std::ofstream(a.out) << out.dump(2) << "\n";
  std::printf("wrote %s\n", a.out.c_str());
  return ok ? 0 : 1;
}
