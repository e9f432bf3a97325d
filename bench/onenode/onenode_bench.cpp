// tide_onenode_bench: the one-node TIDE-RS (NOTE [one-node TIDE-RS]) run by the CUDA executor on
// the virtual fabric, against the copy ceiling of the same GPU. Per layer (Llama-3.1-8B, -70B
// decoder layer, bf16 gradients), split 1 x L (L = 2, 4, 8), program and accumulate:
//   - in-place        the peers push their pieces of each owner's rows into its staging ring;
//   - slot-reuse-pull the owners pull their rows from the peers' gradient areas (the program
//                     first copies each rank's gradients into its area: included in its time);
//   - slot-reuse-push the runtime's Slot-Reuse: the peers push from the slot the adapter filled
//                     (the adapter's copy is not in the program: `with_adapter_copy` adds the
//                     measured time of N concurrent copies of one unsharded layer, one a rank).
// Call time: the profiled run's GPU span (first stream head to last stream tail over every
// rank's streams), median, p10 and p90 over --repeats runs after 3 warm-up runs; the host wall
// time (first enqueue to observed completion) beside it.
// Rates: gradient bytes = N x the unsharded layer x 2 bytes (every gradient read once by a sum or
// a copy); HBM bytes = the model of what the call reads and writes (pieces staged: read and
// written once; sums: L contributions read, the fp32 shard written, read too with accumulate;
// the pull's local copy: read and written). The copy ceiling, timed the same way on the same
// GPU: one cudaMemcpyAsync device-to-device of the gradient bytes, and the same bytes as 8
// concurrent streams' copies; a copy of B bytes moves 2 B of HBM traffic.
// Every virtual rank shares ONE GPU's SMs, copy engines and HBM: the ceiling is one GPU's, and
// these are not NVLink timings.
//
// Usage: tide_onenode_bench [--out FILE.json] [--md FILE.md] [--repeats N] [--models a,b]
//        [--splits 2,4,8] [--max-gib G]  (configs whose buffers exceed G GiB are skipped, named)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../common/percentile.hpp"
#include "onenode_program.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/models.hpp"
#include "tide/core/rs_defaults.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/fabric/virtual_fabric.hpp"
#include "tide/program/rs_builder.hpp"

namespace {

using nlohmann::json;
using tide::DType;
using tide::GroupLayout;
using tide::Topology;
using tide::program::Buffer;
using tide::program::Program;
using tide::program::Space;

struct Stats {
  double median = 0, p10 = 0, p90 = 0;
};

using tide::bench::percentile;

Stats stats(const std::vector<double>& v) {
  return {percentile(v, 0.5), percentile(v, 0.1), percentile(v, 0.9)};
}

json to_json(const Stats& s) {
  return {{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}};
}

// The copy ceiling: `bytes` device to device, on one stream or dealt over `streams` concurrent
// streams (forked from and joined into the first), timed by events; ms per copy.
std::vector<double> time_copies(std::int64_t bytes, int streams, int repeats) {
  void* src = nullptr;
  void* dst = nullptr;
  TIDE_CUDA_CHECK(cudaMalloc(&src, static_cast<std::size_t>(bytes)));
  TIDE_CUDA_CHECK(cudaMalloc(&dst, static_cast<std::size_t>(bytes)));
  TIDE_CUDA_CHECK(cudaMemset(src, 0x3C, static_cast<std::size_t>(bytes)));
  std::vector<cudaStream_t> s(static_cast<std::size_t>(streams));
  std::vector<cudaEvent_t> joined(static_cast<std::size_t>(streams));
  for (int i = 0; i < streams; ++i) {
    TIDE_CUDA_CHECK(
        cudaStreamCreateWithFlags(&s[static_cast<std::size_t>(i)], cudaStreamNonBlocking));
    TIDE_CUDA_CHECK(
        cudaEventCreateWithFlags(&joined[static_cast<std::size_t>(i)], cudaEventDisableTiming));
  }
  cudaEvent_t begin, end;
  TIDE_CUDA_CHECK(cudaEventCreate(&begin));
  TIDE_CUDA_CHECK(cudaEventCreate(&end));
  const std::int64_t part = (bytes / streams) & ~std::int64_t{255};
  std::vector<double> ms;
  for (int rep = -3; rep < repeats; ++rep) {
    TIDE_CUDA_CHECK(cudaEventRecord(begin, s[0]));
    for (int i = 1; i < streams; ++i)
      TIDE_CUDA_CHECK(cudaStreamWaitEvent(s[static_cast<std::size_t>(i)], begin, 0));
    for (int i = 0; i < streams; ++i) {
      const std::int64_t off = i * part;
      const std::int64_t n = i + 1 == streams ? bytes - off : part;
      TIDE_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, static_cast<char*>(src) + off,
                                      static_cast<std::size_t>(n), cudaMemcpyDeviceToDevice,
                                      s[static_cast<std::size_t>(i)]));
      if (i > 0) {
        TIDE_CUDA_CHECK(
            cudaEventRecord(joined[static_cast<std::size_t>(i)], s[static_cast<std::size_t>(i)]));
        TIDE_CUDA_CHECK(cudaStreamWaitEvent(s[0], joined[static_cast<std::size_t>(i)], 0));
      }
    }
    TIDE_CUDA_CHECK(cudaEventRecord(end, s[0]));
    TIDE_CUDA_CHECK(cudaEventSynchronize(end));
    float t = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&t, begin, end));
    if (rep >= 0) ms.push_back(t);
  }
  for (int i = 0; i < streams; ++i) {
    TIDE_CUDA_CHECK(cudaStreamDestroy(s[static_cast<std::size_t>(i)]));
    TIDE_CUDA_CHECK(cudaEventDestroy(joined[static_cast<std::size_t>(i)]));
  }
  TIDE_CUDA_CHECK(cudaEventDestroy(begin));
  TIDE_CUDA_CHECK(cudaEventDestroy(end));
  TIDE_CUDA_CHECK(cudaFree(src));
  TIDE_CUDA_CHECK(cudaFree(dst));
  return ms;
}

void fill_all(tide::exec::CudaExecutor& ex, const Program& p) {
  // 0x3C bytes: finite bf16 and fp32 values (about 0.0115); the values are not checked here
  // (tide_cuda_executor_tests checks them bitwise).
  for (int r = 0; r < p.ranks; ++r) {
    const auto& s = p.buffers[static_cast<std::size_t>(r)];
    ex.fill(Buffer{r, Space::kArena, 0}, std::byte{0x3C});
    for (std::size_t i = 0; i < s.tensor_bytes.size(); ++i)
      ex.fill(Buffer{r, Space::kTensor, static_cast<int>(i)}, std::byte{0x3C});
    for (std::size_t i = 0; i < s.output_bytes.size(); ++i)
      ex.fill(Buffer{r, Space::kOutput, static_cast<int>(i)}, std::byte{0x3C});
  }
}

std::int64_t program_bytes(const Program& p) {
  std::int64_t total = 0;
  for (const auto& s : p.buffers) {
    total += s.arena_bytes;
    for (std::int64_t b : s.tensor_bytes)
      total += b;
    for (std::int64_t b : s.output_bytes)
      total += b;
  }
  return total;
}

std::vector<int> parse_ints(const std::string& text) {
  std::vector<int> v;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    v.push_back(std::stoi(item));
  return v;
}

std::vector<std::string> parse_names(const std::string& text) {
  std::vector<std::string> v;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    v.push_back(item);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path, md_path;
  int repeats = 25;
  double max_gib = 100.0;
  std::vector<std::string> models = {"llama3.1-8b", "llama3.1-70b"};
  std::vector<int> splits = {2, 4, 8};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--out")
      out_path = next();
    else if (a == "--md")
      md_path = next();
    else if (a == "--repeats")
      repeats = std::max(20, std::stoi(next()));
    else if (a == "--models")
      models = parse_names(next());
    else if (a == "--splits")
      splits = parse_ints(next());
    else if (a == "--max-gib")
      max_gib = std::stod(next());
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  int device = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  TIDE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const std::string caveat =
      "N virtual ranks share ONE GPU's SMs, copy engines and HBM: the ceiling is one GPU's "
      "copy rate, and these are not NVLink timings";
  json j = {{"gpu", prop.name}, {"repeats", repeats}, {"caveat", caveat}, {"rows", json::array()}};

  const auto& variants = tide::bench::one_node_variants();  // shared with the prediction
  std::ostringstream md;
  md << "# tide_onenode_bench on " << prop.name << "\n\n"
     << caveat << ".\n\n"
     << "Call time: GPU span of the profiled run (ms), median [p10, p90] over " << repeats
     << " runs after 3 warm-up runs. Gradient GB/s: N x NS x 2 bytes / median time; HBM GB/s: "
        "modelled bytes read + written / median time. Copy ceiling: cudaMemcpyAsync D2D of the "
        "gradient bytes (1 stream; 8 streams), HBM GB/s = 2 x bytes / time.\n\n"
     << "| layer | N | program | accumulate | ms median [p10, p90] | wall ms | grad GB/s | "
        "HBM GB/s | copy 1 stream GB/s (HBM) | copy 8 streams GB/s (HBM) | HBM vs 8-stream "
        "ceiling |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  int failures = 0;
  for (const std::string& model : models) {
    const auto& params = tide::find_model_group(model).params;
    for (int l : splits) {
      const Topology topo(1, l);
      const int n = topo.world();
      const GroupLayout layout(topo, params, DType::kBf16, DType::kBf16);
      const std::int64_t ns_bytes = layout.unsharded_bytes();  // one unsharded bf16 layer
      const std::int64_t grad_bytes = static_cast<std::int64_t>(n) * ns_bytes;
      // The copy ceiling for these bytes, and the adapter's copy (one NS per rank, N streams).
      const Stats copy1 = stats(time_copies(grad_bytes, 1, repeats));
      const Stats copy8 = stats(time_copies(grad_bytes, 8, repeats));
      const Stats adapter = stats(time_copies(grad_bytes, n, repeats));
      auto gbps = [](std::int64_t bytes, double ms) {
        return ms > 0 ? static_cast<double>(bytes) / (ms * 1e6) : 0.0;
      };
      for (const tide::bench::OneNodeVariant& v : variants) {
        for (bool accumulate : {false, true}) {
          json row = {{"layer", model},
                      {"split", "1x" + std::to_string(l)},
                      {"ranks", n},
                      {"program", v.name},
                      {"accumulate", accumulate},
                      {"ns_bytes", ns_bytes},
                      {"grad_bytes", grad_bytes}};
          const tide::RsPlan plan = tide::bench::one_node_plan(layout, v);
          const Program program = tide::bench::one_node_program(plan, n, accumulate);
          const std::int64_t buffers = program_bytes(program);
          row["buffer_bytes"] = buffers;
          row["chunk_elems"] = plan.chunk_elems();
          row["staging_slots"] = plan.options().staging_slots;
          if (static_cast<double>(buffers) > max_gib * double(1 << 30)) {
            row["skipped"] = "buffers of " + std::to_string(buffers >> 30) + " GiB > --max-gib";
            j["rows"].push_back(row);
            std::printf("%s 1x%d %s acc=%d: skipped (%lld GiB)\n", model.c_str(), l, v.name.c_str(),
                        accumulate ? 1 : 0, static_cast<long long>(buffers >> 30));
            continue;
          }
          try {
            tide::fabric::VirtualFabric fab(program);
            tide::exec::CudaExecutor ex(program, fab);
            fill_all(ex, program);
            tide::exec::CudaRunOptions prof;
            prof.profile = true;
            prof.timeout_s = 120.0;
            std::vector<double> span, wall;
            for (int rep = -3; rep < repeats; ++rep) {
              const auto r = ex.run(prof);
              double lo = 1e300, hi = -1e300;
              for (const auto& s : r.streams) {
                lo = std::min(lo, s.begin_ms);
                hi = std::max(hi, s.end_ms);
              }
              if (rep >= 0) {
                span.push_back(hi - lo);
                wall.push_back(r.wall_us / 1000.0);
              }
            }
            const Stats t = stats(span);
            const Stats w = stats(wall);
            // Modelled HBM traffic: staged pieces ((L-1)/L of every rank's gradients) read and
            // written; sums read L contributions of NS/L each per owner and write the fp32
            // shard (read it too with accumulate); the pull's local copy reads and writes NS.
            const double nsb = static_cast<double>(ns_bytes);
            double hbm = n * (2.0 * nsb * (l - 1) / l + nsb + 2.0 * nsb / l);
            if (accumulate) hbm += n * 2.0 * nsb / l;
            if (v.pull) hbm += n * 2.0 * nsb;
            row["ms"] = to_json(t);
            row["wall_ms"] = to_json(w);
            row["grad_gbps"] = gbps(grad_bytes, t.median);
            row["hbm_bytes_model"] = hbm;
            row["hbm_gbps"] = hbm / (t.median * 1e6);
            row["copy1_ms"] = to_json(copy1);
            row["copy8_ms"] = to_json(copy8);
            row["copy1_hbm_gbps"] = 2.0 * gbps(grad_bytes, copy1.median);
            row["copy8_hbm_gbps"] = 2.0 * gbps(grad_bytes, copy8.median);
            row["hbm_vs_copy8"] =
                row["hbm_gbps"].get<double>() / row["copy8_hbm_gbps"].get<double>();
            if (v.name == "slot-reuse-push") {
              row["adapter_copy_ms"] = to_json(adapter);
              row["with_adapter_copy_ms"] = t.median + adapter.median;
            }
            char line[1024];
            std::snprintf(line, sizeof line,
                          "| %s | 1x%d | %s | %s | %.3f [%.3f, %.3f] | %.3f | %.0f | %.0f | %.0f "
                          "(%.0f) | %.0f (%.0f) | %.2f |\n",
                          model.c_str(), l, v.name.c_str(), accumulate ? "yes" : "no", t.median,
                          t.p10, t.p90, w.median, row["grad_gbps"].get<double>(),
                          row["hbm_gbps"].get<double>(), gbps(grad_bytes, copy1.median),
                          row["copy1_hbm_gbps"].get<double>(), gbps(grad_bytes, copy8.median),
                          row["copy8_hbm_gbps"].get<double>(), row["hbm_vs_copy8"].get<double>());
            md << line;
            std::printf("%s", line);
          } catch (const std::exception& e) {
            ++failures;
            row["error"] = e.what();
            std::printf("%s 1x%d %s acc=%d: FAILED %s\n", model.c_str(), l, v.name.c_str(),
                        accumulate ? 1 : 0, e.what());
          }
          j["rows"].push_back(row);
          std::fflush(stdout);
        }
      }
    }
  }
  // Pull vs push for Slot-Reuse: the pull program (its local copy included) against the
  // runtime's push-from-slot plus the adapter's copy, per layer, split and accumulate.
  md << "\n## Slot-Reuse: pull vs push-from-slot (+ the adapter's copy)\n\n"
     << "| layer | N | accumulate | pull ms | push ms | adapter copy ms | push + copy ms | faster "
        "|\n| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  json choice = json::array();
  for (const json& pull : j["rows"]) {
    if (pull.value("program", "") != "slot-reuse-pull" || !pull.contains("ms")) continue;
    for (const json& push : j["rows"]) {
      if (push.value("program", "") != "slot-reuse-push" || !push.contains("ms") ||
          push["layer"] != pull["layer"] || push["split"] != pull["split"] ||
          push["accumulate"] != pull["accumulate"])
        continue;
      const double a = pull["ms"]["median"].get<double>();
      const double b = push["with_adapter_copy_ms"].get<double>();
      const std::string faster = a < b ? "pull" : "push";
      choice.push_back({{"layer", pull["layer"]},
                        {"split", pull["split"]},
                        {"accumulate", pull["accumulate"]},
                        {"pull_ms", a},
                        {"push_ms", push["ms"]["median"]},
                        {"push_with_adapter_copy_ms", b},
                        {"faster", faster}});
      char line[512];
      std::snprintf(
          line, sizeof line, "| %s | %s | %s | %.3f | %.3f | %.3f | %.3f | %s |\n",
          pull["layer"].get<std::string>().c_str(), pull["split"].get<std::string>().c_str(),
          pull["accumulate"].get<bool>() ? "yes" : "no", a, push["ms"]["median"].get<double>(),
          push["adapter_copy_ms"]["median"].get<double>(), b, faster.c_str());
      md << line;
    }
  }
  j["slot_reuse_choice"] = choice;
  std::printf("%s", md.str().c_str());
  if (!out_path.empty()) std::ofstream(out_path) << j.dump(2) << "\n";
  if (!md_path.empty()) std::ofstream(md_path) << md.str();
  return failures == 0 ? 0 : 1;
}
