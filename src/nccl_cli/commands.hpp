// The subcommands of `tide-nccl` (main.cpp): one process per GPU, TIDE over the NCCL fabric.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/core/cta_budgets.hpp"
#include "tide/fabric/launch.hpp"

namespace tide::nccl_cli {

struct CommonArgs {
  double run_timeout_s = 30.0;    // CudaRunOptions::timeout_s of every TIDE run
  double fabric_timeout_s = 120;  // NcclFabricOptions::timeout (TIDE_FABRIC_TIMEOUT_S wins)
  std::string out;                // a JSON file rank 0 writes (empty: none)
  // Executor and fabric choices of check and bench: transfers between the declared nodes of
  // each split as messages (ncclSend / ncclRecv), as between hosts (NOTE [rail messages]);
  // CudaExecutorOptions::copy_streams (NOTE [copy-engine pool]).
  bool messages = false;
  int copy_streams = 1;
};

// Fabric probe: peer pointers, copy-engine reads and writes to every peer's window, and the
// copy-engine bandwidth to a peer (the ceiling TIDE's transfers are compared to).
struct ProbeArgs {
  CommonArgs common;
  std::int64_t bytes = std::int64_t{1} << 30;
  int repeats = 10;
};
int run_probe(const fabric::LaunchedRank& me, const ProbeArgs& args);

// Correctness: TIDE-AG, TIDE-RS and training steps on every M x L split of the world, every
// rank's output bitwise equal to the CPU reference executor's, repeated runs identical;
// `fault` reproduces a fault across processes ("stall": one rank starts its run late;
// "withhold": one rank drops a credit it owes a peer) and expects every rank to fail naming it.
struct CheckArgs {
  CommonArgs common;
  int repeats = 3;
  std::uint64_t seed = 1;
  std::string fault;     // "", "stall", "withhold"
  int fault_rank = -1;   // -1: the last rank
  double stall_s = 0.0;  // "stall": how late (0: 3 x run_timeout_s)
  bool quick = false;    // fewer cases
};
int run_check(const fabric::LaunchedRank& me, const CheckArgs& args);

// Timing in the style of nccl-tests: TIDE-AG and TIDE-RS against NCCL's all-gather and
// reduce-scatter plus FSDP2's layout copies (C++ stand-ins), shard sizes and model presets,
// every M x L split; outputs cross-checked against the NCCL path.
struct BenchArgs {
  CommonArgs common;
  std::vector<std::string> cases;  // empty: all (flat32m, flat128m, llama3.1-70b, qwen3-30b-a3b)
  int repeats = 20;
  int warmup = 3;
  std::uint64_t seed = 7;
  bool all_gather = true;
  bool reduce_scatter = true;
  // TIDE-RS knobs (RsProgramOptions / RsOptions; the defaults are the library's).
  int rs_sum_ctas = kDefaultSumCtas;
  int rs_landing_ctas = kDefaultLandingCtas;
  std::int64_t rs_chunk_elems = 0;  // RsOptions::staging_chunk_elems (0: a whole pass part)
  bool rs_slot_reuse = false;
  // The one-node layout (NOTE [one-node TIDE-RS], NOTE [one-node TIDE-AG]) on the 1 x world
  // split only: TIDE-RS as the runtime runs it (the peers push), TIDE-AG with staged shards.
  bool one_node = false;
};
int run_bench(const fabric::LaunchedRank& me, const BenchArgs& args);

}  // namespace tide::nccl_cli
