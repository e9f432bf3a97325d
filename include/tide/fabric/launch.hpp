// Launcher glue for one process per GPU: who am I, start the ranks on one
// host, and hand rank 0's NCCL unique id to every rank.
//
// Rank discovery, first match wins: TIDE_RANK/WORLD/LOCAL_RANK (spawn_ranks), torchrun, Open
// MPI, MPICH. The unique id travels through a rendezvous directory every rank can read (rank 0
// writes DIR/nccl-unique-id atomically, the others poll with a bound): TIDE_RENDEZVOUS, a fresh
// one per spawn_ranks() launch, or under torchrun one derived from its run. Use a fresh
// directory per launch. Variables and paths: NOTE [launch] in docs/nccl_fabric.md.
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

// Starts `world` copies of this program (/proc/self/exe) with `args` (argv[1..]) and TIDE_RANK,
// TIDE_WORLD, TIDE_LOCAL_RANK, TIDE_RENDEZVOUS set (a fresh directory), and waits for all.
// Returns 0 when every rank exited 0; otherwise prints which ranks failed, stops the others
// (SIGTERM, then SIGKILL) once `grace` has passed after the first failure, and returns 1.
int spawn_ranks(int world, const std::vector<std::string>& args, std::chrono::seconds grace);

// Rank 0 publishes `id` (its NCCL unique id) in the rendezvous directory; every other rank
// polls for it until `timeout` and returns it. Throws tide::InvalidArgument (no directory)
// or std::runtime_error naming the file and the wait on timeout.
std::vector<std::byte> exchange_unique_id(const LaunchedRank& me, std::vector<std::byte> id,
                                          std::chrono::milliseconds timeout);

}  // namespace tide::fabric
