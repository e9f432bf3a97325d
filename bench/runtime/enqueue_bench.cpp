// tide_runtime_enqueue_bench: host cost of enqueueing one call of a group's sequence with the
// CUDA sequence runner (NOTE [CUDA call sequences]) on the virtual fabric, every rank of an
// M x L topology on one GPU. --ranks one (the default): the runner of rank 0 alone, as in a
// real job's process (the other ranks are reachable peers that do not run; rank 0's signal
// words start at the release value so its waits are met and the GPU drains each call), time
// per call = per rank. --ranks all: one host thread enqueues all N ranks and the time per
// rank is the call's time / N (beyond 64 streams on the GPU the runner keeps to the stream
// path: its graph waits are kernels, NOTE [CUDA call sequences] 3). Per collective (TIDE-AG
// with the fp32 -> bf16 cast, TIDE-RS In-Place):
//   - fresh: every call binds pointers (inputs and outputs) the previous call of its event
//     slot did not, so after two visits of each slot a call is a graph launch with the nodes
//     that carry pointers re-pointed (the runner's default);
//   - replay: the same bindings every call: a graph launch, nothing patched;
//   - stream: fresh pointers with graphs off, every op enqueued on its stream (the path of
//     the first calls, and of calls a node update cannot express).
// Each repeat times enqueue() alone (host clock); the GPU then finishes the call before the
// next repeat (not timed), so the host never blocks on full queues. Medians, p10 and p90 of
// ms per rank, and what a call enqueues (ops after fusion, waits and counter additions, nodes
// re-pointed per graph launch). `gpu_ms`: the caller stream's time from just before the
// call to its end (CUDA events); with --ranks all in replay mode that is the call's GPU
// time on the virtual fabric (every rank on one GPU, so not an NVLink time); elsewhere the
// host's enqueue can bound it.
// TIDE-RS uses the library's sub-slice geometry unless --sub-slices names one (NOTE
// [sub-slice geometry]).
// Gradients and masters are read-only inputs: all ranks bind one shared allocation, offset
// per call so the pointers still change. Parameter rows can be divided (--rows-div) where
// the full model does not fit one GPU's memory as N virtual ranks; the JSON says which.
//
// Shapes: a model's layer group (--model), or --synthetic P: P parameters of about --elems
// elements each, shaped as tide_executor_bench shapes them (norm-like columns of one, matrices
// of 128..512 columns, odd rows), so the two benchmarks' "P = 30" numbers compare.
//
// Usage: tide_runtime_enqueue_bench --out FILE.json [--model NAME | --synthetic P [--elems E]]
//                                   [--nodes M] [--gpus L] [--repeats N] [--rows-div D]
//                                   [--ranks one|all] [--sub-slices across-ranks|per-rank]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../common/percentile.hpp"
#include "tide/core/ag_plan.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/models.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/fabric/virtual_fabric.hpp"
#include "tide/program/call_sequence.hpp"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

using tide::bench::percentile;

// Waits for the call on `caller` to finish, for at most 30 s; a call still running then is
// reported with the waits it is held at (NOTE [CUDA call sequences] 5) and the run ends.
void finish_or_report(const tide::exec::CudaSequenceRunner& runner, cudaStream_t caller, int call) {
  const auto until = Clock::now() + std::chrono::seconds(30);
  cudaError_t q = cudaStreamQuery(caller);
  while (q == cudaErrorNotReady && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    q = cudaStreamQuery(caller);
  }
  if (q == cudaSuccess) return;
  if (q != cudaErrorNotReady) TIDE_CUDA_CHECK(q);
  std::fprintf(stderr, "call %d did not finish within 30 s\n", call);
  if (const auto stall = runner.stalled(std::chrono::milliseconds(0))) {
    std::fprintf(stderr, "stalled call %lld after %.1f s, %zu unsatisfied waits:\n",
                 static_cast<long long>(stall->call), stall->seconds, stall->waits.size());
    for (std::size_t i = 0; i < stall->waits.size() && i < 40; ++i)
      std::fprintf(stderr, "  %s\n", stall->waits[i].c_str());
  }
  std::fflush(stderr);
  std::_Exit(3);
}

json stats(const std::vector<double>& ms_per_rank) {
  return {{"median", percentile(ms_per_rank, 0.5)},
          {"p10", percentile(ms_per_rank, 0.1)},
          {"p90", percentile(ms_per_rank, 0.9)},
          {"repeats", ms_per_rank.size()}};
}

struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(std::size_t n) { TIDE_CUDA_CHECK(cudaMalloc(&p, n)); }
  ~DeviceBytes() { (void)cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  std::byte* at(std::size_t offset) const { return static_cast<std::byte*>(p) + offset; }
};

// P parameters like tide_executor_bench's: every third one norm-like (one column, rows
// elems / 64), the others matrices of 128 x (1 + i mod 4) columns; rows odd.
std::vector<tide::ParamShape> synthetic_shapes(int p, std::int64_t elems) {
  std::vector<tide::ParamShape> v;
  for (int i = 0; i < p; ++i) {
    const bool norm = i % 3 == 0;
    const std::int64_t cols = norm ? 1 : 128 * (1 + i % 4);
    const std::int64_t rows = std::max<std::int64_t>(1, elems / cols / (norm ? 64 : 1)) | 1;
    v.push_back({"p" + std::to_string(i), rows, cols});
  }
  return v;
}

std::unique_ptr<tide::fabric::VirtualFabric> fabric_for(const tide::program::CallSequence& seq) {
  std::vector<tide::program::BufferSizes> sizes;
  for (const tide::program::BufferSizes& b : seq.templates[0].program.buffers) {
    tide::program::BufferSizes s;
    s.arena_bytes = b.arena_bytes;
    sizes.push_back(s);
  }
  tide::fabric::VirtualFabricOptions o;
  o.signal_words = seq.counters;
  return std::make_unique<tide::fabric::VirtualFabric>(sizes, o);
}

// The virtual fabric seen by ONE rank's process: `rank` is local, every other rank a peer
// whose memory is reachable (as NVLink peers' through NCCL's window). A runner over it
// enqueues exactly what a real rank's runner enqueues.
class OneRankView final : public tide::fabric::Fabric {
 public:
  OneRankView(tide::fabric::Fabric& all, int rank) : all_(all), rank_(rank) {}
  int ranks() const override { return all_.ranks(); }
  bool local(int rank) const override { return rank == rank_; }
  int device() const override { return all_.device_of(rank_); }
  int device_of(int rank) const override { return all_.device_of(rank); }
  void* pointer(const tide::program::Buffer& b) const override { return all_.pointer(b); }
  std::int64_t bytes(const tide::program::Buffer& b) const override { return all_.bytes(b); }
  std::uint64_t* signals(int owner) const override { return all_.signals(owner); }
  std::int64_t signal_words() const override { return all_.signal_words(); }
  bool load_store(int from, int to) const override { return all_.load_store(from, to); }
  void release() noexcept override {}

 private:
  tide::fabric::Fabric& all_;
  int rank_;
};

enum class Mode { kFresh, kReplay, kStream };

// Times `repeats` calls of `seq` after the warm-up (two visits of every event slot and two
// more calls). kFresh and kStream: each visit of an event slot shifts the input pointers by
// 256 bytes and switches between two output buffers per rank, relative to the slot's last
// visit; kReplay: the same bindings every call.
json time_calls(const tide::program::CallSequence& seq, std::int64_t input_bytes,
                std::int64_t output_bytes, const std::vector<std::int64_t>& tensor_bytes, Mode mode,
                int repeats, bool one_rank) {
  const int n = seq.templates[0].program.ranks;
  const auto fab = fabric_for(seq);
  OneRankView view(*fab, 0);
  tide::exec::CudaSequenceOptions options;
  options.replay_graphs = mode != Mode::kStream;
  tide::exec::CudaSequenceRunner runner(
      seq, one_rank ? static_cast<tide::fabric::Fabric&>(view) : *fab, {0, 0}, options);
  if (one_rank) {
    // Rank 0's peers do not run: its signal words start at the release value, so that every
    // wait of its calls is met and the GPU drains each call (its data are garbage; only the
    // host's enqueue is measured).
    const std::vector<std::uint64_t> met(static_cast<std::size_t>(seq.counters),
                                         std::uint64_t{1} << 62);
    TIDE_CUDA_CHECK(
        cudaMemcpy(fab->signals(0), met.data(), met.size() * 8, cudaMemcpyHostToDevice));
  }
  const int per = one_rank ? 1 : n;  // ranks whose ops one enqueue carries
  const int q = runner.event_slots();
  const int warmup = 2 * q + 2;
  const bool fresh = mode != Mode::kReplay;
  DeviceBytes inputs(static_cast<std::size_t>(input_bytes) + 512);
  TIDE_CUDA_CHECK(cudaMemset(inputs.p, 0, static_cast<std::size_t>(input_bytes) + 512));
  std::vector<std::unique_ptr<DeviceBytes>> outputs;  // [set * n + rank]
  for (int set = 0; set < (fresh ? 2 : 1); ++set)
    for (int r = 0; r < n && output_bytes > 0; ++r)
      outputs.push_back(std::make_unique<DeviceBytes>(static_cast<std::size_t>(output_bytes)));
  auto bindings_for = [&](int call) {
    std::vector<tide::exec::CudaCallBindings> b(static_cast<std::size_t>(n));
    const int visit = fresh ? (call / q) % 2 : 0;
    for (int r = 0; r < n; ++r) {
      std::size_t at = static_cast<std::size_t>(visit) * 256;
      for (const std::int64_t bytes : tensor_bytes) {
        b[static_cast<std::size_t>(r)].tensors.push_back(inputs.at(at));
        at += static_cast<std::size_t>(bytes);
      }
      if (!outputs.empty())
        b[static_cast<std::size_t>(r)].output = outputs[static_cast<std::size_t>(visit * n + r)]->p;
    }
    return b;
  };
  cudaStream_t caller = nullptr;
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking));
  cudaEvent_t before = nullptr, after = nullptr;
  TIDE_CUDA_CHECK(cudaEventCreate(&before));
  TIDE_CUDA_CHECK(cudaEventCreate(&after));
  std::vector<double> ms, gpu_ms;
  std::int64_t launches0 = 0, repointed0 = 0, nodes0 = 0;
  for (int call = 0; call < warmup + repeats; ++call) {
    if (call == warmup) {
      launches0 = runner.graph_launches();
      repointed0 = runner.repointed_launches();
      nodes0 = runner.nodes_repointed();
    }
    const auto b = bindings_for(call);
    TIDE_CUDA_CHECK(cudaEventRecord(before, caller));
    const auto t0 = Clock::now();
    runner.enqueue(b, 1.0f, false, caller);
    const auto t1 = Clock::now();
    TIDE_CUDA_CHECK(cudaEventRecord(after, caller));
    finish_or_report(runner, caller, call);
    float elapsed = 0;
    TIDE_CUDA_CHECK(cudaEventElapsedTime(&elapsed, before, after));
    if (std::getenv("TIDE_BENCH_TRACE") != nullptr)
      std::fprintf(stderr, "call %d: enqueue %.3f ms, done after %.3f ms\n", call,
                   std::chrono::duration<double, std::milli>(t1 - t0).count(),
                   std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (call >= warmup) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / per);
      gpu_ms.push_back(static_cast<double>(elapsed));
    }
  }
  TIDE_CUDA_CHECK(cudaEventDestroy(before));
  TIDE_CUDA_CHECK(cudaEventDestroy(after));
  TIDE_CUDA_CHECK(cudaStreamDestroy(caller));
  json j = stats(ms);
  j["gpu_ms"] = stats(gpu_ms);
  const auto timed = static_cast<double>(repeats);
  const std::int64_t launches = runner.graph_launches() - launches0;
  j["graph_launches"] = launches;
  j["repointed_launches"] = runner.repointed_launches() - repointed0;
  j["repoint_failure"] = runner.repoint_failure();
  j["graphs_unavailable"] = runner.graphs_unavailable();
  j["ranks_enqueued"] = per;
  j["nodes_repointed_per_call"] = static_cast<double>(runner.nodes_repointed() - nodes0) / timed;
  j["event_slots"] = q;
  j["period"] = seq.period;
  std::size_t ops = 0;
  for (const auto& t : seq.templates)
    ops += t.program.ops.size();
  j["program_ops_per_call"] = static_cast<double>(ops) / static_cast<double>(seq.templates.size());
  const tide::exec::CudaSequenceCounts c = runner.counts();
  j["enqueued_per_call"] = {{"ops", c.ops},
                            {"copy_descriptors", c.copies},
                            {"wait_ops", c.wait_ops},
                            {"waits", c.wait_terms},
                            {"counter_add_ops", c.signal_ops},
                            {"counter_adds", c.signal_terms},
                            {"kernels", c.kernels},
                            {"events", c.events}};
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, model = "llama3.1-70b";
  int nodes = 8, gpus = 8, repeats = 30;
  std::int64_t rows_div = 1, elems = 65536;
  bool one_rank = true;
  int synthetic = 0;
  tide::RsOptions rs_options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--out")
      out = next();
    else if (a == "--model")
      model = next();
    else if (a == "--nodes")
      nodes = std::stoi(next());
    else if (a == "--gpus")
      gpus = std::stoi(next());
    else if (a == "--repeats")
      repeats = std::stoi(next());
    else if (a == "--rows-div")
      rows_div = std::stoll(next());
    else if (a == "--synthetic")
      synthetic = std::stoi(next());
    else if (a == "--elems")
      elems = std::stoll(next());
    else if (a == "--ranks") {
      const std::string v = next();
      if (v != "one" && v != "all") {
        std::fprintf(stderr, "--ranks takes one or all (got %s)\n", v.c_str());
        return 2;
      }
      one_rank = v == "one";
    } else if (a == "--sub-slices") {
      try {
        rs_options.sub_slices = tide::parse_sub_slices(next());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    std::vector<tide::ParamShape> shapes =
        synthetic > 0 ? synthetic_shapes(synthetic, elems) : tide::find_model_group(model).params;
    for (tide::ParamShape& s : shapes)
      s.rows = std::max<std::int64_t>(1, s.rows / rows_div);
    const tide::GroupLayout layout(tide::Topology(nodes, gpus), shapes, tide::DType::kBf16,
                                   tide::DType::kBf16);
    const int n = layout.topology().world();
    json j = {{"model", synthetic > 0 ? "synthetic" : model},
              {"group", synthetic > 0 ? "P parameters of about " + std::to_string(elems) +
                                            " elements (as tide_executor_bench)"
                                      : std::string("layer")},
              {"params", layout.param_count()},
              {"topology", std::to_string(nodes) + "x" + std::to_string(gpus)},
              {"rows_divided_by", rows_div},
              {"ranks_enqueued", one_rank ? "one (rank 0, its waits pre-released)" : "all"},
              {"repeats", repeats}};

    tide::AgOptions ag_options;
    ag_options.mixed_precision_cast = true;
    const tide::AgPlan ag(layout, ag_options);
    const tide::program::CallSequence ag_seq =
        tide::program::ag_call_sequence(ag, tide::program::ag_sequence_areas(ag));
    std::vector<std::int64_t> masters;
    std::int64_t master_bytes = 0;
    for (const tide::ParamLayout& p : layout.params()) {
      masters.push_back(p.shard_elems() * 4);
      master_bytes += p.shard_elems() * 4;
    }
    const tide::RsPlan rs(layout, rs_options);
    j["rs_sub_slices"] = std::string(tide::sub_slices_name(rs_options.sub_slices));
    const tide::program::CallSequence rs_seq = tide::program::rs_call_sequence(
        rs, {}, tide::program::rs_arena_layout(rs, tide::program::LandingStyle::kPull));
    std::vector<std::int64_t> grads;
    std::int64_t grad_bytes = 0;
    for (const tide::ParamLayout& p : layout.params()) {
      grads.push_back(p.rows * p.cols * 2);
      grad_bytes += p.rows * p.cols * 2;
    }
    for (const auto& [key, mode] :
         {std::pair{"fresh", Mode::kFresh}, std::pair{"replay", Mode::kReplay},
          std::pair{"stream", Mode::kStream}}) {
      const std::string ag_key = std::string("ag_") + key;
      j[ag_key] = time_calls(ag_seq, master_bytes, 0, masters, mode, repeats, one_rank);
      std::printf("AG %s: %s\n", key, j[ag_key].dump().c_str());
      std::fflush(stdout);
    }
    for (const auto& [key, mode] :
         {std::pair{"fresh", Mode::kFresh}, std::pair{"replay", Mode::kReplay},
          std::pair{"stream", Mode::kStream}}) {
      const std::string rs_key = std::string("rs_") + key;
      j[rs_key] =
          time_calls(rs_seq, grad_bytes, layout.fp32_shard_bytes(), grads, mode, repeats, one_rank);
      std::printf("RS %s: %s\n", key, j[rs_key].dump().c_str());
      std::fflush(stdout);
    }
    (void)n;
    if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tide_runtime_enqueue_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
