// NOTE [peer liveness] (docs/runtime.md) with forked ranks over a FileStore: live
// peers stay alive across many periods, a peer on another host that is killed or stopped is
// reported by every other rank within timeout + period (its pid is never consulted: every rank
// is given a host of its own), a published failure travels within a period, an orderly close
// is never a death, and a local peer is still found by its pid. Which rank dies and when is
// drawn from a printed seed (TIDE_TEST_SEED replays it).
#include "peer_liveness.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_seed.hpp"
#include "tide/core/store.hpp"

namespace tide::runtime::detail {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTimeout{1000};  // period 100 ms
// What scheduling on a loaded machine may add to a bound (a store access, a late wake-up).
constexpr milliseconds kSlack{150};
constexpr char kPrefix[] = "job7";

// CLOCK_MONOTONIC: one clock for every process of this machine.
std::int64_t now_ms() {
  return std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
}

PeerLivenessOptions options(int rank, int world, std::vector<int> hosts) {
  PeerLivenessOptions o;
  o.rank = rank;
  o.world = world;
  o.hosts = std::move(hosts);
  o.key_prefix = kPrefix;
  o.timeout = kTimeout;
  return o;
}

// Every other host: rank r on host r, so every peer is reached through heartbeats only.
std::vector<int> own_hosts(int world) {
  std::vector<int> h(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    h[static_cast<std::size_t>(r)] = r;
  return h;
}

int threads_of_this_process() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

// Forks `world` ranks, each running body(rank, store directory) and writing what it returns to
// its report; a rank that dies writes none. `victim` (or -1) is killed with SIGKILL by the
// parent once every other rank finished (a stopped one must not outlive the test).
struct World {
  fs::path dir;
  std::vector<std::string> reports;
};

World run_world(int world, int victim,
                const std::function<std::string(int, const fs::path&)>& body) {
  char pattern[] = "/tmp/tide-liveness-test-XXXXXX";
  World w{fs::path(mkdtemp(pattern)), {}};
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      std::string r;
      try {
        r = body(rank, w.dir / "store");
      } catch (const std::exception& e) {
        r = std::string("exception: ") + e.what();
      }
      std::ofstream(w.dir / ("report." + std::to_string(rank))) << r;
      std::_Exit(0);
    }
    pids.push_back(pid);
  }
  for (int rank = 0; rank < world; ++rank) {
    if (rank != victim) waitpid(pids[static_cast<std::size_t>(rank)], nullptr, 0);
  }
  if (victim >= 0) {
    kill(pids[static_cast<std::size_t>(victim)], SIGKILL);
    waitpid(pids[static_cast<std::size_t>(victim)], nullptr, 0);
  }
  for (int rank = 0; rank < world; ++rank) {
    std::ifstream in(w.dir / ("report." + std::to_string(rank)));
    std::stringstream s;
    s << in.rdbuf();
    w.reports.push_back(s.str());
  }
  return w;
}

// The keys a FileStore holds (file names are hex-encoded keys).
std::vector<std::string> store_keys(const fs::path& store) {
  std::vector<std::string> keys;
  for (const auto& e : fs::directory_iterator(store)) {
    const std::string name = e.path().filename().string();
    std::string key;
    for (std::size_t i = 0; i + 1 < name.size(); i += 2)
      key += static_cast<char>(std::stoi(name.substr(i, 2), nullptr, 16));
    keys.push_back(key);
  }
  return keys;
}

// The count of rank r's beat key ("<count> <state>").
std::int64_t beat_count(FileStore& store, int r) {
  return std::stoll(
      store.get(std::string(kPrefix) + "/liveness/beat/" + std::to_string(r), kTimeout));
}

// Polls remote_verdict() until it holds or `until`; "found <ms after kill> <what>" or "none".
std::string watch(const PeerLiveness& l, const fs::path& kill_file, std::int64_t until) {
  while (now_ms() < until) {
    if (const std::optional<DeadPeer> d = l.remote_verdict()) {
      const std::int64_t seen = now_ms();
      std::ifstream in(kill_file);
      std::int64_t killed = 0;
      if (!(in >> killed)) return "found before the victim stopped: " + d->what;
      return "found " + std::to_string(seen - killed) + " " + d->what;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  return "none";
}

// (a) and (c): four ranks on two hosts (two by pid, two by heartbeat each) stay alive for five
// timeouts; one closes after two and its process ends, and nobody takes that for a death. The
// thread is joined at close, and only the job's keys are in the store.
TEST(PeerLiveness, LivePeersStayAliveAndAnOrderlyCloseIsNoDeath) {
  const testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  const int world = 4;
  const int closer = std::uniform_int_distribution<int>(0, world - 1)(rng);
  std::printf("closer: rank %d\n", closer);
  const std::int64_t start = now_ms();
  World w = run_world(world, -1, [&](int rank, const fs::path& dir) -> std::string {
    auto store = std::make_shared<FileStore>(dir);
    const int threads = threads_of_this_process();
    auto l = std::make_unique<PeerLiveness>(store, options(rank, world, {0, 0, 1, 1}));
    if (!l->beating() || l->period() != milliseconds(100)) return "not beating every 100 ms";
    const int remote = rank < 2 ? 2 : 0;  // a peer on the other host
    const std::int64_t first = beat_count(*store, remote);
    const std::int64_t close_at = start + 2 * kTimeout.count();
    const std::int64_t until = start + 5 * kTimeout.count();
    std::int64_t later = -1;
    while (now_ms() < (rank == closer ? close_at : until)) {
      if (const std::optional<DeadPeer> d = l->dead()) return "reported: " + d->what;
      if (later < 0 && now_ms() > start + kTimeout.count() && remote != closer)
        later = beat_count(*store, remote);
      std::this_thread::sleep_for(milliseconds(2));
    }
    l.reset();
    if (threads_of_this_process() != threads) return "the heartbeat thread was not joined";
    if (rank != closer && remote != closer && later < first + 5) {
      return "rank " + std::to_string(remote) + "'s beats went from " + std::to_string(first) +
             " to " + std::to_string(later) + " in a timeout";
    }
    return "ok";
  });
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(w.reports[static_cast<std::size_t>(r)], "ok") << "rank " << r;
  FileStore store(w.dir / "store");
  const std::string closed =
      store.get(std::string(kPrefix) + "/liveness/beat/" + std::to_string(closer), kTimeout);
  EXPECT_NE(closed.find(" closed"), std::string::npos) << closed;
  for (const std::string& key : store_keys(w.dir / "store"))
    EXPECT_EQ(key.rfind(std::string(kPrefix) + "/liveness/", 0), 0u) << key;
  fs::remove_all(w.dir);
}

// (b) and (d): a peer on another host that stops beating, by SIGKILL or SIGSTOP (a stall: its
// process lives on, so no pid check could find it), is reported by every other rank, naming
// it, after at least timeout - 2 periods and at most timeout + period.
void expect_silent_peer_reported(int signal) {
  const testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  const int world = 3;
  const int victim = std::uniform_int_distribution<int>(0, world - 1)(rng);
  const int delay = std::uniform_int_distribution<int>(200, 1500)(rng);
  std::printf("victim: rank %d, stops %d ms after the start\n", victim, delay);
  World w = run_world(world, victim, [&](int rank, const fs::path& dir) -> std::string {
    auto store = std::make_shared<FileStore>(dir);
    PeerLiveness l(store, options(rank, world, own_hosts(world)));
    const fs::path kill_file = dir.parent_path() / "killed";
    if (rank == victim) {
      std::this_thread::sleep_for(milliseconds(delay));
      std::ofstream(kill_file) << now_ms();
      raise(signal);
      std::this_thread::sleep_for(std::chrono::seconds(60));  // SIGSTOP: until the parent kills
      return "not stopped";
    }
    return watch(l, kill_file, now_ms() + delay + 3 * kTimeout.count());
  });
  const std::int64_t period = liveness_period(kTimeout).count();
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    const std::string& report = w.reports[static_cast<std::size_t>(r)];
    ASSERT_EQ(report.rfind("found ", 0), 0u) << "rank " << r << ": " << report;
    std::istringstream in(report.substr(6));
    std::int64_t after = 0;
    in >> after;
    std::printf("rank %d reported rank %d %lld ms after it stopped\n", r, victim,
                static_cast<long long>(after));
    EXPECT_GE(after, kTimeout.count() - 2 * period) << report;
    EXPECT_LE(after, kTimeout.count() + period + kSlack.count()) << report;
    EXPECT_NE(report.find("rank " + std::to_string(victim) + " died or stalled"), std::string::npos)
        << report;
    EXPECT_NE(report.find("host '"), std::string::npos) << report;
    EXPECT_NE(report.find("has not advanced for "), std::string::npos) << report;
    EXPECT_NE(report.find("restart the job"), std::string::npos) << report;
  }
  fs::remove_all(w.dir);
}

TEST(PeerLiveness, AKilledPeerOnAnotherHostIsReportedWithinTimeoutAndPeriod) {
  expect_silent_peer_reported(SIGKILL);
}

TEST(PeerLiveness, AStoppedPeerOnAnotherHostIsReportedWithinTimeoutAndPeriod) {
  expect_silent_peer_reported(SIGSTOP);
}

// A published failure reaches every rank on another host within a period (and a read), with
// its reason, long before the timeout; closing afterwards keeps the failure, not a close.
TEST(PeerLiveness, AFailureMarkTravelsWithinAPeriod) {
  const testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  const int world = 3;
  const int failing = std::uniform_int_distribution<int>(0, world - 1)(rng);
  std::printf("failing: rank %d\n", failing);
  World w = run_world(world, -1, [&](int rank, const fs::path& dir) -> std::string {
    auto store = std::make_shared<FileStore>(dir);
    PeerLiveness l(store, options(rank, world, own_hosts(world)));
    const fs::path kill_file = dir.parent_path() / "killed";
    if (rank == failing) {
      std::this_thread::sleep_for(milliseconds(300));
      std::ofstream(kill_file) << now_ms();
      l.mark_failed("rank " + std::to_string(rank) + " timed out in call 7");
      std::this_thread::sleep_for(milliseconds(500));  // the peers read it before the close
      return "ok";
    }
    const std::string seen = watch(l, kill_file, now_ms() + 2 * kTimeout.count());
    const std::optional<DeadPeer> d = l.remote_verdict();
    return seen + (d && d->failed ? " [failed]" : " [not failed]");
  });
  const std::int64_t period = liveness_period(kTimeout).count();
  for (int r = 0; r < world; ++r) {
    const std::string& report = w.reports[static_cast<std::size_t>(r)];
    if (r == failing) {
      EXPECT_EQ(report, "ok");
      continue;
    }
    ASSERT_EQ(report.rfind("found ", 0), 0u) << "rank " << r << ": " << report;
    const std::int64_t after = std::stoll(report.substr(6));
    EXPECT_LE(after, period + kSlack.count()) << report;
    EXPECT_NE(report.find("rank " + std::to_string(failing) + " failed (host '"), std::string::npos)
        << report;
    EXPECT_NE(report.find("timed out in call 7 [failed]"), std::string::npos) << report;
  }
  FileStore store(w.dir / "store");
  const std::string last =
      store.get(std::string(kPrefix) + "/liveness/beat/" + std::to_string(failing), kTimeout);
  EXPECT_NE(last.find(" failed rank "), std::string::npos) << last;
  fs::remove_all(w.dir);
}

// Peers of one host: no heartbeat thread and no store after the construction; a killed peer
// is found at once by its pid.
TEST(PeerLiveness, ALocalPeerIsFoundByItsPid) {
  const int world = 3;
  const int victim = 1;
  World w = run_world(world, victim, [&](int rank, const fs::path& dir) -> std::string {
    auto store = std::make_shared<FileStore>(dir);
    PeerLiveness l(store, options(rank, world, {}));
    if (l.beating()) return "beating on one host";
    if (store.use_count() != 1) return "the store is held";
    const fs::path kill_file = dir.parent_path() / "killed";
    if (rank == victim) {
      std::this_thread::sleep_for(milliseconds(200));
      std::ofstream(kill_file) << now_ms();
      raise(SIGKILL);
    }
    const std::int64_t until = now_ms() + 2 * kTimeout.count();
    std::string found = "none";
    while (now_ms() < until && found == "none") {
      if (const std::optional<DeadPeer> d = l.dead()) {
        std::ifstream in(kill_file);
        std::int64_t killed = 0;
        in >> killed;
        found = (now_ms() - killed < 100 ? "ok: " : "late: ") + d->what;
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
    // Without heartbeats a local peer's close is not known (NOTE [peer liveness] 3): no rank
    // ends its process before every other one has looked.
    std::ofstream(dir.parent_path() / ("found." + std::to_string(rank))) << found;
    for (int r = 0; r < world && now_ms() < until; ++r) {
      while (r != victim && !fs::exists(dir.parent_path() / ("found." + std::to_string(r))) &&
             now_ms() < until)
        std::this_thread::sleep_for(milliseconds(1));
    }
    return found;
  });
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    const std::string& report = w.reports[static_cast<std::size_t>(r)];
    EXPECT_EQ(report.rfind("ok: rank 1 died (process ", 0), 0u) << "rank " << r << ": " << report;
  }
  fs::remove_all(w.dir);
}

}  // namespace
}  // namespace tide::runtime::detail
