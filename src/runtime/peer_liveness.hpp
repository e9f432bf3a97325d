// Peer liveness across hosts (NOTE [peer liveness]): which peer of a communicator died or
// stalled, named, without /proc pids for peers on other hosts. CPU only: the host and the CUDA
// communicators both use it.
//
// Contract: a peer on this rank's host is checked by its pid; a peer on another host (hosts[r],
// emulated hosts included) by its heartbeat key `<prefix>/liveness/beat/<rank>` in the store,
// which one thread per rank sets and reads every `period` where some peer is remote. A remote
// peer is dead when its key reads "failed <reason>" (mark_failed) or its count stood still
// longer than `timeout`: reported between t + timeout - period and t + timeout + period after
// its last beat t. A closed peer (the destructor writes "<count> closed") is never reported.
// The first remote verdict is kept, handed once to `on_dead` from the heartbeat thread, and
// returned by dead() and remote_verdict() from then on. A heartbeating liveness keeps the
// store until it closes: close a communicator spanning hosts before its store. The steps, the
// store's load and where the verdict acts: NOTE [peer liveness] in docs/runtime.md.
//
// Thread-safety: dead(), remote_verdict() and mark_failed() may be called from any thread
// while the object lives; the destructor must not race with them (stop their callers first).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tide/core/store.hpp"

namespace tide::runtime::detail {

struct PeerLivenessOptions {
  int rank = 0;
  int world = 1;
  std::vector<int> hosts;           // rank r's host index (NOTE [peer liveness] 1); empty: one host
  std::string key_prefix = "tide";  // the communicator's; keys go under <prefix>/liveness
  std::chrono::milliseconds timeout{std::chrono::seconds(150)};  // the silence that is death
};

// A communicator's liveness timeout: half its call timeout, so that a call waiting on a dead
// peer names it before the call's own timeout fires. The heartbeat period: a tenth of the
// liveness timeout, between 1 ms and 10 s.
std::chrono::milliseconds liveness_timeout(std::chrono::milliseconds call_timeout);
std::chrono::milliseconds liveness_period(std::chrono::milliseconds timeout);

struct DeadPeer {
  int rank = -1;
  std::string host;                     // its host's name
  std::chrono::milliseconds silent{0};  // how long its heartbeat had not advanced (0: pid, failed)
  bool failed = false;                  // it published a failure (mark_failed)
  std::string what;  // one line: "rank R died ..." naming the host, the silence and what to do
};

class PeerLiveness {
 public:
  using OnDead = std::function<void(const DeadPeer&)>;

  // Collective: every rank of the world constructs it with the same options but its rank.
  PeerLiveness(std::shared_ptr<Store> store, PeerLivenessOptions options, OnDead on_dead = {});
  ~PeerLiveness();
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  // A dead local peer (pids, checked now) or else the heartbeat verdict.
  std::optional<DeadPeer> dead() const;
  // The heartbeat verdict alone (cheap: no /proc read, no store access).
  std::optional<DeadPeer> remote_verdict() const;
  // This rank failed: its next beat (at once) says "failed <reason>". The first reason wins.
  void mark_failed(const std::string& reason) noexcept;

  bool beating() const { return beating_; }  // some peer is on another host
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  std::chrono::milliseconds period() const { return period_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Peer {
    int rank = 0;
    std::string host;
    int pid = 0;
    bool local = false;
    std::string last;         // the key's value at the last read
    Clock::time_point read;   // the last read
    Clock::time_point since;  // the last read that saw the previous value (NOTE 3 (b))
    std::string store_error;  // the last read's failure, if it failed
  };

  void loop();
  void publish(const std::string& state);
  std::optional<DeadPeer> read_peers();  // the thread's reads; the first verdict
  std::string beat_key(int rank) const;

  PeerLivenessOptions options_;
  std::chrono::milliseconds period_;
  std::shared_ptr<Store> store_;  // held only while beating
  OnDead on_dead_;
  bool beating_ = false;
  std::vector<Peer> peers_;  // every other rank, in rank order
  // Per peer: it closed (NOTE [peer liveness] 4), set by the thread's reads and by dead(); a
  // local one's process is gone without a close (dead() reads its key once).
  mutable std::vector<std::atomic<bool>> closed_;
  mutable std::vector<std::atomic<bool>> gone_;
  std::int64_t beats_ = 0;  // the thread's, then the destructor's

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool failed_pending_ = false;  // mark_failed's reason not yet published
  std::string failed_;           // this rank's failure, or empty
  std::optional<DeadPeer> verdict_;
  std::atomic<bool> judged_{false};  // verdict_ is set (until then no check takes the lock)
  std::thread thread_;
};

}  // namespace tide::runtime::detail
