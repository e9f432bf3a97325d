// tide-nccl probe: the NCCL fabric's peer pointers work, and what a copy engine moves to and
// from a peer's window (the ceiling TIDE's rail and node transfers are compared to).
//
// Steps: (1) every rank reports its LSA team and which ranks it can address; (2) every rank
// fills the first MiB of its window with its own byte, then reads every peer's MiB through
// the peer pointer, and writes its byte into MiB 1 + r of every peer's window (checked by the
// owner after a barrier); (3) timed copy-engine copies of --bytes: push to the next rank,
// pull from it, and a local device-to-device copy, all ranks at once; CUDA events, median
// over repeats, the slowest rank's time.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "session.hpp"
#include "tide/cuda/check.hpp"
#include "timing.hpp"

namespace tide::nccl_cli {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

unsigned char byte_of(int rank) {
  return static_cast<unsigned char>(17 * (rank + 1) + 3);
}

}  // namespace

int run_probe(const fabric::LaunchedRank& me, const ProbeArgs& args) {
  const std::int64_t bytes = args.bytes;
  RankSession session(
      me, 2 * bytes + 64 * kMiB,
      std::chrono::milliseconds(static_cast<std::int64_t>(args.common.fabric_timeout_s * 1000)));
  fabric::NcclFabric& f = session.fabric();
  const int rank = session.rank(), world = session.world();
  const bool lead = rank == 0;
  auto* window = static_cast<unsigned char*>(f.arena());
  int reachable = 0;
  for (int p = 0; p < world; ++p)
    reachable += f.peer_arena(p) != nullptr;
  const fabric::NcclFabricView view = f.view();
  std::string problems;
  const auto lines = session.gather_text(
      "lsa_rank " + std::to_string(view.lsa_rank) + " of " + std::to_string(view.lsa_size) +
          ", rail lsa " + std::to_string(view.rail_lsa_size) + ", reaches " +
          std::to_string(reachable) + " of " + std::to_string(world) + " windows",
      "probe: teams");
  if (lead) {
    int nccl = 0;
    (void)ncclGetVersion(&nccl);
    std::printf("tide-nccl probe: %d ranks (%s launcher), NCCL %d\n", world, me.launcher.c_str(),
                nccl);
    for (int r = 0; r < world; ++r)
      std::printf("  rank %d: %s\n", r, lines[static_cast<std::size_t>(r)].c_str());
  }
  if (reachable != world) problems += "not every window is reachable; ";

  // (2) Reads and writes through the peer pointers.
  cudaStream_t s = nullptr;
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TIDE_CUDA_CHECK(cudaMemset(window, byte_of(rank), kMiB));
  session.barrier("probe: windows filled");
  std::vector<unsigned char> host(static_cast<std::size_t>(kMiB));
  for (int p = 0; p < world && reachable == world; ++p) {
    TIDE_CUDA_CHECK(cudaMemcpy(host.data(), f.peer_arena(p), host.size(), cudaMemcpyDefault));
    if (std::any_of(host.begin(), host.end(), [&](unsigned char b) { return b != byte_of(p); }))
      problems += "read of rank " + std::to_string(p) + "'s window wrong; ";
    TIDE_CUDA_CHECK(cudaMemsetAsync(
        static_cast<unsigned char*>(f.peer_arena(p)) + (1 + rank) * kMiB, byte_of(rank), kMiB, s));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  session.barrier("probe: peers wrote");
  for (int p = 0; p < world && reachable == world; ++p) {
    TIDE_CUDA_CHECK(
        cudaMemcpy(host.data(), window + (1 + p) * kMiB, host.size(), cudaMemcpyDeviceToHost));
    if (std::any_of(host.begin(), host.end(), [&](unsigned char b) { return b != byte_of(p); }))
      problems += "rank " + std::to_string(p) + "'s write into this window wrong; ";
  }

  // (3) Copy-engine bandwidth: push into and pull from the next rank's window, and local.
  void* local = nullptr;
  TIDE_CUDA_CHECK(cudaMalloc(&local, static_cast<std::size_t>(bytes)));
  TIDE_CUDA_CHECK(cudaMemset(local, 0x5A, static_cast<std::size_t>(bytes)));
  const int next = (rank + 1) % world;
  auto* peer = static_cast<unsigned char*>(f.peer_arena(next));
  const auto n = static_cast<std::size_t>(bytes);
  nlohmann::json rates = nlohmann::json::object();
  auto report = [&](const char* what, double ms) {
    const double gbs = static_cast<double>(bytes) / (ms * 1e6);
    rates[what] = {{"bytes", bytes}, {"median_ms", ms}, {"GB_per_s", gbs}};
    if (lead) std::printf("  %-34s %10.3f ms %9.1f GB/s\n", what, ms, gbs);
  };
  if (lead)
    std::printf("copy engine, %lld bytes, every rank at once, slowest rank, median of %d:\n",
                static_cast<long long>(bytes), args.repeats);
  // Slowest rank's median over repeats, one warm-up.
  auto copy_ms = [&](const std::function<void()>& copy) {
    return measure(session, 1, args.repeats, [&] { return event_ms(s, copy); }).median;
  };
  if (peer != nullptr) {
    report("push to next rank's window", copy_ms([&] {
             TIDE_CUDA_CHECK(cudaMemcpyAsync(peer + 64 * kMiB, local, n, cudaMemcpyDefault, s));
           }));
    report("pull from next rank's window", copy_ms([&] {
             TIDE_CUDA_CHECK(cudaMemcpyAsync(local, peer + 64 * kMiB, n, cudaMemcpyDefault, s));
           }));
  }
  report("local device to device", copy_ms([&] {
           TIDE_CUDA_CHECK(
               cudaMemcpyAsync(window + 64 * kMiB + n, local, n, cudaMemcpyDeviceToDevice, s));
         }));
  TIDE_CUDA_CHECK(cudaFree(local));
  TIDE_CUDA_CHECK(cudaStreamDestroy(s));

  const auto verdicts = session.gather_text(problems.empty() ? "ok" : problems, "probe: verdicts");
  int bad = 0;
  for (int r = 0; r < world; ++r) {
    if (verdicts[static_cast<std::size_t>(r)] != "ok") {
      ++bad;
      if (lead) std::printf("  rank %d: %s\n", r, verdicts[static_cast<std::size_t>(r)].c_str());
    }
  }
  if (lead) {
    std::printf("tide-nccl probe: %s\n", bad == 0 ? "every peer read and write correct" : "FAILED");
    if (!args.common.out.empty()) {
      std::ofstream(args.common.out)
          << nlohmann::json{{"world", world}, {"teams", lines}, {"rates", rates}, {"ok", bad == 0}}
                 .dump(2)
          << "\n";
    }
  }
  return bad == 0 ? 0 : 1;
}

}  // namespace tide::nccl_cli
