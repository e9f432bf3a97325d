// Benchmark of TIDE's kernels on one GPU (a benchmark, not a test): the Level 1 sum
// (paper Sec. 4.1, App. G BW_sum), the pull landing (Sec. 4.2, BW_land) and the cast
// (Sec. 3.1), against the device-to-device copy ceiling measured in the same run.
//
// Method (../../.library is not needed: see docs/kernels.md): CUDA events around every
// launch, medians over repeats after warm-up, inputs rotated over sets whose total is far
// larger than the 50 MB L2, inputs filled with random (non-zero) data on the device; every
// timed sum configuration is re-run once on a poisoned output and checked bitwise against
// tide::arith on the host. Bytes are logical, as the paper counts them: the Level 1 sum at
// L = 8 moves 8 reads of 2 bytes plus 1 write of 4 bytes per fp32 partial; the landing W
// reads and 1 write of 4 bytes; the cast 4 + 2 bytes; a copy 2 x its size.
//
// Usage: tide_kernels_bench [--json PATH] [--quick] [--sum-only] [--fp32-direct] [--width N]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "tide/core/arithmetic.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/cast.hpp"
#include "tide/kernels/fill_random.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"

namespace {

using namespace tide::kernels;
using nlohmann::json;

// ---- device helpers -------------------------------------------------------------------

__global__ void sm_copy(uint4* __restrict__ dst, const uint4* __restrict__ src, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  for (; i + stride < n; i += 2 * stride) {
    const uint4 a = src[i];
    const uint4 b = src[i + stride];
    dst[i] = a;
    dst[i + stride] = b;
  }
  if (i < n) dst[i] = src[i];
}

void fill(void* p, std::int64_t n, int esz, std::uint64_t seed) {
  tide::kernels::launch_fill_random(p, n, esz, seed, nullptr);
  TIDE_CUDA_CHECK_LAUNCH();
}

struct Dev {
  void* p = nullptr;
  explicit Dev(std::size_t bytes) { TIDE_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <typename T = unsigned char>
  T* as() const {
    return static_cast<T*>(p);
  }
};

struct Spread {
  double median = 0, p10 = 0, p90 = 0;
};

// Milliseconds of `reps` launches of fn(rep), each between its own event pair: median, p10, p90.
template <typename F>
Spread timed_ms(int warmup, int reps, F&& fn) {
  for (int i = 0; i < warmup; ++i)
    fn(i);
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * reps));
  for (auto& e : ev)
    TIDE_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    TIDE_CUDA_CHECK(cudaEventRecord(ev[static_cast<std::size_t>(2 * i)]));
    fn(warmup + i);
    TIDE_CUDA_CHECK(cudaEventRecord(ev[static_cast<std::size_t>(2 * i + 1)]));
  }
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[static_cast<std::size_t>(2 * i)],
                                         ev[static_cast<std::size_t>(2 * i + 1)]));
    t.push_back(ms);
  }
  for (auto& e : ev)
    cudaEventDestroy(e);
  std::sort(t.begin(), t.end());
  const auto at = [&](double q) { return t[static_cast<std::size_t>(q * (t.size() - 1) + 0.5)]; };
  return {t[t.size() / 2], at(0.1), at(0.9)};
}

template <typename F>
double median_ms(int warmup, int reps, F&& fn) {
  return timed_ms(warmup, reps, fn).median;
}

std::string shell(const char* cmd) {
  std::string out;
  if (FILE* f = popen(cmd, "r")) {
    char buf[512];
    while (fgets(buf, sizeof(buf), f) != nullptr)
      out += buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
    out.pop_back();
  return out;
}

// ---- Level 1 problem --------------------------------------------------------------------

constexpr int kRows = 8;
constexpr int kParams = 16;

struct SumSet {
  std::unique_ptr<Dev> staged, grads, out;
  std::vector<const void*> grad_ptrs;
};

struct SumBench {
  tide::DType dtype;
  std::int64_t width;
  int num_staged = 7;
  int esz;
  std::int64_t per_param;  // elements per parameter gradient
  std::vector<SumSet> sets;
  std::unique_ptr<Level1SegmentTable> table;

  std::int64_t stride_pad = 0;  // elements between contributions beyond rows x width
  float alpha = 0.125f;         // FSDP2's divide factor for 8 ranks; 1 selects the no-multiply path

  SumBench(tide::DType dt, std::int64_t w, int nsets, std::int64_t pad = 0, int staged = 7)
      : dtype(dt), width(w), num_staged(staged), stride_pad(pad) {
    esz = static_cast<int>(tide::item_bytes(dt));
    // Each row: kParams runs of width / kParams columns, parameter p's shard for row r at
    // offset r * run (16-byte aligned), as FSDP2's dim-0 shards of 16 parameters would be.
    const std::int64_t run = width / kParams;
    per_param = kRows * run;
    std::vector<Level1RunSpec> specs;
    for (int r = 0; r < kRows; ++r) {
      for (int p = 0; p < kParams; ++p) {
        const std::int64_t len = p == kParams - 1 ? width - p * run : run;
        specs.push_back({r, p * run, len, p, r * run});
      }
    }
    per_param += width - kParams * run;  // the last run's extra
    table = std::make_unique<Level1SegmentTable>(kRows, width, specs);
    for (int s = 0; s < nsets; ++s) {
      SumSet set;
      const std::int64_t staged_elems =
          static_cast<std::int64_t>(num_staged) * (kRows * width + stride_pad);
      set.staged = std::make_unique<Dev>(static_cast<std::size_t>(staged_elems * esz));
      set.grads = std::make_unique<Dev>(static_cast<std::size_t>(kParams * (per_param + 64) * esz));
      set.out = std::make_unique<Dev>(static_cast<std::size_t>(kRows * width * 4));
      fill(set.staged->p, staged_elems, esz, 1000 + static_cast<std::uint64_t>(s));
      fill(set.grads->p, kParams * (per_param + 64), esz, 2000 + static_cast<std::uint64_t>(s));
      for (int p = 0; p < kParams; ++p)
        set.grad_ptrs.push_back(set.grads->as() + p * (per_param + 64) * esz);
      sets.push_back(std::move(set));
    }
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  }

  Level1SumArgs args(int s, int ctas, bool accumulate) const {
    const SumSet& set = sets[static_cast<std::size_t>(s)];
    Level1SumArgs a;
    a.out = set.out->as<float>();
    a.out_pitch = width;
    a.dtype = dtype;
    a.staged = set.staged->p;
    a.num_staged = num_staged;
    a.staged_pitch = width;
    a.staged_stride = kRows * width + stride_pad;
    a.gradients = set.grad_ptrs.data();
    a.num_gradients = kParams;
    a.table = table->view();
    a.alpha = alpha;
    a.accumulate = accumulate;
    a.ctas = ctas;
    return a;
  }

  double logical_bytes(bool accumulate) const {
    return static_cast<double>(kRows) * static_cast<double>(width) *
           ((num_staged + 1) * esz + 4 + (accumulate ? 4 : 0));
  }

  // Re-runs on set 0 with a poisoned output and compares every element with tide::arith.
  bool check(int ctas, const Level1Tuning& tu) const {
    const SumSet& set = sets[0];
    const std::size_t n = static_cast<std::size_t>(kRows * width);
    TIDE_CUDA_CHECK(cudaMemset(set.out->p, 0xFF, n * 4));
    launch_level1_sum(args(0, ctas, false), nullptr, tu);
    TIDE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> got(n);
    TIDE_CUDA_CHECK(cudaMemcpy(got.data(), set.out->p, n * 4, cudaMemcpyDeviceToHost));
    if (ref.empty()) compute_reference();
    return std::memcmp(got.data(), ref.data(), n * 4) == 0;
  }

  mutable std::vector<float> ref;
  void compute_reference() const {
    const SumSet& set = sets[0];
    const std::int64_t staged_elems =
        static_cast<std::int64_t>(num_staged) * (kRows * width + stride_pad);
    std::vector<unsigned char> st(static_cast<std::size_t>(staged_elems * esz));
    std::vector<unsigned char> gr(static_cast<std::size_t>(kParams * (per_param + 64) * esz));
    TIDE_CUDA_CHECK(cudaMemcpy(st.data(), set.staged->p, st.size(), cudaMemcpyDeviceToHost));
    TIDE_CUDA_CHECK(cudaMemcpy(gr.data(), set.grads->p, gr.size(), cudaMemcpyDeviceToHost));
    auto value = [&](const std::vector<unsigned char>& b, std::int64_t i) {
      if (esz == 2) {
        std::uint16_t v;
        std::memcpy(&v, b.data() + i * 2, 2);
        return tide::arith::bf16_to_float(v);
      }
      float v;
      std::memcpy(&v, b.data() + i * 4, 4);
      return v;
    };
    ref.assign(static_cast<std::size_t>(kRows * width), 0.0f);
    const std::int64_t run = width / kParams;
    std::vector<float> x(static_cast<std::size_t>(num_staged));
    for (int r = 0; r < kRows; ++r) {
      for (std::int64_t c = 0; c < width; ++c) {
        for (int k = 0; k < num_staged; ++k) {
          x[static_cast<std::size_t>(k)] =
              value(st, k * (kRows * width + stride_pad) + r * width + c);
        }
        const int p = static_cast<int>(std::min<std::int64_t>(c / run, kParams - 1));
        const std::int64_t src = r * run + (c - p * run);
        const float own = value(gr, p * (per_param + 64) + src);
        ref[static_cast<std::size_t>(r * width + c)] = tide::arith::level1_partial(x, own, alpha);
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "kernels_h200.json";
  bool quick = false;
  bool sum_only = false;       // the Level 1 CTA table only (no sweeps, landing, cast)
  bool fp32_direct = false;    // the fp32 warp-direct kernel at 16 and 8 warps a CTA only
  std::int64_t width_arg = 0;  // Level 1 block width (columns); default 2^20
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--sum-only") {
      sum_only = true;
    } else if (a == "--fp32-direct") {
      fp32_direct = true;
    } else if (a == "--width" && i + 1 < argc) {
      width_arg = std::stoll(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--json PATH] [--quick] [--sum-only] [--fp32-direct] [--width N]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    int dev = 0;
    TIDE_CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop{};
    TIDE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    const int sms = prop.multiProcessorCount;
    int driver = 0, runtime = 0;
    TIDE_CUDA_CHECK(cudaDriverGetVersion(&driver));
    TIDE_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    const char* smi_query =
        "nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,"
        "power.draw,power.limit,temperature.gpu,pstate --format=csv,noheader 2>/dev/null";
    json j;
    j["command"] = std::string(argv[0]) + (quick ? " --quick" : "") +
                   (sum_only ? " --sum-only" : "") + (fp32_direct ? " --fp32-direct" : "") +
                   (width_arg > 0 ? " --width " + std::to_string(width_arg) : "") + " --json " +
                   json_path;
    j["gpu"] = prop.name;
    j["sms"] = sms;
    j["l2_bytes"] = prop.l2CacheSize;
    j["cuda_driver_api"] = driver;
    j["cuda_runtime"] = runtime;
    j["nvidia_smi_before"] = shell(smi_query);
    std::printf("GPU %s, %d SMs, L2 %d MB; smi: %s\n", prop.name, sms, prop.l2CacheSize >> 20,
                j["nvidia_smi_before"].get<std::string>().c_str());

    // ---- copy ceiling ----
    const std::size_t copy_bytes = 1ull << 30;
    double ceiling_memcpy = 0, ceiling_sm = 0;
    {
      Dev a(copy_bytes), b(copy_bytes);
      fill(a.p, static_cast<std::int64_t>(copy_bytes / 4), 4, 7);
      const double ms = median_ms(3, 20, [&](int) {
        TIDE_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, copy_bytes, cudaMemcpyDeviceToDevice));
      });
      ceiling_memcpy = 2.0 * copy_bytes / (ms * 1e-3) / 1e9;
      const double ms2 = median_ms(3, 20, [&](int) {
        sm_copy<<<sms * 4, 512>>>(b.as<uint4>(), a.as<uint4>(),
                                  static_cast<std::int64_t>(copy_bytes / 16));
        TIDE_CUDA_CHECK_LAUNCH();
      });
      ceiling_sm = 2.0 * copy_bytes / (ms2 * 1e-3) / 1e9;
    }
    const double ceiling = std::max(ceiling_memcpy, ceiling_sm);
    j["copy_ceiling_gbps"] = ceiling;
    j["copy_memcpy_d2d_gbps"] = ceiling_memcpy;
    j["copy_sm_kernel_gbps"] = ceiling_sm;
    j["copy_bytes"] = copy_bytes;
    std::printf("copy ceiling: cudaMemcpy D2D %.0f GB/s, SM copy kernel %.0f GB/s (read+write)\n",
                ceiling_memcpy, ceiling_sm);

    // ---- fp32 inputs, warp-direct: 16 warps (128 registers a thread, spills) or 8 (none) ----
    // L = 2, 4 and 8, with and without accumulate, at the CTA counts the one-node sums use
    // (<= 32: the warp-direct range). Each configuration checked bitwise at both widths.
    if (fp32_direct) {
      const std::int64_t w32 = width_arg > 0 ? width_arg : quick ? (1 << 17) : (1 << 19);
      json rows = json::array();
      bool equal = true;
      std::printf("\nfp32 warp-direct, block %d x %lld: GB/s per CTA, median [p10, p90]\n", kRows,
                  static_cast<long long>(w32));
      std::printf(
          "| L | accumulate | CTAs | 16 warps | 8 warps | 8 / 16 |\n|---|---|---|---|---|---|\n");
      for (int ns : {1, 3, 7}) {
        SumBench f32(tide::DType::kFp32, w32, 3, 0, ns);
        for (bool acc : {false, true}) {
          for (int ctas : {1, 4, 8, 16, 32}) {
            json row = {{"L", ns + 1}, {"accumulate", acc}, {"ctas", ctas}};
            double med[2] = {0, 0};
            int k = 0;
            for (int warps : {16, 8}) {
              Level1Tuning tu;
              tu.warp_direct = true;
              tu.direct_warps = warps;
              const Spread t = timed_ms(3, ctas <= 4 ? 15 : 30, [&](int i) {
                launch_level1_sum(f32.args(i % 3, ctas, acc), nullptr, tu);
              });
              const double bytes = f32.logical_bytes(acc);
              const auto rate = [&](double ms) { return bytes / (ms * 1e-3) / 1e9 / ctas; };
              const bool eq = f32.check(ctas, tu);
              equal = equal && eq;
              med[k++] = rate(t.median);
              row[std::to_string(warps) + "_warps"] = {{"gbps_per_cta", rate(t.median)},
                                                       {"gbps_per_cta_p10", rate(t.p90)},
                                                       {"gbps_per_cta_p90", rate(t.p10)},
                                                       {"ms", t.median},
                                                       {"bitwise_equal", eq}};
            }
            std::printf("| %d | %s | %d | %.1f | %.1f | %.3f |\n", ns + 1, acc ? "yes" : "no", ctas,
                        med[0], med[1], med[1] / med[0]);
            rows.push_back(row);
          }
        }
      }
      j["fp32_direct"] = rows;
      j["bitwise_equal"] = equal;
      j["nvidia_smi_after"] = shell(smi_query);
      std::ofstream(json_path) << j.dump(2) << "\n";
      return equal ? 0 : 1;
    }

    // ---- Level 1 sum, L = 8, bf16 -> fp32 ----
    const std::int64_t width = width_arg > 0 ? width_arg : quick ? (1 << 18) : (1 << 20);
    SumBench bf(tide::DType::kBf16, width, 3);
    std::vector<int> cta_counts = {1, 2, 4, 8, 16, 32, sms};
    json sum_per_cta = json::object(), sum_total = json::object(), sum_ms = json::object();
    bool all_equal = true;
    double full_grid_gbps = 0;
    std::printf("\nLevel 1 sum, L=8 bf16 -> fp32, block %d x %lld (%.0f MB logical per call)\n",
                kRows, static_cast<long long>(width), bf.logical_bytes(false) / 1e6);
    for (int ctas : cta_counts) {
      const int reps = ctas <= 2 ? 10 : 30;
      const double ms = median_ms(
          2, reps, [&](int i) { launch_level1_sum(bf.args(i % 3, ctas, false), nullptr); });
      const double gbps = bf.logical_bytes(false) / (ms * 1e-3) / 1e9;
      const bool eq = bf.check(ctas, {});
      all_equal = all_equal && eq;
      sum_per_cta[std::to_string(ctas)] = gbps / ctas;
      sum_total[std::to_string(ctas)] = gbps;
      sum_ms[std::to_string(ctas)] = ms;
      if (ctas == sms) full_grid_gbps = gbps;
      std::printf("  ctas %3d: %8.3f ms  %7.1f GB/s  %6.1f GB/s/CTA  bitwise %s\n", ctas, ms, gbps,
                  gbps / ctas, eq ? "equal" : "DIFFERENT");
    }
    j["sum_gbps_per_cta"] = sum_per_cta;
    j["sum_gbps_total"] = sum_total;
    j["sum_ms"] = sum_ms;
    j["sum_full_grid_gbps"] = full_grid_gbps;
    j["sum_full_grid_ctas"] = sms;
    j["sum_full_grid_fraction_of_ceiling"] = full_grid_gbps / ceiling;
    j["sum_block"] = {
        {"rows", kRows}, {"width", width}, {"L", 8}, {"dtype", "bf16"}, {"runs_per_row", kParams}};

    if (sum_only) {
      json wd = json::object();
      const Level1Tuning tu = recommended_level1_tuning(4);
      std::printf("  warp-direct:");
      for (int ctas : cta_counts) {
        const double ms = median_ms(2, ctas <= 2 ? 5 : 20, [&](int i) {
          launch_level1_sum(bf.args(i % 3, ctas, false), nullptr, tu);
        });
        const double gbps = bf.logical_bytes(false) / (ms * 1e-3) / 1e9;
        const bool eq = bf.check(ctas, tu);
        all_equal = all_equal && eq;
        wd[std::to_string(ctas)] = gbps / ctas;
        std::printf(" %d:%.1f%s", ctas, gbps / ctas, eq ? "" : "(DIFFERENT)");
      }
      std::printf(" GB/s/CTA\n");
      j["sum_warp_direct_gbps_per_cta"] = wd;
      j["bitwise_equal"] = all_equal;
      j["nvidia_smi_after"] = shell(smi_query);
      std::ofstream(json_path) << j.dump(2) << "\n";
      std::printf(
          "\n| sum, block 8 x %lld | pipeline full grid %.0f GB/s = %.1f%% of ceiling %.0f | 4 "
          "CTAs %.1f GB/s/CTA |\n",
          static_cast<long long>(width), full_grid_gbps, 100.0 * full_grid_gbps / ceiling, ceiling,
          sum_per_cta["4"].get<double>());
      return all_equal ? 0 : 1;
    }

    // The warp-direct kernel (recommended_level1_tuning up to 32 CTAs; at L = 8 bf16 its
    // deeper fast path: 8 warps, 4 chunks of 8 x 16-byte loads in flight per thread) across CTA
    // counts, with alpha = 1/8 and alpha = 1 (the no-multiply specialisation), each bitwise
    // checked. The variants measured against it and dropped are in docs/kernels.md.
    struct WdRow {
      const char* name;
      const char* key;
      float alpha;
    };
    const WdRow wd_rows[] = {{"alpha = 1/8", "sum_warp_direct_gbps_per_cta", 0.125f},
                             {"alpha = 1", "sum_warp_direct_alpha1_gbps_per_cta", 1.0f}};
    for (const WdRow& row : wd_rows) {
      json wd = json::object();
      Level1Tuning tu;
      tu.warp_direct = true;
      if (bf.alpha != row.alpha) {
        bf.alpha = row.alpha;
        bf.ref.clear();  // the reference depends on alpha
      }
      std::printf("  warp-direct, %-11s:", row.name);
      for (int ctas : cta_counts) {
        const double ms = median_ms(2, ctas <= 2 ? 10 : 30, [&](int i) {
          launch_level1_sum(bf.args(i % 3, ctas, false), nullptr, tu);
        });
        const double gbps = bf.logical_bytes(false) / (ms * 1e-3) / 1e9;
        const bool eq = bf.check(ctas, tu);
        all_equal = all_equal && eq;
        wd[std::to_string(ctas)] = gbps / ctas;
        std::printf(" %d:%.1f%s", ctas, gbps / ctas, eq ? "" : "(DIFFERENT)");
      }
      std::printf(" GB/s/CTA\n");
      j[row.key] = wd;
    }
    bf.alpha = 0.125f;
    bf.ref.clear();
    // fp32 inputs and accumulate, at 4 CTAs and a full grid.
    {
      SumBench f32(tide::DType::kFp32, width / 2, 3);
      json o = json::object();
      for (int ctas : {4, sms}) {
        const double ms = median_ms(
            2, 20, [&](int i) { launch_level1_sum(f32.args(i % 3, ctas, false), nullptr); });
        const double gbps = f32.logical_bytes(false) / (ms * 1e-3) / 1e9;
        const bool eq = f32.check(ctas, {});
        all_equal = all_equal && eq;
        o[std::to_string(ctas)] = {
            {"gbps", gbps}, {"gbps_per_cta", gbps / ctas}, {"bitwise_equal", eq}};
        std::printf("  fp32 inputs, ctas %3d: %7.1f GB/s  %6.1f GB/s/CTA  bitwise %s\n", ctas, gbps,
                    gbps / ctas, eq ? "equal" : "DIFFERENT");
      }
      j["sum_fp32_inputs"] = o;
      json acc = json::object();
      for (int ctas : {4, sms}) {
        const double ms = median_ms(
            2, 20, [&](int i) { launch_level1_sum(bf.args(i % 3, ctas, true), nullptr); });
        const double gbps = bf.logical_bytes(true) / (ms * 1e-3) / 1e9;
        acc[std::to_string(ctas)] = {{"gbps", gbps}, {"gbps_per_cta", gbps / ctas}};
        std::printf("  bf16 accumulate, ctas %3d: %7.1f GB/s  %6.1f GB/s/CTA\n", ctas, gbps,
                    gbps / ctas);
      }
      j["sum_bf16_accumulate"] = acc;
    }
    j["bitwise_equal"] = all_equal;

    // ---- landing ----
    const std::int64_t ln = quick ? (1 << 21) : (1 << 23);
    json land_per_cta = json::object(), land_all = json::object();
    {
      // Three disjoint sets of 8 partials and an output, rotated: a set is touched again only
      // after two others (>= 2 x 3 x 32 MB) went through the 50 MB L2.
      constexpr int kSets = 3;
      std::vector<std::unique_ptr<Dev>> parts, outs;
      for (int k = 0; k < kSets * kMaxWave; ++k) {
        parts.push_back(std::make_unique<Dev>(static_cast<std::size_t>(ln * 4)));
        fill(parts.back()->p, ln, 4, 3000 + static_cast<std::uint64_t>(k));
      }
      for (int k = 0; k < kSets; ++k)
        outs.push_back(std::make_unique<Dev>(static_cast<std::size_t>(ln * 4)));
      std::printf("\nLanding (pull), n = %lld fp32, wave 0 (W reads + 1 write):\n",
                  static_cast<long long>(ln));
      for (int w = 2; w <= kMaxWave; ++w) {
        json row = json::object();
        std::printf("  W %d:", w);
        for (int ctas : {1, 2, 4, sms}) {
          const double ms = median_ms(2, ctas == 1 ? 5 : 15, [&](int i) {
            LandingArgs a;
            const int set = i % kSets;
            a.out = outs[static_cast<std::size_t>(set)]->as<float>();
            a.n = ln;
            for (int k = 0; k < w; ++k)
              a.partials[k] = parts[static_cast<std::size_t>(set * kMaxWave + k)]->as<float>();
            a.num_partials = w;
            a.ctas = ctas;
            launch_landing(a, nullptr);
          });
          const double gbps = static_cast<double>(ln) * 4.0 * (w + 1) / (ms * 1e-3) / 1e9;
          row[std::to_string(ctas)] = {{"gbps", gbps}, {"gbps_per_cta", gbps / ctas}};
          std::printf("  %d CTA %6.1f GB/s/CTA", ctas, gbps / ctas);
          if (ctas == 1) land_per_cta[std::to_string(w)] = gbps;
        }
        std::printf("\n");
        land_all[std::to_string(w)] = row;
      }
    }
    j["landing_gbps_per_cta"] = land_per_cta;
    j["landing_gbps_per_cta_note"] =
        "1 CTA, wave 0 without accumulate, all W partials in local HBM";
    j["landing_detail"] = land_all;

    // ---- cast ----
    {
      const std::int64_t cn = quick ? (1 << 24) : (1 << 27);
      Dev src(static_cast<std::size_t>(cn * 4)), dst(static_cast<std::size_t>(cn * 2));
      fill(src.p, cn, 4, 77);
      const double ms = median_ms(3, 20, [&](int) {
        launch_cast_fp32_to_bf16(dst.as<std::uint16_t>(), src.as<float>(), cn, nullptr);
      });
      const double gbps = static_cast<double>(cn) * 6.0 / (ms * 1e-3) / 1e9;
      const double ms4 = median_ms(2, 5, [&](int) {
        launch_cast_fp32_to_bf16(dst.as<std::uint16_t>(), src.as<float>(), cn, nullptr, 4);
      });
      const double g4 = static_cast<double>(cn) * 6.0 / (ms4 * 1e-3) / 1e9;
      j["cast_gbps"] = gbps;
      j["cast_fraction_of_ceiling"] = gbps / ceiling;
      j["cast_gbps_per_cta_at_4"] = g4 / 4;
      j["cast_elements"] = cn;
      std::printf(
          "\nCast fp32 -> bf16, n = %lld: full grid %.0f GB/s (%.1f%% of ceiling); 4 CTAs %.1f "
          "GB/s/CTA\n",
          static_cast<long long>(cn), gbps, 100.0 * gbps / ceiling, g4 / 4);
    }
    j["nvidia_smi_after"] = shell(smi_query);

    std::ofstream(json_path) << j.dump(2) << "\n";

    // ---- summary table, last ----
    std::printf("\n| metric | value | target |\n|---|---|---|\n");
    std::printf("| copy ceiling (max of memcpy D2D %.0f, SM copy %.0f) | %.0f GB/s | |\n",
                ceiling_memcpy, ceiling_sm, ceiling);
    for (int ctas : cta_counts) {
      std::printf("| sum L=8 bf16->fp32, %d CTAs | %.1f GB/s/CTA (%.0f GB/s) | %s |\n", ctas,
                  sum_per_cta[std::to_string(ctas)].get<double>(),
                  sum_total[std::to_string(ctas)].get<double>(),
                  ctas == 4 ? ">= 100 GB/s/CTA" : (ctas == sms ? ">= 85% of ceiling" : ""));
    }
    std::printf("| sum full grid / ceiling | %.1f%% | >= 85%% |\n",
                100.0 * full_grid_gbps / ceiling);
    for (int ctas : cta_counts) {
      const std::string k = std::to_string(ctas);
      std::printf("| sum warp-direct, %d CTAs: alpha 1/8 / alpha 1 | %.1f / %.1f GB/s/CTA | %s |\n",
                  ctas, j["sum_warp_direct_gbps_per_cta"][k].get<double>(),
                  j["sum_warp_direct_alpha1_gbps_per_cta"][k].get<double>(),
                  ctas == 4 ? ">= 100 GB/s/CTA" : "");
    }
    for (int w = 2; w <= kMaxWave; ++w) {
      std::printf("| landing W=%d, 1 CTA | %.1f GB/s/CTA | paper 21 in situ (NVLink) |\n", w,
                  land_per_cta[std::to_string(w)].get<double>());
    }
    std::printf("| cast full grid / ceiling | %.1f%% | |\n",
                100.0 * j["cast_fraction_of_ceiling"].get<double>());
    std::printf("| bitwise equal (sum, all configs) | %s | yes |\n", all_equal ? "yes" : "NO");
    return all_equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tide_kernels_bench: %s\n", e.what());
    return 1;
  }
}
