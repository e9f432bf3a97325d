// The NCCL fabric: see NOTE [nccl fabric] and NOTE [nccl fabric waits] in nccl_fabric.hpp.
#include "tide/fabric/nccl_fabric.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "lsa_peers.hpp"
#include "nccl_rma.hpp"
#include "tide/core/env.hpp"
#include "tide/core/error.hpp"
#include "tide/core/rules.hpp"
#include "tide/cuda/check.hpp"
#include "tide/version_gates.hpp"

#if !TIDE_HAS_NCCL_FABRIC
#error "the NCCL fabric needs NCCL >= 2.28 (TIDE_HAS_NCCL_FABRIC in tide/version_gates.hpp)"
#endif

namespace tide::fabric {
namespace {

using Clock = std::chrono::steady_clock;

// TIDE_FABRIC_TIMEOUT_S (NOTE [environment knobs]) overrides options.timeout.
std::chrono::milliseconds effective_timeout(const NcclFabricOptions& options) {
  const std::optional<double> seconds = env::positive_seconds("TIDE_FABRIC_TIMEOUT_S");
  if (!seconds) return options.timeout;
  return std::chrono::milliseconds(static_cast<std::int64_t>(*seconds * 1000.0));
}

std::string nccl_message(int rank, const char* call, ncclResult_t r, ncclComm_t comm) {
  std::string m = "tide: rank " + std::to_string(rank) + ": " + call +
                  " failed: " + ncclGetErrorString(r) + " (ncclResult_t " +
                  std::to_string(static_cast<int>(r)) + ")";
  const char* last = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') m += ": " + std::string(last);
  return m;
}

}  // namespace

struct NcclFabric::State {
  int rank = 0;
  int world = 1;
  Topology topology{1, 1};
  int device = 0;
  NcclFabricOptions options;
  std::chrono::milliseconds timeout{0};
  ncclComm_t main = nullptr;
  ncclComm_t rail = nullptr;
  ncclComm_t lanes[2] = {nullptr, nullptr};  // NOTE [nccl fabric] 2b
  void* arena = nullptr;
  bool owns_arena = true;  // false: NcclFabricOptions::external_arena
  std::int64_t arena_bytes = 0;
  ncclWindow_t main_window = nullptr;
  ncclWindow_t rail_window = nullptr;
  detail::LsaPeers main_peers;
  detail::LsaPeers rail_peers;
  // NOTE [nccl fabric] 5
  bool host_rma = false;
  std::string host_rma_reason;
  ncclWindow_t lane_windows[2] = {nullptr, nullptr};
  ncclWindow_t token_windows[2] = {nullptr, nullptr};
  void* token_areas[2] = {nullptr, nullptr};
  std::mutex numbers_mutex;  // lanes are issued from different threads
  std::map<std::tuple<int, int, bool>, std::uint64_t> numbers;  // (peer, lane, sending)
  std::atomic<bool> aborted{false};  // set by abort_all(), from any thread
  bool released = false;

  // Polls `done` with a bound; see NOTE [nccl fabric waits].
  void bounded(const std::function<bool()>& done, std::string_view what) {
    const auto deadline = Clock::now() + timeout;
    auto nap = std::chrono::microseconds(1);
    while (!done()) {
      for (ncclComm_t c : {main, rail}) {
        if (c == nullptr) continue;
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(c, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
          const std::string m = nccl_message(rank, "asynchronous NCCL operation", async, c);
          abort_all();
          throw NcclError("ncclCommGetAsyncError", async,
                          m + " (while waiting for " + std::string(what) + ")");
        }
      }
      if (Clock::now() > deadline) {
        abort_all();
        throw FabricTimeout(std::string(what),
                            "tide: rank " + std::to_string(rank) + ": wait for '" +
                                std::string(what) + "' did not complete within " +
                                std::to_string(timeout.count()) +
                                " ms (a peer stalled or died); NCCL communicators aborted");
      }
      std::this_thread::sleep_for(nap);
      if (nap < std::chrono::milliseconds(1)) nap *= 2;
    }
  }

  // Settles a call on a non-blocking communicator, then throws NcclError on failure. A call
  // may return before its communicator (or, for a split, its parent) is ready for the next
  // one, so both communicators are polled until neither reports ncclInProgress.
  void settle(ncclComm_t comm, ncclResult_t r, const char* call) {
    if (r == ncclInProgress || r == ncclSuccess) {
      bounded(
          [&] {
            bool busy = false;
            for (ncclComm_t c : {comm, main, rail}) {
              if (c == nullptr) continue;
              ncclResult_t s = ncclSuccess;
              const ncclResult_t q = ncclCommGetAsyncError(c, &s);
              const ncclResult_t now = q != ncclSuccess ? q : s;
              if (now == ncclInProgress) {
                busy = true;
              } else if (now != ncclSuccess && c == comm) {
                r = now;
              }
            }
            if (!busy && r == ncclInProgress) r = ncclSuccess;
            return !busy;
          },
          call);
    }
    if (r != ncclSuccess) {
      const std::string m = nccl_message(rank, call, r, comm);
      abort_all();
      throw NcclError(call, r, m);
    }
  }

  // NOTE [nccl fabric] 5: every rank's (asked && able), agreed on the main communicator.
  void agree_host_rma(bool asked, cudaStream_t stream, const std::function<void()>& sync) {
    std::string own;
    if (!asked) {
      own = "not requested (NcclFabricOptions::host_rma, TIDE_NCCL_HOST_RMA=1)";
    } else if (options.message_lanes < 1) {
      own = "no message lanes (NcclFabricOptions::message_lanes = 0)";
    } else {
      own = rma::unavailable_reason();
    }
    const int able = own.empty() ? 1 : 0;
    int* flags = nullptr;  // [0] this rank's, [1] the minimum, [2, 2 + world) every rank's
    TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&flags),
                               static_cast<std::size_t>(world + 2) * sizeof(int)));
    std::vector<int> host(static_cast<std::size_t>(world + 2), 0);
    try {
      TIDE_CUDA_CHECK(cudaMemcpyAsync(flags, &able, sizeof(int), cudaMemcpyHostToDevice, stream));
      settle(main, ncclAllReduce(flags, flags + 1, 1, ncclInt32, ncclMin, main, stream),
             "ncclAllReduce (host RMA agreement)");
      settle(main, ncclAllGather(flags, flags + 2, 1, ncclInt32, main, stream),
             "ncclAllGather (host RMA agreement)");
      TIDE_CUDA_CHECK(cudaMemcpyAsync(host.data(), flags, host.size() * sizeof(int),
                                      cudaMemcpyDeviceToHost, stream));
      sync();
    } catch (...) {
      (void)cudaFree(flags);
      throw;
    }
    TIDE_CUDA_CHECK(cudaFree(flags));
    host_rma = host[1] == 1;
    if (host_rma) return;
    host_rma_reason = own;
    for (int r = 0; r < world && host_rma_reason.empty(); ++r)
      if (host[static_cast<std::size_t>(r + 2)] == 0)
        host_rma_reason = "peer " + std::to_string(r) + " lacks it (cannot or did not ask)";
  }

  // NOTE [nccl fabric] 5: the arena and a zeroed token area as windows of every lane.
  void register_lane_windows(cudaStream_t stream, const std::function<void()>& sync) {
    const std::size_t token_bytes = static_cast<std::size_t>(
        rounded_arena_bytes(static_cast<std::int64_t>(2 * world) * NcclFabric::kTokenRing * 8));
    for (int l = 0; l < options.message_lanes; ++l) {
      settle(lanes[l],
             ncclCommWindowRegister(lanes[l], arena, static_cast<std::size_t>(arena_bytes),
                                    &lane_windows[l], NCCL_WIN_COLL_SYMMETRIC),
             "ncclCommWindowRegister(lane, NCCL_WIN_COLL_SYMMETRIC)");
      settle(nullptr, ncclMemAlloc(&token_areas[l], token_bytes), "ncclMemAlloc (token area)");
      TIDE_CUDA_CHECK(cudaMemsetAsync(token_areas[l], 0, token_bytes, stream));
      sync();
      settle(lanes[l],
             ncclCommWindowRegister(lanes[l], token_areas[l], token_bytes, &token_windows[l],
                                    NCCL_WIN_COLL_SYMMETRIC),
             "ncclCommWindowRegister(token area, NCCL_WIN_COLL_SYMMETRIC)");
    }
  }

  static std::int64_t rounded_arena_bytes(std::int64_t bytes) {
    return NcclFabric::rounded_arena_bytes(bytes);
  }

  ncclConfig_t config(const char* name) const {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.blocking = 0;
    c.splitShare = 0;
    c.commName = name;
    if (options.max_ctas > 0) {
      c.minCTAs = 1;
      c.maxCTAs = options.max_ctas;
    }
    return c;
  }

  void abort_all() noexcept {
    if (aborted.exchange(true)) return;
    for (ncclComm_t lane : lanes)
      if (lane != nullptr) (void)ncclCommAbort(lane);
    if (rail != nullptr) (void)ncclCommAbort(rail);
    if (main != nullptr) (void)ncclCommAbort(main);
  }

  ~State() {
    if (released) return;
    if (!aborted) {
      try {
        detail::destroy_lsa_peers(rail, rail_peers);
        detail::destroy_lsa_peers(main, main_peers);
        for (int l = 1; l >= 0; --l) {
          if (token_windows[l] != nullptr) {
            settle(lanes[l], ncclCommWindowDeregister(lanes[l], token_windows[l]),
                   "ncclCommWindowDeregister (token area)");
          }
          if (lane_windows[l] != nullptr) {
            settle(lanes[l], ncclCommWindowDeregister(lanes[l], lane_windows[l]),
                   "ncclCommWindowDeregister (lane)");
          }
          if (token_areas[l] != nullptr) (void)ncclMemFree(token_areas[l]);
          token_areas[l] = nullptr;
        }
        if (rail_window != nullptr) {
          settle(rail, ncclCommWindowDeregister(rail, rail_window), "ncclCommWindowDeregister");
        }
        if (main_window != nullptr) {
          settle(main, ncclCommWindowDeregister(main, main_window), "ncclCommWindowDeregister");
        }
        if (arena != nullptr && owns_arena) (void)ncclMemFree(arena);
        arena = nullptr;
        for (ncclComm_t* c : {&lanes[1], &lanes[0], &rail, &main}) {
          if (*c == nullptr) continue;
          settle(*c, ncclCommFinalize(*c), "ncclCommFinalize");
          (void)ncclCommDestroy(*c);
          *c = nullptr;
        }
      } catch (...) {
        abort_all();  // a peer went away during teardown: abort, free nothing more
      }
    }
  }
};

std::vector<std::byte> NcclFabric::make_unique_id() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    throw NcclError("ncclGetUniqueId", r, nccl_message(0, "ncclGetUniqueId", r, nullptr));
  std::vector<std::byte> bytes(sizeof(id.internal));
  std::memcpy(bytes.data(), id.internal, sizeof(id.internal));
  return bytes;
}

void NcclFabric::check_arguments(int rank, int world, std::span<const std::byte> unique_id,
                                 const NcclFabricOptions& options) {
  const Topology topology(options.nodes, options.gpus_per_node);  // InvalidArgument
  if (world != topology.world()) {
    throw InvalidArgument("NCCL fabric: the launcher's world has " + std::to_string(world) +
                          " ranks, but M x L = " + std::to_string(options.nodes) + " x " +
                          std::to_string(options.gpus_per_node) + " declares " +
                          std::to_string(topology.world()));
  }
  if (rank < 0 || rank >= world) {
    throw InvalidArgument("NCCL fabric: rank " + std::to_string(rank) + " is outside 0.." +
                          std::to_string(world - 1));
  }
  if (unique_id.size() != kUniqueIdBytes) {
    throw InvalidArgument("NCCL fabric: the unique id has " + std::to_string(unique_id.size()) +
                          " bytes, NCCL's has " + std::to_string(kUniqueIdBytes));
  }
  if (options.arena_bytes < 1) {
    throw InvalidArgument("NCCL fabric: arena_bytes must be positive (got " +
                          std::to_string(options.arena_bytes) + ")");
  }
  if (options.message_lanes < 0 || options.message_lanes > 2) {
    throw InvalidArgument("NCCL fabric: message_lanes must be 0, 1 or 2 (got " +
                          std::to_string(options.message_lanes) + ")");
  }
  if (options.max_ctas < 0 || options.max_ctas > 64) {
    throw InvalidArgument("NCCL fabric: max_ctas must be 0 (NCCL's default) or 1..64 (got " +
                          std::to_string(options.max_ctas) + ")");
  }
  if (effective_timeout(options).count() <= 0) {
    throw InvalidArgument("NCCL fabric: the timeout must be positive");
  }
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (!options.allow_multicast && nccl_multicast_requested(nvls)) {
    throw InvalidArgument(std::string("NCCL fabric: NCCL_NVLS_ENABLE=") + nvls +
                          " would let NCCL use NVLink multicast; TIDE keeps it 0 unless "
                          "allow_multicast is set (architecture: hardware rules)");
  }
}

NcclFabric::NcclFabric(int rank, int world, std::span<const std::byte> unique_id,
                       const NcclFabricOptions& options)
    : state_(std::make_unique<State>()) {
  check_arguments(rank, world, unique_id, options);
  State& s = *state_;
  s.rank = rank;
  s.world = world;
  s.topology = Topology(options.nodes, options.gpus_per_node);
  s.options = options;
  s.timeout = effective_timeout(options);
  if (!options.allow_multicast) setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  // Symmetric windows and the device API need NCCL's cuMem allocator; some installations
  // leave it off by default ("Communicator does not support symmetric memory"). A value the
  // user set is kept.
  setenv("NCCL_CUMEM_ENABLE", "1", /*overwrite=*/0);
  if (options.device >= 0) TIDE_CUDA_CHECK(cudaSetDevice(options.device));
  TIDE_CUDA_CHECK(cudaGetDevice(&s.device));

  // 1. The main communicator.
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  ncclConfig_t main_config = s.config("tide.main");
  s.settle(s.main, ncclCommInitRankConfig(&s.main, world, id, rank, &main_config),
           "ncclCommInitRankConfig");
  // 2. Rail l: color l, key n, so rail rank n is world rank n L + l.
  ncclConfig_t rail_config = s.config("tide.rail");
  const ncclResult_t split = ncclCommSplit(s.main, s.topology.local_of(rank),
                                           s.topology.node_of(rank), &s.rail, &rail_config);
  s.settle(s.rail != nullptr ? s.rail : s.main, split, "ncclCommSplit");
  // 2b. Message lanes: NCCL's default channels (no cap), every rank at its world rank.
  for (int lane = 0; lane < options.message_lanes; ++lane) {
    ncclConfig_t lane_config = NCCL_CONFIG_INITIALIZER;
    lane_config.blocking = 0;
    lane_config.splitShare = 0;
    lane_config.commName = lane == 0 ? "tide.lane0" : "tide.lane1";
    ncclComm_t& c = s.lanes[lane];
    const ncclResult_t r = ncclCommSplit(s.main, 0, rank, &c, &lane_config);
    s.settle(c != nullptr ? c : s.main, r, "ncclCommSplit (message lane)");
  }
  // 3. The arena, one symmetric window in each domain.
  s.arena_bytes = rounded_arena_bytes(options.arena_bytes);
  if (options.external_arena != nullptr) {
    s.arena = options.external_arena;
    s.owns_arena = false;
  } else {
    s.settle(nullptr, ncclMemAlloc(&s.arena, static_cast<std::size_t>(s.arena_bytes)),
             "ncclMemAlloc");
  }
  s.settle(s.main,
           ncclCommWindowRegister(s.main, s.arena, static_cast<std::size_t>(s.arena_bytes),
                                  &s.main_window, NCCL_WIN_COLL_SYMMETRIC),
           "ncclCommWindowRegister(main, NCCL_WIN_COLL_SYMMETRIC)");
  s.settle(s.rail,
           ncclCommWindowRegister(s.rail, s.arena, static_cast<std::size_t>(s.arena_bytes),
                                  &s.rail_window, NCCL_WIN_COLL_SYMMETRIC),
           "ncclCommWindowRegister(rail, NCCL_WIN_COLL_SYMMETRIC)");
  // 4. LSA peer tables (the device API; TIDE_HAS_NCCL_HOST_PEER_POINTERS would allow the host
  // getters of NCCL >= 2.29 instead; the kernel path works on both).
  cudaStream_t stream = nullptr;
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  try {
    const auto settle = [&s](ncclComm_t c, ncclResult_t r, const char* call) {
      s.settle(c, r, call);
    };
    const auto sync = [&] { wait(stream, "LSA peer-pointer table kernel"); };
    s.main_peers = detail::make_lsa_peers(s.main, s.main_window, s.arena, stream, settle, sync);
    s.rail_peers = detail::make_lsa_peers(s.rail, s.rail_window, s.arena, stream, settle, sync);
    // 5. One-sided messages: agreed by every rank, then the lanes' windows.
    const auto agree_sync = [&] { wait(stream, "host RMA agreement"); };
    s.agree_host_rma(options.host_rma || env::flag("TIDE_NCCL_HOST_RMA"), stream, agree_sync);
    if (s.host_rma) s.register_lane_windows(stream, agree_sync);
  } catch (...) {
    (void)cudaStreamDestroy(stream);
    throw;
  }
  TIDE_CUDA_CHECK(cudaStreamDestroy(stream));
}

NcclFabric::~NcclFabric() = default;

int NcclFabric::rank() const {
  return state_->rank;
}
int NcclFabric::world() const {
  return state_->world;
}
const Topology& NcclFabric::topology() const {
  return state_->topology;
}
int NcclFabric::node() const {
  return state_->topology.node_of(state_->rank);
}
int NcclFabric::local() const {
  return state_->topology.local_of(state_->rank);
}
int NcclFabric::device() const {
  return state_->device;
}
ncclComm_t NcclFabric::main_comm() const {
  return state_->main;
}
ncclComm_t NcclFabric::rail_comm() const {
  return state_->rail;
}
void* NcclFabric::arena() const {
  return state_->arena;
}
std::int64_t NcclFabric::rounded_arena_bytes(std::int64_t arena_bytes) {
  return (arena_bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT *
         NCCL_WIN_REQUIRED_ALIGNMENT;
}

std::int64_t NcclFabric::arena_bytes() const {
  return state_->arena_bytes;
}
void NcclFabric::abort() noexcept {
  state_->abort_all();
}

bool NcclFabric::aborted() const {
  return state_->aborted;
}

void* NcclFabric::peer_arena(int peer) const {
  const auto& p = state_->main_peers;
  const int index = peer - (state_->rank - p.lsa_rank);
  if (index < 0 || index >= p.lsa_size) return nullptr;
  return p.host_table[static_cast<std::size_t>(index)];
}

void* NcclFabric::rail_peer_arena(int node_index) const {
  const auto& p = state_->rail_peers;
  const int index = node_index - (node() - p.lsa_rank);
  if (index < 0 || index >= p.lsa_size) return nullptr;
  return p.host_table[static_cast<std::size_t>(index)];
}

NcclFabricView NcclFabric::view() const {
  const State& s = *state_;
  return NcclFabricView{s.main_peers.device_table, s.rail_peers.device_table,
                        s.main_peers.lsa_size,     s.main_peers.lsa_rank,
                        s.rail_peers.lsa_size,     s.rail_peers.lsa_rank};
}

void NcclFabric::wait(cudaStream_t stream, std::string_view what) {
  state_->bounded(
      [&] {
        const cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaErrorNotReady) return false;
        TIDE_CUDA_CHECK(e);
        return true;
      },
      what);
}

void NcclFabric::wait(cudaEvent_t event, std::string_view what) {
  state_->bounded(
      [&] {
        const cudaError_t e = cudaEventQuery(event);
        if (e == cudaErrorNotReady) return false;
        TIDE_CUDA_CHECK(e);
        return true;
      },
      what);
}

void NcclFabric::wait_until(const std::function<bool()>& ready, std::string_view what) {
  state_->bounded(ready, what);
}

void NcclFabric::settle(ncclResult_t result, const char* call) {
  state_->settle(state_->main, result, call);
}

void NcclFabric::settle(ncclComm_t comm, ncclResult_t result, const char* call) {
  state_->settle(comm, result, call);
}

ncclComm_t NcclFabric::message_comm(int lane) const {
  if (lane < 0 || lane >= 2) return nullptr;
  return state_->lanes[lane];
}

bool NcclFabric::host_rma() const {
  return state_->host_rma;
}

const std::string& NcclFabric::host_rma_reason() const {
  return state_->host_rma_reason;
}

ncclWindow_t NcclFabric::lane_window(int lane) const {
  if (lane < 0 || lane >= 2) return nullptr;
  return state_->lane_windows[lane];
}

ncclWindow_t NcclFabric::lane_token_window(int lane) const {
  if (lane < 0 || lane >= 2) return nullptr;
  return state_->token_windows[lane];
}

std::uint64_t NcclFabric::next_token_number(int peer, int lane, bool sending) {
  const std::lock_guard<std::mutex> lock(state_->numbers_mutex);
  return ++state_->numbers[{peer, lane, sending}];
}

std::uint64_t* NcclFabric::token_area(int lane) const {
  if (lane < 0 || lane >= 2) return nullptr;
  return static_cast<std::uint64_t*>(state_->token_areas[lane]);
}

void NcclFabric::release() noexcept {
  state_->released = true;
}

}  // namespace tide::fabric
