// tide_executor_bench: TIDE-AG and TIDE-RS (In-Place, Slot-Reuse) run by the CUDA executor on
// the virtual fabric (docs/executor.md, Measurements). Per configuration (topology, P, collective):
//   - host enqueue latency of one call (CudaRunResult::enqueue_us; median and p99 over
//     repeats). One host thread enqueues every virtual rank's ops, so the time per rank is the
//     total divided by N; a real rank's thread enqueues only its own ops. Copy ops issue one
//     cudaMemcpyAsync / cudaMemcpy2DAsync per descriptor.
//   - copy descriptors issued per call and rank against the core's counts (TIDE-RS Level 1:
//     RsPlan::level1_descriptors(r).coalesced; TIDE-AG scatter: AgPlan::descriptor_counts(n)
//     .unicast).
//   - TIDE-RS SM time per call and rank: sum over its kernels (Level 1 sums, landings) of CTA
//     budget x kernel time (timing events around each launch), against a persistent kernel
//     of 13 or 16 CTAs holding its SMs for the rank's whole call (C x the rank's stream span).
//   - arena bytes: the VMM allocation against the core's memory model (RsPlan::memory();
//     AgPlan::stage_bytes() plus resident shard plus landing).
// Each topology and P runs TIDE-AG twice, in bf16 and as "AG fp8" (1-byte items, half the
// bytes), beside TIDE-RS in both modes.
// Timings between virtual ranks on one GPU are NOT NVLink timings: all ranks share one GPU's
// SMs and copy engines, and "remote" copies are local device-to-device copies.
//
// Usage: tide_executor_bench [--out FILE.json] [--repeats N] [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../common/percentile.hpp"
#include "tide/core/ag_plan.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/fabric/virtual_fabric.hpp"
#include "tide/program/ag_builder.hpp"
#include "tide/program/rs_builder.hpp"

namespace {

using nlohmann::json;
using tide::DType;
using tide::GroupLayout;
using tide::ParamShape;
using tide::Topology;
using tide::program::Buffer;
using tide::program::OpKind;
using tide::program::Program;
using tide::program::Space;

// P parameters of a transformer-like layer, odd rows, about `elems` elements each.
std::vector<ParamShape> shapes(int p, std::int64_t elems) {
  std::vector<ParamShape> v;
  for (int i = 0; i < p; ++i) {
    const std::int64_t cols = (i % 3 == 0) ? 1 : 128 * (1 + i % 4);  // norms/biases and matrices
    const std::int64_t rows =
        std::max<std::int64_t>(1, elems / cols / (i % 3 == 0 ? 64 : 1)) | 1;  // odd
    v.push_back({"p" + std::to_string(i), rows, cols});
  }
  return v;
}

using tide::bench::percentile;

// Copy descriptors per rank, by stream name, as the executor issues them (non-empty).
std::map<std::string, std::vector<std::int64_t>> descriptors(const Program& p) {
  std::map<std::string, std::vector<std::int64_t>> out;
  for (const auto& op : p.ops) {
    if (!op.is<tide::program::CopyOp>() && !op.is<tide::program::RailPutOp>()) continue;
    auto& v = out[p.stream_names[static_cast<std::size_t>(op.stream)]];
    v.resize(static_cast<std::size_t>(p.ranks), 0);
    for (const auto& c : tide::program::copies_of(op))
      v[static_cast<std::size_t>(op.rank)] += c.src.bytes() > 0 ? 1 : 0;
  }
  return out;
}

struct Config {
  int m, l, p;
  std::string collective;  // "AG", "AG fp8", "RS in-place", "RS slot-reuse"
};

void fill_all(tide::exec::CudaExecutor& ex, const Program& p) {
  // 0x3C bytes: finite bf16 and fp32 values (about 0.0115); the values are not checked here.
  for (int r = 0; r < p.ranks; ++r) {
    const auto& s = p.buffers[static_cast<std::size_t>(r)];
    ex.fill(Buffer{r, Space::kArena, 0}, std::byte{0x3C});
    for (std::size_t i = 0; i < s.tensor_bytes.size(); ++i)
      ex.fill(Buffer{r, Space::kTensor, static_cast<int>(i)}, std::byte{0x3C});
    for (std::size_t i = 0; i < s.output_bytes.size(); ++i)
      ex.fill(Buffer{r, Space::kOutput, static_cast<int>(i)}, std::byte{0x3C});
  }
}

// Enqueue timings of one executor over `repeats` calls after three warm-up calls.
struct Timing {
  std::vector<double> enqueue, wall;
  std::int64_t copies = 0, copy_calls = 0, kernels = 0, memops = 0;
};

Timing time_calls(const Program& program, tide::fabric::VirtualFabric& fab,
                  const tide::exec::CudaExecutorOptions& options, int repeats) {
  tide::exec::CudaExecutor ex(program, fab, options);
  Timing t;
  for (int i = 0; i < 3; ++i)
    (void)ex.run();  // warm-up
  for (int i = 0; i < repeats; ++i) {
    const auto r = ex.run();
    t.enqueue.push_back(r.enqueue_us);
    t.wall.push_back(r.wall_us);
    t.copies = r.copies;
    t.copy_calls = r.copy_calls;
    t.kernels = r.kernels;
    t.memops = r.memops;
  }
  return t;
}

json run_config(const Config& c, int repeats, std::int64_t elems) {
  const Topology topo(c.m, c.l);
  const int n = topo.world();
  const bool ag = c.collective.starts_with("AG");
  // "AG fp8": the same shapes all-gathered as 1-byte items (NOTE [1-byte all-gather items]).
  const DType ag_dtype = c.collective == "AG fp8" ? DType::kFp8 : DType::kBf16;
  const GroupLayout layout(topo, shapes(c.p, elems), ag_dtype, DType::kBf16);
  tide::AgOptions ao;
  const tide::AgPlan ag_plan(layout, ao);
  tide::RsOptions ro;
  ro.mode = c.collective == "RS slot-reuse" ? tide::RsMode::kSlotReuse : tide::RsMode::kInPlace;
  const tide::RsPlan rs_plan(layout, ro);
  tide::program::RsProgramOptions po;
  po.alpha = 1.0f / static_cast<float>(n);  // the library's CTA budgets (RsProgramOptions)
  const Program program =
      ag ? tide::program::build_ag_program(ag_plan) : tide::program::build_rs_program(rs_plan, po);

  tide::fabric::VirtualFabric fab(program);
  tide::exec::CudaExecutor ex(program, fab);
  fill_all(ex, program);
  const Timing first = time_calls(program, fab, {}, repeats);
  const std::vector<double>& enqueue = first.enqueue;
  const std::vector<double>& wall = first.wall;
  const std::int64_t copies = first.copies, kernels = first.kernels, memops = first.memops;
  json j = {{"topology", std::to_string(c.m) + "x" + std::to_string(c.l)},
            {"nodes", c.m},
            {"gpus_per_node", c.l},
            {"ranks", n},
            {"params", c.p},
            {"collective", c.collective},
            {"shapes", json::array()},
            {"shard_bytes", layout.shard_bytes()},
            {"unsharded_bytes", layout.unsharded_bytes()},
            {"ops", program.ops.size()},
            {"repeats", repeats},
            {"enqueue_us_median", percentile(enqueue, 0.5)},
            {"enqueue_us_p99", percentile(enqueue, 0.99)},
            {"enqueue_us_per_rank_median", percentile(enqueue, 0.5) / n},
            {"enqueue_us_per_rank_p99", percentile(enqueue, 0.99) / n},
            {"wall_us_median", percentile(wall, 0.5)},
            {"copies_per_call", copies},
            {"copy_calls_per_call", first.copy_calls},
            {"kernels_per_call", kernels},
            {"memops_per_call", memops}};
  for (const ParamShape& s : shapes(c.p, elems))
    j["shapes"].push_back({s.rows, s.cols});

  // Descriptors per rank against the core.
  const auto desc = descriptors(program);
  std::int64_t issued_total = 0;
  for (const auto& [name, v] : desc) {
    for (std::int64_t x : v)
      issued_total += x;
  }
  j["descriptors_program_total"] = issued_total;
  j["descriptors_by_stream"] = desc;
  bool match = true;
  std::int64_t predicted_max = 0, issued_max = 0;
  const std::string key = ag ? "scatter" : "push";
  for (int r = 0; r < n; ++r) {
    const std::int64_t predicted = ag ? ag_plan.descriptor_counts(topo.node_of(r)).unicast
                                      : rs_plan.level1_descriptors(r).coalesced;
    std::int64_t issued = 0;
    for (const auto& [name, v] : desc) {
      if (name.size() >= key.size() && name.compare(name.size() - key.size(), key.size(), key) == 0)
        issued += v[static_cast<std::size_t>(r)];
    }
    match = match && issued == predicted;
    predicted_max = std::max(predicted_max, predicted);
    issued_max = std::max(issued_max, issued);
  }
  j["descriptor_stream"] = key;
  j["descriptors_core_max_per_rank"] = predicted_max;
  j["descriptors_issued_max_per_rank"] = issued_max;
  j["descriptors_match_core"] = match;
  if (!ag) {
    j["paper_coalesced"] = rs_plan.paper_coalesced_descriptors();
    j["paper_flat"] = rs_plan.paper_flat_descriptors();
  }

  // Arena bytes.
  const std::int64_t arena_program = program.buffers[0].arena_bytes;
  const std::int64_t model =
      ag ? ag_plan.stage_bytes() + layout.shard_bytes() + layout.unsharded_bytes()
         : rs_plan.memory().total();
  j["arena_bytes_model_per_rank"] = model;
  j["arena_bytes_program_per_rank"] = arena_program;
  j["arena_stride"] = fab.arena_stride();
  j["vmm_bytes"] = fab.vmm_bytes();
  j["tensor_output_bytes"] = fab.buffer_bytes();
  j["executor_device_bytes"] = ex.device_bytes();

  // SM time (profiled runs).
  (void)ex.run();  // warm-up of this executor
  tide::exec::CudaRunOptions prof;
  prof.profile = true;
  std::vector<double> sm_ms, span_ms, kernel_ms;
  for (int i = 0; i < 5; ++i) {
    const auto r = ex.run(prof);
    std::vector<double> sm(static_cast<std::size_t>(n), 0.0), lo(static_cast<std::size_t>(n), 1e30),
        hi(static_cast<std::size_t>(n), 0.0);
    double kms = 0;
    for (const auto& k : r.kernels_timed) {
      if (k.kind == OpKind::kSum || k.kind == OpKind::kLand) {
        sm[static_cast<std::size_t>(k.rank)] += k.ctas * k.ms;
        kms += k.ms;
      }
    }
    for (const auto& s : r.streams) {
      lo[static_cast<std::size_t>(s.rank)] =
          std::min(lo[static_cast<std::size_t>(s.rank)], s.begin_ms);
      hi[static_cast<std::size_t>(s.rank)] =
          std::max(hi[static_cast<std::size_t>(s.rank)], s.end_ms);
    }
    double sum_sm = 0, sum_span = 0;
    for (int q = 0; q < n; ++q) {
      sum_sm += sm[static_cast<std::size_t>(q)];
      sum_span += hi[static_cast<std::size_t>(q)] - lo[static_cast<std::size_t>(q)];
    }
    sm_ms.push_back(sum_sm / n);
    span_ms.push_back(sum_span / n);
    kernel_ms.push_back(kms / n);
  }
  j["sm_cta_ms_per_rank_median"] = percentile(sm_ms, 0.5);
  j["kernel_ms_per_rank_median"] = percentile(kernel_ms, 0.5);
  j["call_span_ms_per_rank_median"] = percentile(span_ms, 0.5);
  j["persistent13_cta_ms_per_rank"] = 13 * percentile(span_ms, 0.5);
  j["persistent16_cta_ms_per_rank"] = 16 * percentile(span_ms, 0.5);
  return j;
}

std::string mib(std::int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(b) / (1 << 20));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "executor_bench.json";
  int repeats = 50;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr,
                   "usage: tide_executor_bench [--out FILE.json] [--repeats N] [--quick]\n");
      return 2;
    }
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "tide_executor_bench: no CUDA device\n");
    return 3;
  }
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  const std::int64_t elems = quick ? 4096 : 65536;  // per parameter, about
  std::vector<Config> configs;
  for (auto [m, l] : std::vector<std::pair<int, int>>{{2, 8}, {8, 8}}) {
    for (int p : {16, 30}) {
      for (const char* c : {"AG", "AG fp8", "RS in-place", "RS slot-reuse"})
        configs.push_back({m, l, p, c});
    }
  }
  std::printf(
      "tide_executor_bench on %s: N virtual ranks on ONE GPU. Timings between virtual ranks on "
      "one GPU are not NVLink timings (shared SMs and copy engines; 'remote' copies are local).\n"
      "enqueue: one host thread enqueues all N ranks' ops; /rank = total / N.\n\n",
      prop.name);
  std::printf("%-5s %-3s %-14s %5s %10s %10s %9s %8s %9s %8s %8s %6s %10s %10s %10s %9s %9s\n",
              "MxL", "P", "collective", "ops", "enq_med", "enq_p99", "enq/rk", "calls", "wall_med",
              "desc/rk", "core/rk", "match", "SM cta*ms", "pers13", "pers16", "arena MiB",
              "model MiB");
  json results = json::array();
  for (const Config& c : configs) {
    json j;
    try {
      j = run_config(c, repeats, elems);
    } catch (const std::exception& e) {
      std::printf("%dx%d P=%d %s: FAILED: %s\n", c.m, c.l, c.p, c.collective.c_str(), e.what());
      results.push_back({{"topology", std::to_string(c.m) + "x" + std::to_string(c.l)},
                         {"params", c.p},
                         {"collective", c.collective},
                         {"error", e.what()}});
      continue;
    }
    const bool rs = !c.collective.starts_with("AG");
    std::printf(
        "%-5s %-3d %-14s %5lld %10.1f %10.1f %9.1f %8lld %9.1f %8lld %8lld %6s %10s %10s %10s "
        "%9s %9s\n",
        j["topology"].get<std::string>().c_str(), c.p, c.collective.c_str(),
        static_cast<long long>(j["ops"].get<std::int64_t>()), j["enqueue_us_median"].get<double>(),
        j["enqueue_us_p99"].get<double>(), j["enqueue_us_per_rank_median"].get<double>(),
        static_cast<long long>(j["copy_calls_per_call"].get<std::int64_t>()),
        j["wall_us_median"].get<double>(),
        static_cast<long long>(j["descriptors_issued_max_per_rank"].get<std::int64_t>()),
        static_cast<long long>(j["descriptors_core_max_per_rank"].get<std::int64_t>()),
        j["descriptors_match_core"].get<bool>() ? "yes" : "NO",
        rs ? std::to_string(j["sm_cta_ms_per_rank_median"].get<double>()).substr(0, 8).c_str()
           : "-",
        rs ? std::to_string(j["persistent13_cta_ms_per_rank"].get<double>()).substr(0, 8).c_str()
           : "-",
        rs ? std::to_string(j["persistent16_cta_ms_per_rank"].get<double>()).substr(0, 8).c_str()
           : "-",
        mib(j["arena_bytes_program_per_rank"].get<std::int64_t>()).c_str(),
        mib(j["arena_bytes_model_per_rank"].get<std::int64_t>()).c_str());
    std::fflush(stdout);
    results.push_back(j);
  }
  std::printf(
      "\nenq_med/p99: host us per call (all N ranks); enq/rk: host us per call and rank; "
      "calls: copy API calls per call (all ranks); "
      "desc/rk: copy descriptors on the Level 1 push "
      "(RS) or scatter (AG) streams, max over ranks, vs the core's count; SM cta*ms: per rank, "
      "sum of CTA budget x kernel time of Level 1 sums and landings; pers13/16: a persistent "
      "13/16-CTA kernel held for the rank's call span; arena: per rank as the program sizes it "
      "(the VMM stride rounds it up to 2 MiB) vs the memory model.\n");
  json out = {{"device", prop.name},
              {"note",
               "virtual ranks on one GPU: timings between them are not NVLink timings; enqueue "
               "times are for one host thread enqueuing all N ranks' ops"},
              {"elems_per_param_about", elems},
              {"repeats", repeats},
              {"results", results}};
  std::ofstream(out_path) << out.dump(2) << "\n";
  std::printf("wrote %s\n", out_path.c_str());
  return 0;
}
