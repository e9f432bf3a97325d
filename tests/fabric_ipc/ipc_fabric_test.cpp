// The ipc fabric (NOTE [ipc fabric]): argument checks without a GPU; with one, P forked
// processes (which may share the GPU) map each other's windows with each kind of handle, read
// every peer's arena bytes and add to every peer's signal words. The parent process never
// touches CUDA (a CUDA context must not exist before fork), so the binary runs its GPU cases
// on any machine with a GPU and skips them elsewhere.
#include "tide/fabric/ipc_fabric.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../support/test_seed.hpp"
#include "forked_ranks.hpp"
#include "tide/core/error.hpp"
#include "tide/core/store.hpp"
#include "tide/fabric/ipc_memory.hpp"
#include "tide/fabric/runtime_window.hpp"

namespace tide::fabric {
namespace {

const auto kTimeout = std::chrono::seconds(60);

IpcExchange no_exchange() {
  return [](const std::string&, const std::string&) -> std::vector<std::string> {
    ADD_FAILURE() << "the exchange ran before the arguments were checked";
    return {};
  };
}

TEST(IpcFabric, RefusesBadArgumentsBeforeAnyExchange) {
  IpcFabricOptions o;
  o.arena_bytes = 4096;
  EXPECT_THROW(IpcFabric(2, 2, o, no_exchange()), InvalidArgument);
  EXPECT_THROW(IpcFabric(-1, 2, o, no_exchange()), InvalidArgument);
  EXPECT_THROW(IpcFabric(0, 0, o, no_exchange()), InvalidArgument);
  o.arena_bytes = 0;
  EXPECT_THROW(IpcFabric(0, 2, o, no_exchange()), InvalidArgument);
  o.arena_bytes = 4096;
  o.signal_words = 0;
  EXPECT_THROW(IpcFabric(0, 2, o, no_exchange()), InvalidArgument);
  o.signal_words = 4;
  EXPECT_THROW(IpcFabric(0, 2, o, IpcExchange{}), InvalidArgument);
}

// A bad TIDE_IPC_HANDLES is refused before any CUDA call (so also on machines without a GPU).
TEST(IpcFabric, RefusesAnUnknownHandleSetting) {
  const char* before = std::getenv("TIDE_IPC_HANDLES");
  const std::string saved = before != nullptr ? before : "";
  setenv("TIDE_IPC_HANDLES", "shm", 1);
  try {
    (void)choose_ipc_handles(0);
    ADD_FAILURE() << "TIDE_IPC_HANDLES=shm was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("fd, cuda-ipc"), std::string::npos) << e.what();
  }
  if (before != nullptr) {
    setenv("TIDE_IPC_HANDLES", saved.c_str(), 1);
  } else {
    unsetenv("TIDE_IPC_HANDLES");
  }
}

TEST(IpcFabric, HandleNames) {
  EXPECT_EQ(ipc_handles_name(IpcHandles::kPosixFd), "fd");
  EXPECT_EQ(ipc_handles_name(IpcHandles::kCudaIpc), "cuda-ipc");
}

bool gpu_present() {
  return std::filesystem::exists("/dev/nvidiactl");
}

std::vector<std::uint8_t> pattern(std::uint64_t seed, int rank, std::int64_t bytes) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(rank));
  std::vector<std::uint8_t> v(static_cast<std::size_t>(bytes));
  for (auto& b : v)
    b = static_cast<std::uint8_t>(rng() | 1);  // never zero
  return v;
}

// One rank's process: "ok", "skip: why" or the failure, written to `report`.
std::string run_rank(int rank, int world, const std::filesystem::path& dir, std::uint64_t seed,
                     bool own_window) {
  FileStore store(dir / "store");
  const IpcExchange exchange = [&](const std::string& step, const std::string& mine) {
    return all_gather_values(store, "ipc/" + step, rank, world, mine, kTimeout);
  };
  const std::int64_t arena = 3 * 4096 + 512;  // not a page multiple: the words' offset rounds
  const std::int64_t words = 5;
  IpcFabricOptions o;
  o.device = 0;
  o.arena_bytes = arena;
  o.signal_words = words;
  void* window = nullptr;
  if (!own_window) {  // the caller's window, e.g. torch's MemPool over tide_ipc_mem_alloc
    const std::int64_t bytes = window_bytes(arena, words);
    // An offset into the allocation, as a pool's block need not start it.
    std::byte* base = static_cast<std::byte*>(ipc_allocate(bytes + 8192, 0));
    window = base + 8192;
    o.window = window;
    if (!find_ipc_allocation(window, bytes)) return "the allocation was not recorded";
    if (find_ipc_allocation(base, bytes + 8192 + ipc_allocation_bytes(1, 0))) {
      return "find_ipc_allocation accepted a range past the allocation";
    }
  }
  std::string result = "ok";
  {
    IpcFabric fabric(rank, world, o, exchange);
    const std::vector<std::uint8_t> mine = pattern(seed, rank, arena);
    if (cudaMemcpy(fabric.pointer(program::Buffer{rank, program::Space::kArena, 0}), mine.data(),
                   mine.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
      return "writing the own arena failed";
    }
    std::vector<std::uint64_t> zero(static_cast<std::size_t>(words), 0);
    cudaMemcpy(fabric.signals(rank), zero.data(), zero.size() * 8, cudaMemcpyHostToDevice);
    exchange("written", "");
    for (int peer = 0; peer < world && result == "ok"; ++peer) {
      const auto* p = fabric.pointer(program::Buffer{peer, program::Space::kArena, 0});
      if (p == nullptr || fabric.bytes(program::Buffer{peer, program::Space::kArena, 0}) != arena) {
        result = "no pointer to rank " + std::to_string(peer);
        break;
      }
      std::vector<std::uint8_t> got(static_cast<std::size_t>(arena), 0);
      cudaMemcpy(got.data(), p, got.size(), cudaMemcpyDeviceToHost);
      if (got != pattern(seed, peer, arena)) result = "rank " + std::to_string(peer) + " differs";
      // Word `rank` of every peer: this rank's mark (the executor adds; a store is enough here).
      const std::uint64_t mark = 1000 + static_cast<std::uint64_t>(rank);
      cudaMemcpy(fabric.signals(peer) + rank % words, &mark, 8, cudaMemcpyHostToDevice);
    }
    cudaDeviceSynchronize();
    exchange("marked", "");
    std::vector<std::uint64_t> got(static_cast<std::size_t>(words), 0);
    cudaMemcpy(got.data(), fabric.signals(rank), got.size() * 8, cudaMemcpyDeviceToHost);
    for (int peer = 0; peer < world && peer < words && result == "ok"; ++peer) {
      if (got[static_cast<std::size_t>(peer)] != 1000 + static_cast<std::uint64_t>(peer)) {
        result = "signal word " + std::to_string(peer) + " holds " +
                 std::to_string(got[static_cast<std::size_t>(peer)]);
      }
    }
    if (result == "ok") result += " " + std::string(ipc_handles_name(fabric.handles()));
    exchange("done", "");  // nobody unmaps while a peer still reads
  }
  if (window != nullptr) ipc_free(static_cast<std::byte*>(window) - 8192);
  return result;
}

// Forks `world` ranks with TIDE_IPC_HANDLES=handles; every rank's report.
std::vector<std::string> run_world(int world, const char* handles, bool own_window) {
  const std::uint64_t seed = testing::pick_test_seed();
  std::printf("ipc fabric: %d processes, handles %s, %s\n", world, handles,
              testing::seed_trace(seed).c_str());
  return testing::run_forked_ranks(world, "ipc-test",
                                   [&](int rank, const std::filesystem::path& dir) {
                                     setenv("TIDE_IPC_HANDLES", handles, 1);
                                     (void)choose_ipc_handles(0);
                                     return run_rank(rank, world, dir, seed, own_window);
                                   });
}

void expect_world(int world, const char* handles, bool own_window) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  const std::vector<std::string> reports = run_world(world, handles, own_window);
  if (reports[0].rfind("skip:", 0) == 0) GTEST_SKIP() << reports[0];
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(reports[static_cast<std::size_t>(r)], std::string("ok ") + handles) << "rank " << r;
}

TEST(IpcFabricGpu, ThreeProcessesFdHandles) {
  expect_world(3, "fd", true);
}
TEST(IpcFabricGpu, ThreeProcessesCudaIpcHandles) {
  expect_world(3, "cuda-ipc", true);
}
TEST(IpcFabricGpu, CallersWindowAtAnOffsetFd) {
  expect_world(2, "fd", false);
}
TEST(IpcFabricGpu, CallersWindowAtAnOffsetCudaIpc) {
  expect_world(2, "cuda-ipc", false);
}

}  // namespace
}  // namespace tide::fabric
