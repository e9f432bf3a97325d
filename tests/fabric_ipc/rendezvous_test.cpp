// The rendezvous transports: the ipc one (NOTE [ipc rendezvous transport]) between forked
// processes over the ipc fabric with emulated hosts, and the release of both transports' device
// waits (MessageTransport::release). Without a GPU: the window arithmetic and the fabric's
// argument checks. The parent never touches CUDA (no context may exist before fork); each
// case forks its ranks and asserts on their reports.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/test_seed.hpp"
#include "forked_ranks.hpp"
#include "tide/core/error.hpp"
#include "tide/core/store.hpp"
#include "tide/fabric/ipc_fabric.hpp"
#include "tide/fabric/runtime_window.hpp"
#include "tide/testing/rendezvous_transport.hpp"
#include "tide/transport/ipc_rendezvous.hpp"

namespace tide::fabric {
namespace {

using tide::testing::RendezvousTransport;
using transport::IpcRendezvousTransport;

const auto kTimeout = std::chrono::seconds(60);

bool gpu_present() {
  return std::filesystem::exists("/dev/nvidiactl");
}

std::vector<std::uint8_t> pattern(std::uint64_t seed, int from, int message, std::size_t bytes) {
  std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(from) * 101 +
                      static_cast<std::uint64_t>(message));
  std::vector<std::uint8_t> v(bytes);
  for (auto& b : v)
    b = static_cast<std::uint8_t>(rng());
  return v;
}

struct Rank {
  int rank = 0;
  int world = 2;
  std::uint64_t seed = 0;
  IpcFabric* fabric = nullptr;
  IpcExchange exchange;
};

// Forks `world` ranks (hosts: one per rank) that each run `body` over the fabric; every rank's
// report ("ok", "skip: why", or the failure).
std::vector<std::string> run_ranks(int world, const std::function<std::string(Rank&)>& body) {
  const std::uint64_t seed = testing::pick_test_seed();
  std::printf("ipc rendezvous: %d processes, %s\n", world, testing::seed_trace(seed).c_str());
  return testing::run_forked_ranks(
      world, "rendezvous-test", [&](int rank, const std::filesystem::path& dir) {
        FileStore store(dir / "store");
        Rank me;
        me.rank = rank;
        me.world = world;
        me.seed = seed;
        me.exchange = [&](const std::string& step, const std::string& mine) {
          return all_gather_values(store, "ipc/" + step, rank, world, mine, kTimeout);
        };
        IpcFabricOptions o;
        o.device = 0;
        o.arena_bytes = 4096;
        o.signal_words = 4;
        for (int h = 0; h < world; ++h)
          o.hosts.push_back(h);
        IpcFabric fabric(rank, world, o, me.exchange);
        me.fabric = &fabric;
        std::string r = body(me);
        me.exchange("done", "");  // nobody unmaps while a peer still copies
        return r;
      });
}

void expect_ok(const std::vector<std::string>& reports) {
  if (reports[0].rfind("skip:", 0) == 0) GTEST_SKIP() << reports[0];
  for (std::size_t r = 0; r < reports.size(); ++r)
    EXPECT_EQ(reports[r], "ok") << "rank " << r;
}

struct Device {
  void* p = nullptr;
  explicit Device(std::size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  ~Device() { (void)cudaFree(p); }
};

// Message sizes: a token, odd bytes, a page, and more than one bounce buffer (chunks).
const std::vector<std::size_t> kSizes = {8, 1003, 4096,
                                         static_cast<std::size_t>(2 * kMessageBounceBytes + 4099)};

// Every rank sends each size to every other rank and receives each from every other, in an
// order that cannot cross: for each pair (a < b), a sends then receives, b receives then
// sends. Both channel sets.
std::string exchange_all(Rank& me) {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "no stream";
  std::string result = "ok";
  for (int set = 0; set < kMessageChannelSets && result == "ok"; ++set) {
    IpcRendezvousTransport t(*me.fabric, set, std::uint64_t{20} * 1000 * 1000 * 1000);
    std::vector<std::unique_ptr<Device>> keep;
    struct Check {
      void* dst;
      int from;
      int message;
      std::size_t bytes;
    };
    std::vector<Check> checks;
    int message = 0;
    for (const std::size_t bytes : kSizes) {
      ++message;
      for (int peer = 0; peer < me.world; ++peer) {
        if (peer == me.rank) continue;
        auto src = std::make_unique<Device>(bytes);
        auto dst = std::make_unique<Device>(bytes);
        const auto data =
            pattern(me.seed + static_cast<std::uint64_t>(set), me.rank, message, bytes);
        cudaMemcpy(src->p, data.data(), bytes, cudaMemcpyHostToDevice);
        cudaMemset(dst->p, 0xFF, bytes);  // poisoned
        if (me.rank < peer) {
          t.send(me.rank, peer, src->p, bytes, stream);
          t.recv(me.rank, peer, dst->p, bytes, stream);
        } else {
          t.recv(me.rank, peer, dst->p, bytes, stream);
          t.send(me.rank, peer, src->p, bytes, stream);
        }
        checks.push_back({dst->p, peer, message, bytes});
        keep.push_back(std::move(src));
        keep.push_back(std::move(dst));
      }
    }
    if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
      return std::string("the stream failed: ") + cudaGetErrorString(e);
    for (const Check& c : checks) {
      std::vector<std::uint8_t> got(c.bytes);
      cudaMemcpy(got.data(), c.dst, c.bytes, cudaMemcpyDeviceToHost);
      if (got != pattern(me.seed + static_cast<std::uint64_t>(set), c.from, c.message, c.bytes)) {
        result = "set " + std::to_string(set) + ": message " + std::to_string(c.message) + " (" +
                 std::to_string(c.bytes) + " bytes) from rank " + std::to_string(c.from) +
                 " differs";
        break;
      }
    }
  }
  (void)cudaStreamDestroy(stream);
  return result;
}

TEST(IpcRendezvousGpu, ThreeProcessesExchangeEveryPairBitwise) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  expect_ok(run_ranks(3, exchange_all));
}

// A send waits for its receive (NOTE [ipc rendezvous transport], send step 1); release() ends a
// send whose receive never comes, and the stream drains well before the bound.
std::string send_waits_then_release(Rank& me) {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "no stream";
  std::string result = "ok";
  {
    IpcRendezvousTransport t(*me.fabric, 0, std::uint64_t{30} * 1000 * 1000 * 1000);
    Device a(4096), b(4096);
    cudaMemset(a.p, 1, 4096);
    cudaDeviceSynchronize();
    if (me.rank == 0) {
      // Message 1: rank 1 posts its receive only after rank 0 saw the send held.
      t.send(0, 1, a.p, 4096, stream);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (cudaStreamQuery(stream) != cudaErrorNotReady) result = "the send ran without a receive";
      me.exchange("held", "");
      if (cudaStreamSynchronize(stream) != cudaSuccess) result = "message 1 failed";
      // Message 2: never received; release.
      t.send(0, 1, a.p, 4096, stream);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (result == "ok" && cudaStreamQuery(stream) != cudaErrorNotReady)
        result = "the unmatched send completed";
      const auto start = std::chrono::steady_clock::now();
      t.release();
      const cudaError_t e = cudaStreamSynchronize(stream);
      const auto took = std::chrono::steady_clock::now() - start;
      if (result == "ok" && e != cudaSuccess)
        result = std::string("after release: ") + cudaGetErrorString(e);
      if (result == "ok" && took > std::chrono::seconds(5)) result = "the release took too long";
    } else {
      me.exchange("held", "");
      t.recv(1, 0, b.p, 4096, stream);
      if (cudaStreamSynchronize(stream) != cudaSuccess) result = "receive 1 failed";
      std::vector<std::uint8_t> got(4096);
      cudaMemcpy(got.data(), b.p, 4096, cudaMemcpyDeviceToHost);
      if (result == "ok" && got != std::vector<std::uint8_t>(4096, 1)) result = "message 1 differs";
    }
    me.exchange("released", "");
  }
  (void)cudaStreamDestroy(stream);
  return result;
}

TEST(IpcRendezvousGpu, ASendWaitsForItsReceiveAndReleaseEndsIt) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  expect_ok(run_ranks(2, send_waits_then_release));
}

// The in-process transport: release() ends a receive whose send never comes and a send whose
// receive never comes (the runner's release_waits() after a fail-stop abort), without the bound.
TEST(RendezvousTransportGpu, ReleaseEndsPendingWaits) {
  if (!gpu_present()) GTEST_SKIP() << "no GPU on this machine";
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 0;
    try {
      cudaStream_t a = nullptr, b = nullptr;
      cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
      cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
      RendezvousTransport t(2, 0, std::uint64_t{30} * 1000 * 1000 * 1000);
      Device x(64), y(64);
      t.send(0, 1, x.p, 64, a);  // never received
      t.recv(0, 1, y.p, 64, b);  // never sent
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (cudaStreamQuery(a) != cudaErrorNotReady || cudaStreamQuery(b) != cudaErrorNotReady)
        code = 2;
      const auto start = std::chrono::steady_clock::now();
      t.release();
      if (cudaStreamSynchronize(a) != cudaSuccess || cudaStreamSynchronize(b) != cudaSuccess)
        code = 3;
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5)) code = 4;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      code = 5;
    }
    std::_Exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: not held, 3: stream failed, 4: slow, 5: threw";
}

// Without a GPU: the window with a message area, and the fabric's checks of its hosts.
TEST(IpcRendezvousWindow, MessageAreaFollowsTheSignalWords) {
  IpcFabricOptions o;
  o.arena_bytes = 3 * 4096 + 5;
  o.signal_words = 7;
  EXPECT_EQ(ipc_window_bytes(o, 4), window_bytes(o.arena_bytes, o.signal_words));
  o.hosts = {0, 0, 0, 0};  // one host: no message area
  EXPECT_EQ(ipc_window_bytes(o, 4), window_bytes(o.arena_bytes, o.signal_words));
  o.hosts = {0, 0, 1, 1};
  EXPECT_EQ(window_message_offset(o.arena_bytes, o.signal_words) % kWindowPage, 0);
  EXPECT_GE(window_message_offset(o.arena_bytes, o.signal_words),
            window_bytes(o.arena_bytes, o.signal_words));
  EXPECT_EQ(ipc_window_bytes(o, 4),
            window_message_offset(o.arena_bytes, o.signal_words) + message_area_bytes(4));
  EXPECT_EQ(message_area_bytes(4), kMessageChannelSets * 4 * (kWindowPage + kMessageBounceBytes));
}

TEST(IpcRendezvousWindow, RefusesHostsOfAnotherWorld) {
  IpcFabricOptions o;
  o.arena_bytes = 4096;
  o.hosts = {0, 1, 1};
  const IpcExchange never = [](const std::string&, const std::string&) -> std::vector<std::string> {
    ADD_FAILURE() << "the exchange ran before the arguments were checked";
    return {};
  };
  try {
    IpcFabric f(0, 2, o, never);
    ADD_FAILURE() << "accepted 3 host indices for 2 ranks";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("3 host indices for a world of 2"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tide::fabric
