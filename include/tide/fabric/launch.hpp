// Launcher glue for one process per GPU: who am I, start the ranks on one
// host, and hand rank 0's NCCL unique id to every rank.
//
// NOTE [launch]
// Rank discovery, first match wins:
//   TIDE_RANK, TIDE_WORLD, TIDE_LOCAL_RANK        spawn_ranks() below (mpirun-style, one host)
//   RANK, WORLD_SIZE, LOCAL_RANK                   torchrun
//   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK       Open MPI's mpirun
//   PMI_RANK, PMI_SIZE, MPI_LOCALRANKID            MPICH / Hydra
// The unique id travels through a rendezvous directory that every rank can read (one host,
// or a shared file system): rank 0 writes DIR/nccl-unique-id atomically (a temporary file,
// then rename), the others poll for it with a bound. TIDE_RENDEZVOUS names the directory;
// spawn_ranks() makes a fresh one per launch; under torchrun without it the directory is
// /tmp/tide-rendezvous-<MASTER_ADDR>-<MASTER_PORT>-<TORCHELASTIC_RUN_ID>-<restart count>
// (one host only). A directory reused across launches could hold a stale id: use a fresh
// one per launch (rank 0 removes what it finds, but a fast peer may read it first).
// Capability agreement needs no file: it runs over the main communicator once it exists.
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
