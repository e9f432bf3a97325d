// The NCCL fabric (architecture: fabric/nccl): one process per GPU, peers and
// memory from NCCL communicators. Built only where CUDA and NCCL >= 2.28 are found.
// Contract (steps 1-5 and teardown: NOTE [nccl fabric] in docs/nccl_fabric.md):
// - Construction is collective: communicators, message lanes, the symmetric arena window
//   (arena_bytes equal on every rank), LSA peer pointers and the optional one-sided setup, each
//   step bounded by the timeout (NOTE [nccl fabric waits]). After a timeout the communicators
//   are aborted and nothing is freed.
// - LSA peers have pointers; other peers (other hosts) have none and are reached by messages.
// - NVLink multicast stays off: NCCL_NVLS_ENABLE is set to 0 when unset, and any other value
//   is refused unless allow_multicast.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tide/core/topology.hpp"

namespace tide::fabric {

// An NCCL call failed: the message names the call, NCCL's result string and its last error.
class NcclError : public std::runtime_error {
 public:
  NcclError(std::string call, ncclResult_t result, const std::string& message)
      : std::runtime_error(message), call_(std::move(call)), result_(result) {}
  const std::string& call() const { return call_; }
  ncclResult_t result() const { return result_; }

 private:
  std::string call_;
  ncclResult_t result_;
};

// A bounded wait expired (fail-stop, Sec. 7.5): the message names what was waited for.
class FabricTimeout : public std::runtime_error {
 public:
  FabricTimeout(std::string waited_for, const std::string& message)
      : std::runtime_error(message), waited_for_(std::move(waited_for)) {}
  const std::string& waited_for() const { return waited_for_; }

 private:
  std::string waited_for_;
};

struct NcclFabricOptions {
  int device = -1;             // the CUDA device; -1: the current one
  int nodes = 1;               // M
  int gpus_per_node = 1;       // L
  bool virtual_nodes = false;  // one host declared as M nodes (every peer is an LSA peer)
  std::int64_t arena_bytes = std::int64_t{2} << 20;  // the same on every rank
  // The caller's ncclMemAlloc memory (>= rounded_arena_bytes, freed after the fabric), or null.
  void* external_arena = nullptr;
  // Channel cap (maxCTAs) of the main and rail communicators: 1 is the paper's; 0: NCCL's.
  int max_ctas = 1;
  // Every wait's bound (NOTE [nccl fabric waits]); TIDE_FABRIC_TIMEOUT_S overrides it.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  bool allow_multicast = false;  // never set on the lent machines
  int message_lanes = 0;         // NOTE [nccl fabric] 2b: 0 (none) to 2
  // Ask for one-sided messages (NOTE [nccl fabric] 5; or TIDE_NCCL_HOST_RMA=1): see host_rma().
  bool host_rma = false;
};

// Plain data for kernels and the executor (style habit 2): LSA peer arenas of both domains.
struct NcclFabricView {
  void* const* lsa_peers = nullptr;       // device table, lsa_size entries (main comm)
  void* const* rail_lsa_peers = nullptr;  // device table, rail_lsa_size entries (rail comm)
  int lsa_size = 0;
  int lsa_rank = 0;
  int rail_lsa_size = 0;
  int rail_lsa_rank = 0;
};

class NcclFabric {
 public:
  static constexpr std::size_t kUniqueIdBytes = NCCL_UNIQUE_ID_BYTES;

  // Rank 0 calls this; the launcher broadcasts the bytes to every rank.
  static std::vector<std::byte> make_unique_id();

  // Collective. Validates the arguments first (check_arguments(): tide::InvalidArgument),
  // then builds the fabric (NcclError, tide::CudaError, FabricTimeout).
  NcclFabric(int rank, int world, std::span<const std::byte> unique_id,
             const NcclFabricOptions& options);
  ~NcclFabric();
  NcclFabric(const NcclFabric&) = delete;
  NcclFabric& operator=(const NcclFabric&) = delete;

  // The constructor's argument checks alone (no GPU or NCCL): tide::InvalidArgument for a world
  // not M x L, a bad rank, id, arena_bytes or timeout, or NCCL_NVLS_ENABLE without the opt-in.
  static void check_arguments(int rank, int world, std::span<const std::byte> unique_id,
                              const NcclFabricOptions& options);

  int rank() const;
  int world() const;
  const Topology& topology() const;
  int node() const;   // n = rank / L
  int local() const;  // l = rank mod L
  int device() const;

  ncclComm_t main_comm() const;
  ncclComm_t rail_comm() const;
  // Message lane `lane`'s communicator (NOTE [nccl fabric] 2b; world ranks), or nullptr.
  ncclComm_t message_comm(int lane) const;

  // NOTE [nccl fabric] 5: one-sided messages on (the same on every rank), and why not.
  bool host_rma() const;
  const std::string& host_rma_reason() const;
  // Token slots: p * kTokenRing + k mod kTokenRing receives sender p's k-th token,
  // (world() + q) * kTokenRing + k mod kTokenRing holds this rank's k-th to q.
  static constexpr int kTokenRing = 64;
  // With host_rma(): the lane's windows over the arena and the token area, and this rank's
  // token area (2 * world() * kTokenRing device words); else nullptr.
  ncclWindow_t lane_window(int lane) const;
  ncclWindow_t lane_token_window(int lane) const;
  std::uint64_t* token_area(int lane) const;
  // 1, 2, ... per (peer, lane, direction), thread-safe (NOTE [one-sided messages]).
  std::uint64_t next_token_number(int peer, int lane, bool sending);

  // arena_bytes rounded up to NCCL_WIN_REQUIRED_ALIGNMENT: what external_arena must hold.
  static std::int64_t rounded_arena_bytes(std::int64_t arena_bytes);
  // This rank's arena (ncclMemAlloc), and its size (arena_bytes rounded up to 4 KiB).
  void* arena() const;
  std::int64_t arena_bytes() const;
  // LSA pointer to world rank `peer`'s arena (main window), or nullptr outside the LSA team.
  void* peer_arena(int peer) const;
  // LSA pointer to the same-rail rank of node `node` (rail window), or nullptr (another host).
  void* rail_peer_arena(int node) const;
  NcclFabricView view() const;

  // NOTE [nccl fabric waits]
  // Every wait polls (sleeps <= 1 ms) the condition and the communicators' asynchronous errors
  // (NcclError at once); after options.timeout it aborts the communicators and throws
  // FabricTimeout naming `what` and this rank. No wait hangs silently.
  void wait(cudaStream_t stream, std::string_view what);
  void wait(cudaEvent_t event, std::string_view what);
  void wait_until(const std::function<bool()>& ready, std::string_view what);

  // Settles a call on main_comm() (or `comm`) that may answer ncclInProgress, bounded as every
  // wait; NcclError naming `call` on failure.
  void settle(ncclResult_t result, const char* call);
  void settle(ncclComm_t comm, ncclResult_t result, const char* call);

  bool aborted() const;
  // ncclCommAbort of both communicators, from any thread; later waits fail. Idempotent.
  void abort() noexcept;
  // Gives up every resource unfreed (undrained device work); the fabric is unusable after.
  void release() noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::fabric
