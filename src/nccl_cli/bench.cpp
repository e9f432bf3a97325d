// tide-nccl bench: TIDE-AG and TIDE-RS over the NCCL fabric against stock FSDP2's path on the
// same GPUs and data, in the style of nccl-tests.
//
// Per case (a flat parameter whose shard is 32 or 128 MiB of bf16, or a model preset's layer
// group) and per M x L split of the world:
//   TIDE-AG    the resident bf16 shard in the window -> every parameter at its final address
//              (Eq. 2), copy engines only. Stock: ncclAllGather into a rank-major buffer on a
//              default communicator, then the per-parameter copy-out (split_with_sizes_copy's
//              work, here one cudaMemcpyAsync per parameter and rank).
//   TIDE-RS    per-parameter bf16 gradients -> this rank's fp32 shard (In-Place, alpha = 1/N).
//              Stock: pack into rank-major fp32 chunks (torch._chunk_cat's work, here one
//              kernel per parameter), ncclReduceScatter (fp32, sum), scale by 1/N.
// Inputs are fresh random values made on the GPU. TIDE's outputs are checked against the
// stock path's on every rank (all-gather bit for bit; reduce-scatter within 1e-5 relative).
// Timing: a barrier before every repeat, the slowest rank's time per repeat, the median over
// repeats (p10 and p90 too). TIDE's time is CudaExecutor::run's wall time (first enqueue to
// observed completion, host enqueue included); the stock times are CUDA events on one stream.
// algbw = N S / time (bytes of the unsharded all-gather output, or of the fp32 reduce-scatter
// input, nccl-tests' convention); busbw = algbw (N - 1) / N. The C++ stand-ins for FSDP2's
// copies are not PyTorch's kernels: bench/nccl/fsdp2_nccl_baseline.py measures those.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "baseline.hpp"
#include "commands.hpp"
#include "session.hpp"
#include "tide/core/ag_plan.hpp"
#include "tide/core/error.hpp"
#include "tide/core/models.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_executor.hpp"
#include "tide/fabric/nccl_window_fabric.hpp"
#include "tide/kernels/fill_random.hpp"
#include "tide/program/ag_builder.hpp"
#include "tide/program/rs_builder.hpp"
#include "tide/transport/nccl_transports.hpp"
#include "timing.hpp"

namespace tide::nccl_cli {
namespace {

using program::Buffer;
using program::OpKind;
using program::Space;

void nccl_ok(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) {
    throw std::runtime_error(std::string("tide-nccl bench: ") + call +
                             " failed: " + ncclGetErrorString(r));
  }
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::int64_t bytes) {
    TIDE_CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1))));
  }
  ~DeviceBuffer() { (void)cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// NCCL's all-gather element type for items of `t`. An all-gather moves bytes: 1-byte items (fp8,
// u8: NOTE [1-byte all-gather items]) go as ncclUint8, whichever float8 format they hold.
ncclDataType_t all_gather_type(DType t) {
  switch (t) {
    case DType::kBf16:
      return ncclBfloat16;
    case DType::kFp32:
      return ncclFloat32;
    case DType::kFp8:
    case DType::kU8:
      return ncclUint8;
  }
  throw InternalError("all_gather_type: not a DType");
}

std::vector<std::byte> download(const void* p, std::int64_t bytes) {
  std::vector<std::byte> out(static_cast<std::size_t>(bytes));
  TIDE_CUDA_CHECK(cudaMemcpy(out.data(), p, out.size(), cudaMemcpyDeviceToHost));
  return out;
}

struct BenchCase {
  std::string name;
  std::vector<ParamShape> shapes;
};

std::vector<BenchCase> bench_cases(const BenchArgs& args, int world) {
  std::vector<BenchCase> all;
  for (std::int64_t mib : {32, 128}) {
    // One parameter of N x rows x 4096 bf16: each rank's shard is `mib` MiB.
    const std::int64_t rows = mib * (std::int64_t{1} << 20) / (4096 * 2);
    all.push_back({"flat" + std::to_string(mib) + "m", {{"flat", rows * world, 4096}}});
  }
  for (const char* preset : {"llama3.1-70b", "qwen3-30b-a3b"})
    all.push_back({preset, find_model_group(preset).params});
  if (args.cases.empty()) return all;
  std::vector<BenchCase> picked;
  for (const std::string& name : args.cases) {
    const auto it =
        std::find_if(all.begin(), all.end(), [&](const BenchCase& c) { return c.name == name; });
    if (it == all.end()) {
      throw InvalidArgument("tide-nccl bench: unknown case '" + name +
                            "'; known: flat32m flat128m llama3.1-70b qwen3-30b-a3b");
    }
    picked.push_back(*it);
  }
  return picked;
}

RsOptions rs_options(const BenchArgs& args) {
  RsOptions o;
  o.mode = args.rs_slot_reuse ? RsMode::kSlotReuse : RsMode::kInPlace;
  o.staging_chunk_elems = args.rs_chunk_elems;
  o.one_node = args.one_node;
  o.one_node_pull = false;  // as the runtime runs it
  return o;
}

// One node: the shards arrive per call (as tide.fsdp registers its groups), which the one-node
// all-gather needs (AgPlan::one_node()).
AgOptions ag_options(const BenchArgs& args) {
  AgOptions o;
  o.staged_shards = args.one_node;
  return o;
}

program::RsProgramOptions rs_program_options(const BenchArgs& args) {
  program::RsProgramOptions o;
  o.sum_ctas = args.rs_sum_ctas;
  o.landing_ctas = args.rs_landing_ctas;
  return o;
}

nlohmann::json stats_json(const Stats& s, double bytes) {
  return {{"median_ms", s.median},
          {"p10_ms", s.p10},
          {"p90_ms", s.p90},
          {"algbw_GBps", bytes / (s.median * 1e6)}};
}

// Every window the bench's programs need (the largest, so one fabric serves them all).
std::int64_t window_for(const std::vector<BenchCase>& cases, const BenchArgs& args, int world) {
  std::int64_t need = 0;
  for (const BenchCase& c : cases) {
    for (int l : {1, 2, 4, 8}) {
      if (world % l != 0) continue;
      const GroupLayout layout(Topology(world / l, l), c.shapes, DType::kBf16, DType::kBf16);
      need = std::max(need, fabric::NcclWindowFabric::required_window_bytes(
                                program::build_ag_program(AgPlan(layout, ag_options(args)))));
      need =
          std::max(need, fabric::NcclWindowFabric::required_window_bytes(program::build_rs_program(
                             RsPlan(layout, rs_options(args)), rs_program_options(args))));
    }
  }
  return need;
}

class Bench {
 public:
  Bench(RankSession& session, const BenchArgs& args) : session_(session), args_(args) {
    TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~Bench() { (void)cudaStreamDestroy(stream_); }

  nlohmann::json all_gather(const BenchCase& c, int m, int l);
  nlohmann::json reduce_scatter(const BenchCase& c, int m, int l);

 private:
  RankSession& session_;
  const BenchArgs& args_;
  cudaStream_t stream_ = nullptr;

  // Run time and, in `enqueue`, the slowest rank's median host enqueue time (ms).
  fabric::NcclWindowOptions program_options(int gpus_per_node) {
    fabric::NcclWindowOptions o;
    o.one_host = false;  // ranks the split puts on other nodes are reached by messages
    o.gpus_per_node = gpus_per_node;
    o.messages_between_nodes = args_.common.messages;
    if (args_.common.messages) o.message_comm = session_.message_comm();
    return o;
  }

  exec::CudaExecutorOptions executor_options(fabric::NcclWindowFabric& window) const {
    exec::CudaExecutorOptions o;
    o.copy_streams = args_.common.copy_streams;
    o.messages = [&window] { return transport::nccl_transports(window, 0); };
    return o;
  }

  Stats time_tide(exec::CudaExecutor& ex, double* enqueue) {
    exec::CudaRunOptions run;
    run.timeout_s = args_.common.run_timeout_s;
    std::vector<double> enqueue_ms;
    const Stats s = measure(session_, args_.warmup, args_.repeats, [&] {
      const exec::CudaRunResult r = ex.run(run);
      enqueue_ms.push_back(r.enqueue_us / 1000.0);
      return r.wall_us / 1000.0;
    });
    *enqueue = session_.max_over_ranks(stats_of(enqueue_ms).median, "bench: enqueue time");
    return s;
  }
};

nlohmann::json Bench::all_gather(const BenchCase& c, int m, int l) {
  const int me = session_.rank();
  const int world = m * l;
  const GroupLayout layout(Topology(m, l), c.shapes, DType::kBf16, DType::kBf16);
  const AgPlan plan(layout, ag_options(args_));
  const program::Program program = program::build_ag_program(plan);
  const program::AgArenaLayout arena = program::ag_arena_layout(plan);
  fabric::NcclWindowFabric pf(session_.fabric(), program, program_options(l));
  exec::CudaExecutor ex(program, pf, executor_options(pf));
  auto* window = static_cast<std::byte*>(pf.pointer(Buffer{me, Space::kArena, 0}));
  // The shard: resident in the window, or (staged) per-parameter tensors, which the stock path
  // reads as one contiguous shard (FSDP2's copy-in, made once here, not timed).
  DeviceBuffer staged_shard(plan.options().staged_shards ? layout.shard_bytes() : 0);
  const std::int64_t item = item_bytes(layout.ag_dtype());
  std::byte* shard = window + arena.resident;
  if (plan.options().staged_shards) {
    shard = staged_shard.as<std::byte>();
    for (int p = 0; p < layout.param_count(); ++p) {
      const ParamLayout& pl = layout.param(p);
      void* tensor = pf.pointer(Buffer{me, Space::kTensor, p});
      kernels::launch_fill_random(tensor, pl.shard_elems(), static_cast<int>(item),
                                  args_.seed * 7919 + static_cast<std::uint64_t>(me * 1000 + p),
                                  stream_);
      TIDE_CUDA_CHECK(cudaMemcpyAsync(shard + pl.offset, tensor,
                                      static_cast<std::size_t>(pl.shard_bytes),
                                      cudaMemcpyDeviceToDevice, stream_));
    }
  } else {
    kernels::launch_fill_random(shard, layout.shard_elems(), static_cast<int>(item),
                                args_.seed * 7919 + me, stream_);
  }
  TIDE_CUDA_CHECK(cudaMemsetAsync(window + arena.landing, 0xFF,
                                  static_cast<std::size_t>(layout.unsharded_bytes()), stream_));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  session_.barrier("bench: every executor built");
  double enqueue_ms = 0;
  const Stats tide = time_tide(ex, &enqueue_ms);

  // Stock: all-gather into rank-major, then the copy-out per parameter and rank.
  const std::int64_t s_bytes = layout.shard_bytes();
  DeviceBuffer gathered(layout.unsharded_bytes()), unsharded(layout.unsharded_bytes());
  ncclComm_t comm = session_.stock_comm();
  auto gather = [&] {
    nccl_ok(ncclAllGather(shard, gathered.p, static_cast<std::size_t>(s_bytes / item),
                          all_gather_type(layout.ag_dtype()), comm, stream_),
            "ncclAllGather");
  };
  auto copy_out = [&] {
    for (int p = 0; p < layout.param_count(); ++p) {
      const ParamLayout& pl = layout.param(p);
      for (int u = 0; u < world; ++u) {
        const std::int64_t bytes = layout.valid_rows(p, u) * pl.cols * 2;
        if (bytes == 0) continue;
        TIDE_CUDA_CHECK(cudaMemcpyAsync(unsharded.as<std::byte>() + layout.landing_offset(p, u),
                                        gathered.as<std::byte>() + u * s_bytes + pl.offset,
                                        static_cast<std::size_t>(bytes), cudaMemcpyDeviceToDevice,
                                        stream_));
      }
    }
  };
  const Stats nccl =
      measure(session_, args_.warmup, args_.repeats, [&] { return event_ms(stream_, gather); });
  const Stats copy =
      measure(session_, args_.warmup, args_.repeats, [&] { return event_ms(stream_, copy_out); });
  const Stats both = measure(session_, args_.warmup, args_.repeats, [&] {
    return event_ms(stream_, [&] {
      gather();
      copy_out();
    });
  });
  // TIDE's landing == the stock path's parameter-major result, valid rows bit for bit.
  const auto mine = download(window + arena.landing, layout.unsharded_bytes());
  const auto theirs = download(unsharded.p, layout.unsharded_bytes());
  std::string check = "bitwise";
  for (int p = 0; p < layout.param_count() && check == "bitwise"; ++p) {
    for (int u = 0; u < world; ++u) {
      const auto at = static_cast<std::size_t>(layout.landing_offset(p, u));
      const auto n = static_cast<std::size_t>(layout.valid_rows(p, u) * layout.param(p).cols * 2);
      if (std::memcmp(mine.data() + at, theirs.data() + at, n) != 0) {
        check = "DIFFERS (parameter " + std::to_string(p) + ", rank " + std::to_string(u) + ")";
        break;
      }
    }
  }
  const auto checks = session_.gather_text(check, "bench: all-gather check");
  bool ok = true;
  for (const std::string& v : checks)
    ok = ok && v == "bitwise";
  const double bytes = static_cast<double>(layout.unsharded_bytes());
  return {{"collective", "all-gather"},
          {"shard_bytes", s_bytes},
          {"params", layout.param_count()},
          {"tide", stats_json(tide, bytes)},
          {"nccl", stats_json(nccl, bytes)},
          {"copy_out", stats_json(copy, bytes)},
          {"nccl_plus_copy", stats_json(both, bytes)},
          {"tide_window_bytes", program.buffers[static_cast<std::size_t>(me)].arena_bytes},
          {"tide_enqueue_ms", enqueue_ms},
          {"stock_buffer_bytes", layout.unsharded_bytes()},
          {"check", ok ? "bitwise equal to NCCL + copy-out on every rank" : "FAILED"},
          {"checks", checks}};
}

nlohmann::json Bench::reduce_scatter(const BenchCase& c, int m, int l) {
  const int me = session_.rank();
  const int world = m * l;
  const GroupLayout layout(Topology(m, l), c.shapes, DType::kBf16, DType::kBf16);
  const RsPlan plan(layout, rs_options(args_));
  program::RsProgramOptions po = rs_program_options(args_);
  po.alpha = 1.0f / static_cast<float>(world);
  const program::Program program = program::build_rs_program(plan, po);
  fabric::NcclWindowFabric pf(session_.fabric(), program, program_options(l));
  exec::CudaExecutor ex(program, pf, executor_options(pf));
  for (int p = 0; p < layout.param_count(); ++p) {
    const ParamLayout& pl = layout.param(p);
    kernels::launch_fill_random(pf.pointer(Buffer{me, Space::kTensor, p}), pl.rows * pl.cols, 2,
                                args_.seed * 104729 + static_cast<std::uint64_t>(me * 1000 + p),
                                stream_);
  }
  auto* out = static_cast<float*>(pf.pointer(Buffer{me, Space::kOutput, 0}));
  TIDE_CUDA_CHECK(
      cudaMemsetAsync(out, 0xFF, static_cast<std::size_t>(layout.fp32_shard_bytes()), stream_));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  session_.barrier("bench: every executor built");
  double enqueue_ms = 0;
  const Stats tide = time_tide(ex, &enqueue_ms);
  // SM time of one profiled run: CTAs x kernel time over the sum and landing kernels.
  exec::CudaRunOptions profiled;
  profiled.profile = true;
  profiled.timeout_s = args_.common.run_timeout_s;
  session_.barrier("bench: before the profiled run");
  const exec::CudaRunResult pr = ex.run(profiled);
  session_.barrier("bench: after the profiled run");
  double cta_ms = 0, kernel_ms = 0, sum_ms = 0, land_ms = 0;
  for (const exec::CudaKernelTiming& k : pr.kernels_timed) {
    cta_ms += k.ctas * k.ms;
    kernel_ms += k.ms;
    (k.kind == OpKind::kSum ? sum_ms : land_ms) += k.ms;
  }
  std::int64_t sums = 0, lands = 0;
  for (const program::Op& op : program.ops) {
    if (op.rank != me) continue;
    sums += op.is<program::SumOp>();
    lands += op.is<program::LandOp>();
  }

  // Stock: pack into rank-major fp32 chunks, reduce-scatter (sum), scale by 1/N.
  const std::int64_t shard = layout.shard_elems();
  DeviceBuffer packed(layout.pack_buffer_bytes()), reduced(layout.fp32_shard_bytes());
  ncclComm_t comm = session_.stock_comm();
  auto pack = [&] {
    for (int p = 0; p < layout.param_count(); ++p) {
      const ParamLayout& pl = layout.param(p);
      launch_pack_fp32({pf.pointer(Buffer{me, Space::kTensor, p}), pl.rows, pl.cols,
                        pl.rows_per_rank, pl.out_offset},
                       DType::kBf16, world, packed.as<float>(), shard, stream_);
    }
  };
  auto scatter = [&] {
    nccl_ok(ncclReduceScatter(packed.p, reduced.p, static_cast<std::size_t>(shard), ncclFloat32,
                              ncclSum, comm, stream_),
            "ncclReduceScatter");
    launch_scale(reduced.as<float>(), shard, 1.0f / static_cast<float>(world), stream_);
  };
  const Stats pack_t =
      measure(session_, args_.warmup, args_.repeats, [&] { return event_ms(stream_, pack); });
  const Stats nccl =
      measure(session_, args_.warmup, args_.repeats, [&] { return event_ms(stream_, scatter); });
  const Stats both = measure(session_, args_.warmup, args_.repeats, [&] {
    return event_ms(stream_, [&] {
      pack();
      scatter();
    });
  });
  // TIDE's shard against the stock path's (different summation order: 1e-5 relative).
  std::vector<float> mine(static_cast<std::size_t>(shard)), theirs(mine.size());
  TIDE_CUDA_CHECK(cudaMemcpy(mine.data(), out, mine.size() * 4, cudaMemcpyDeviceToHost));
  TIDE_CUDA_CHECK(cudaMemcpy(theirs.data(), reduced.p, theirs.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0, scale = 1;
  bool identical = true;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    worst =
        std::max(worst, std::fabs(static_cast<double>(mine[i]) - static_cast<double>(theirs[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(theirs[i])));
    identical = identical && std::memcmp(&mine[i], &theirs[i], 4) == 0;
  }
  const bool close = worst <= 1e-5 * scale && !std::isnan(worst);
  const std::string verdict = !close      ? "DIFFERS: max abs error " + std::to_string(worst)
                              : identical ? "bitwise"
                                          : "within 1e-5";
  const auto checks = session_.gather_text(verdict, "bench: reduce-scatter check");
  bool ok = true;
  for (const std::string& v : checks)
    ok = ok && !v.starts_with("DIFFERS");
  const double bytes = static_cast<double>(layout.pack_buffer_bytes());
  return {{"collective", "reduce-scatter"},
          {"shard_bytes_fp32", layout.fp32_shard_bytes()},
          {"params", layout.param_count()},
          {"tide", stats_json(tide, bytes)},
          {"nccl", stats_json(nccl, bytes)},
          {"pack", stats_json(pack_t, bytes)},
          {"pack_plus_nccl", stats_json(both, bytes)},
          {"tide_sm_cta_ms", cta_ms},
          {"tide_kernel_ms", kernel_ms},
          {"tide_sum_kernels", sums},
          {"tide_sum_ms", sum_ms},
          {"tide_landing_kernels", lands},
          {"tide_landing_ms", land_ms},
          {"tide_enqueue_ms", enqueue_ms},
          {"rs_sum_ctas", args_.rs_sum_ctas},
          {"rs_landing_ctas", args_.rs_landing_ctas},
          {"rs_chunk_elems", args_.rs_chunk_elems},
          {"rs_mode", args_.rs_slot_reuse ? "slot-reuse" : "in-place"},
          {"one_node", plan.one_node()},
          {"tide_window_bytes", program.buffers[static_cast<std::size_t>(me)].arena_bytes},
          {"stock_buffer_bytes", layout.pack_buffer_bytes()},
          {"check", ok ? "equal to pack + NCCL reduce-scatter on every rank (" + verdict + " here)"
                       : "FAILED"},
          {"checks", checks}};
}

void print_row(const std::string& name, int m, int l, const nlohmann::json& r) {
  const bool ag = r["collective"] == "all-gather";
  const char* stock_key = ag ? "nccl_plus_copy" : "pack_plus_nccl";
  const char* copy_key = ag ? "copy_out" : "pack";
  const double t = r["tide"]["median_ms"], s = r[stock_key]["median_ms"];
  std::printf(
      "%-15s %dx%d %-3s %9.3f %9.3f %9.3f %9.3f %7.2fx %9.1f %9.1f %8.3f  %s\n", name.c_str(), m, l,
      ag ? "AG" : "RS", t, static_cast<double>(r["nccl"]["median_ms"]),
      static_cast<double>(r[copy_key]["median_ms"]), s, s / t,
      static_cast<double>(r["tide"]["algbw_GBps"]), static_cast<double>(r[stock_key]["algbw_GBps"]),
      static_cast<double>(r["tide_enqueue_ms"]), std::string(r["check"]).substr(0, 24).c_str());
  if (!ag) {
    std::printf(
        "%22s sum %lld kernels %.3f ms, landing %lld kernels %.3f ms, SM %.1f CTA-ms\n", "",
        static_cast<long long>(r["tide_sum_kernels"]), static_cast<double>(r["tide_sum_ms"]),
        static_cast<long long>(r["tide_landing_kernels"]),
        static_cast<double>(r["tide_landing_ms"]), static_cast<double>(r["tide_sm_cta_ms"]));
  }
}

}  // namespace

int run_bench(const fabric::LaunchedRank& me, const BenchArgs& args) {
  const std::vector<BenchCase> cases = bench_cases(args, me.world);
  RankSession session(
      me, window_for(cases, args, me.world),
      std::chrono::milliseconds(static_cast<std::int64_t>(args.common.fabric_timeout_s * 1000)));
  const bool lead = session.rank() == 0;
  Bench bench(session, args);
  if (lead) {
    std::printf("tide-nccl bench: %d ranks, median of %d repeats (slowest rank), ms\n",
                session.world(), args.repeats);
    std::printf(
        "TIDE-RS: %s, sum %d CTAs, landing %d CTAs, staging chunk %lld; %d copy "
        "stream(s) per op%s\n",
        args.rs_slot_reuse ? "slot-reuse" : "in-place", args.rs_sum_ctas, args.rs_landing_ctas,
        static_cast<long long>(args.rs_chunk_elems), args.common.copy_streams,
        args.common.messages ? "; transfers between nodes as messages" : "");
    std::printf("%-15s %-3s %-3s %9s %9s %9s %9s %8s %9s %9s %8s  %s\n", "case", "MxL", "op",
                "TIDE", "NCCL", "copies", "stock", "speedup", "TIDE GB/s", "stock GB/s", "enqueue",
                "check");
  }
  nlohmann::json rows = nlohmann::json::array();
  int failed = 0;
  for (const BenchCase& c : cases) {
    for (int l : {1, 2, 4, 8}) {
      if (session.world() % l != 0) continue;
      if (args.one_node && l != session.world()) continue;  // 1 x world only
      const int m = session.world() / l;
      for (const bool ag : {true, false}) {
        if (ag ? !args.all_gather : !args.reduce_scatter) continue;
        nlohmann::json r = ag ? bench.all_gather(c, m, l) : bench.reduce_scatter(c, m, l);
        r["case"] = c.name;
        r["nodes"] = m;
        r["gpus_per_node"] = l;
        if (std::string(r["check"]).starts_with("FAILED")) ++failed;
        if (lead) {
          print_row(c.name, m, l, r);
          std::fflush(stdout);
        }
        rows.push_back(r);
      }
    }
  }
  if (lead && !args.common.out.empty()) {
    std::ofstream(args.common.out) << nlohmann::json{{"world", session.world()},
                                                     {"messages", args.common.messages},
                                                     {"copy_streams", args.common.copy_streams},
                                                     {"repeats", args.repeats},
                                                     {"warmup", args.warmup},
                                                     {"rows", rows}}
                                          .dump(2)
                                   << "\n";
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace tide::nccl_cli
