// The NCCL fabric (architecture: fabric/nccl): one process per GPU, peers and
// memory from NCCL communicators. Built only where CUDA and NCCL >= 2.28 are found.
//
// NOTE [nccl fabric]
// Construction, in this order (Sec. 6.1; every NCCL call below is collective over its comm):
//   1. Main communicator: ncclCommInitRankConfig over all N ranks, from the unique id that
//      rank 0 made (make_unique_id) and the launcher broadcast. Non-blocking, so that every
//      step can be bounded by the fabric's timeout (NOTE [nccl fabric waits]).
//   2. Rail communicators: ncclCommSplit(main, color = local index l, key = node n): L
//      disjoint M-rank communicators, rank n in rail l is world rank n L + l.
//   Both take the channel cap of NcclFabricOptions::max_ctas (the paper caps unused channels
//   at one: TIDE's traffic does not run on NCCL's collective channels).
//   2b. Message lanes (NcclFabricOptions::message_lanes > 0): that many ncclCommSplit(main,
//   color 0, key rank) communicators with NCCL's default channels, one per lane of the
//   runtime's calls (all-gathers, reduce-scatters), for the sequence runner's two-sided
//   messages (ncclSend / ncclRecv, NOTE [rail messages]). Lanes are issued from different
//   threads, so their orders may interleave differently on different ranks; each lane's
//   messages come in one order on every rank, so each lane gets a communicator of its own.
//   3. Arena: ncclMemAlloc(arena_bytes), registered with ncclCommWindowRegister(
//      NCCL_WIN_COLL_SYMMETRIC) on the main communicator (LSA peers on the same host) and on
//      the rail communicator (rail peers). arena_bytes must be the same on every rank.
//   4. Peer pointers: ncclDevCommCreate on each communicator (no barriers, no multimem, no GIN
//      requested) gives the LSA team (lsaRank, lsaSize); a one-CTA kernel calls
//      ncclGetLsaPointer(window, 0, i) for i < lsaSize into a device table, copied once to
//      the host. LSA teams are contiguous in their communicator's ranks, so world rank p is
//      LSA index p - (rank - lsaRank) on the main comm, and node n is LSA index
//      n - (node - railLsaRank) on the rail comm.
// A single host can be declared as M virtual nodes of L GPUs (2 x 4, 4 x 2, 8 x 1, 1 x 8):
// then every peer, local or rail, is an LSA peer and the multi-node algorithms run over NVLink.
//   5. One-sided messages (opt-in: NcclFabricOptions::host_rma or TIDE_NCCL_HOST_RMA=1):
//      every rank contributes (asked && able: this build and the loaded NCCL >= 2.29, message
//      lanes) to an ncclAllReduce(min) on the main communicator, and an ncclAllGather of the
//      same flags names a rank that cannot; both run on every rank whether it asks or not.
//      Where all agree, each message lane registers the arena (NCCL_WIN_COLL_SYMMETRIC) and a
//      token area (ncclMemAlloc, zeroed: kTokenRing 8-byte slots per sender to receive, then
//      kTokenRing per receiver to send from, since NCCL puts only from a window) on its
//      communicator, for ncclPutSignal / ncclWaitSignal (src/fabric/nccl/nccl_rma.hpp; NOTE
//      [one-sided messages]). Otherwise host_rma() is false and host_rma_reason() says why
//      ("not requested", "NCCL 2.28.9 < 2.29", "rank 3 cannot: ...").
// On real multi-node runs the rail LSA team is the rank alone; rail peers on other hosts have
// no pointer (rail_peer_arena returns nullptr) and need ncclSend / ncclRecv on rail_comm() or
// the message lanes, or, with step 5, ncclPutSignal (docs/nccl_fabric.md, one-sided messages).
// NVLink multicast is never enabled: the fabric sets NCCL_NVLS_ENABLE=0 when it is unset and
// refuses any other value unless allow_multicast (architecture: hardware rules).
// Teardown (destructor): device comms, windows (the lanes' first), token areas, arena, lane,
// rail and main comms, in reverse order.
// After a timeout the communicators are aborted and nothing is freed (the GPU may still use it).
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
  // Memory from ncclMemAlloc that the caller owns and frees after the fabric (e.g. a tensor of
  // a torch.cuda.MemPool over NCCL's allocator, so that torch's statistics count it), of at
  // least arena_bytes rounded up to NCCL_WIN_REQUIRED_ALIGNMENT; nullptr: the fabric
  // allocates the arena itself.
  void* external_arena = nullptr;
  // Channel cap of both communicators (ncclConfig_t maxCTAs; minCTAs is set to match when
  // lower). 1 is the paper's setting; 0 keeps NCCL's defaults.
  int max_ctas = 1;
  // Bound on every wait of the fabric: communicator creation, split, registration, and
  // wait() (NOTE [nccl fabric waits]). Environment: TIDE_FABRIC_TIMEOUT_S overrides it.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  bool allow_multicast = false;  // never set on the lent machines
  int message_lanes = 0;         // NOTE [nccl fabric] 2b: 0 (none) to 2
  // NOTE [nccl fabric] 5: ask for one-sided messages (TIDE_NCCL_HOST_RMA=1 asks too); they are
  // on only where every rank asks and can (host_rma()).
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

  // Validates the arguments before touching the GPU or NCCL (tide::InvalidArgument for a
  // world that is not M x L, a rank outside it, an id of the wrong length, arena_bytes < 1,
  // a bad timeout, or NCCL_NVLS_ENABLE != 0 without allow_multicast); then builds the
  // fabric (NcclError, tide::CudaError, FabricTimeout).
  NcclFabric(int rank, int world, std::span<const std::byte> unique_id,
             const NcclFabricOptions& options);
  ~NcclFabric();
  NcclFabric(const NcclFabric&) = delete;
  NcclFabric& operator=(const NcclFabric&) = delete;

  // The argument checks of the constructor alone (no GPU, no NCCL).
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

  // NOTE [nccl fabric] 5: whether one-sided messages are on (the same answer on every rank),
  // and why not (empty when on).
  bool host_rma() const;
  const std::string& host_rma_reason() const;
  // Token slots in a lane's token area: slot p * kTokenRing + (k mod kTokenRing) holds sender
  // p's k-th token on that lane; slot (world() + q) * kTokenRing + (k mod kTokenRing) is where
  // this rank writes its k-th token to q before putting it.
  static constexpr int kTokenRing = 64;
  // With host_rma(): lane `lane`'s windows over the arena and over the token area, and this
  // rank's token area (device, 2 * world() * kTokenRing words); nullptr otherwise.
  ncclWindow_t lane_window(int lane) const;
  ncclWindow_t lane_token_window(int lane) const;
  std::uint64_t* token_area(int lane) const;
  // 1, 2, ... per (peer, lane, direction), in call order, from any thread: the numbers of the
  // tokens this rank sends to (sending) or receives from `peer` on `lane`, kept here so that
  // every user of the lane's token area shares one count (NOTE [one-sided messages]).
  std::uint64_t next_token_number(int peer, int lane, bool sending);

  // The bytes an arena of `arena_bytes` takes (rounded up to NCCL_WIN_REQUIRED_ALIGNMENT): what
  // NcclFabricOptions::external_arena must hold.
  static std::int64_t rounded_arena_bytes(std::int64_t arena_bytes);
  // This rank's arena (ncclMemAlloc), and its size (arena_bytes rounded up to 4 KiB).
  void* arena() const;
  std::int64_t arena_bytes() const;
  // LSA pointer to the arena of world rank `peer` (main window), or nullptr when `peer` is
  // not in this rank's LSA team. peer_arena(rank()) maps this rank's own arena.
  void* peer_arena(int peer) const;
  // LSA pointer to the arena of the same-rail rank on node `node` (rail window), or nullptr
  // when that rank is not load/store reachable (another host).
  void* rail_peer_arena(int node) const;
  NcclFabricView view() const;

  // NOTE [nccl fabric waits]
  // Every wait of the fabric spins with a bound: it polls, between sleeps of at most 1 ms,
  // the condition and both communicators' asynchronous errors, and after options.timeout
  // aborts both communicators and throws FabricTimeout naming `what` and this rank. An
  // asynchronous NCCL error throws NcclError at once. No wait ever hangs silently.
  void wait(cudaStream_t stream, std::string_view what);
  void wait(cudaEvent_t event, std::string_view what);
  void wait_until(const std::function<bool()>& ready, std::string_view what);

  // Settles a call made on main_comm() (a non-blocking communicator may answer
  // ncclInProgress), bounded as every wait; throws NcclError naming `call` on failure.
  void settle(ncclResult_t result, const char* call);
  // The same for a call made on `comm` (a message lane's).
  void settle(ncclComm_t comm, ncclResult_t result, const char* call);

  bool aborted() const;
  // Aborts both communicators (ncclCommAbort) from any thread, e.g. a watchdog's: every later
  // wait or settle of the fabric fails. Idempotent.
  void abort() noexcept;
  // Gives up every resource without freeing it (a caller whose device work cannot be
  // drained). The fabric is unusable after.
  void release() noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::fabric
