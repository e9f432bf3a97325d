// Launcher glue for one process per GPU: who am I, start the ranks on one host, and hand rank 0's
// NCCL unique id to every rank. Rank discovery, first match wins: TIDE_RANK/WORLD/LOCAL_RANK
// (spawn_ranks), torchrun, Open MPI, MPICH. The unique id travels through a rendezvous directory
// every rank can read (rank 0 writes DIR/nccl-unique-id atomically, the others poll with a bound):
// TIDE_RENDEZVOUS, a fresh one per spawn_ranks() launch, or under torchrun one derived from its
// run. Use a fresh directory per launch. Variables and paths: NOTE [launch] in docs/nccl_fabric.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace tide::fabric {

struct LaunchedRank {
  int rank = 0;
  int world = 1;
  int local_rank = 0;      // index among the ranks of this host: the CUDA device to use
  std::string rendezvous;  // directory for the unique id
  std::string launcher;    // "tide", "torchrun", "openmpi", "mpich"
};

// The rank from the environment (NOTE [launch]), or nothing when no launcher set one.
// Throws tide::InvalidArgument for values that do not parse or do not fit together.
std::optional<LaunchedRank> launched_rank_from_environment();

// Starts `world` copies of /proc/self/exe with `args` and TIDE_RANK, _WORLD, _LOCAL_RANK and a
// fresh TIDE_RENDEZVOUS, waits for all: 0 when all exit 0; else prints the failed ranks, stops
// the others (SIGTERM, SIGKILL) `grace` after the first failure, and returns 1.
int spawn_ranks(int world, const std::vector<std::string>& args, std::chrono::seconds grace);

// Rank 0 publishes `id` in the rendezvous directory; the others poll for it until `timeout`.
// InvalidArgument (no directory), std::runtime_error naming the file on timeout.
std::vector<std::byte> exchange_unique_id(const LaunchedRank& me, std::vector<std::byte> id,
                                          std::chrono::milliseconds timeout);

}  // namespace tide::fabric
