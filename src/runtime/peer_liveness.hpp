// Peer liveness across hosts (NOTE [peer liveness]): which peer of a communicator died or
// stalled, named, without /proc pids for peers on other hosts. CPU only: the host and the CUDA
// communicators both use it.
//
// NOTE [peer liveness]
// 1. Who is checked how. Rank r's host is hosts[r] (the communicator's host indices, NOTE
//    [runtime] 9; emulated hosts count as hosts). A peer on this rank's host is checked by its
//    pid (/proc, process_alive), as before: fast, and no store traffic. A peer on another host
//    is checked by its heartbeat through the store: its pid means nothing here.
// 2. Heartbeats. Only where some peer is on another host, each rank runs one thread that,
//    every `period`, sets its key `<prefix>/liveness/beat/<rank>` to "<count> alive" (count
//    advances by one per beat) and reads the keys of its peers on other hosts that have not
//    closed. The keys exist before the first read: each rank sets its first beat before the
//    construction's exchange (`<prefix>/liveness/hello`, host name and pid), so no read blocks
//    for a missing key. Times are this rank's steady clock only: no clock is compared across
//    hosts.
// 3. Dead. A remote peer is dead when (a) its key reads "failed <reason>" (mark_failed: it
//    aborted, and the reason travels), or (b) its count has not changed for longer than
//    `timeout`, counted from the last read that saw the previous count (so the silence is
//    never under-estimated). A peer whose last beat was at t is therefore reported by
//    t + timeout + period at the latest (one read per period), and not before
//    t + timeout - period (its beats are a period apart). A local peer is dead when its
//    process is gone, a zombie or dead, and (where this rank beats, so that it reads the store)
//    its key does not say it closed; without heartbeats a local peer's close is not known,
//    as before (a gone peer matters to a rank only while a call of it waits). The first remote
//    verdict is kept (reads stop), handed once to `on_dead` from the heartbeat thread, and returned
//    by dead() and remote_verdict() from then on; this rank's own beats go on until it closes.
// 4. Orderly close. The destructor stops and joins the thread and sets the key to
//    "<count> closed" (or "failed <reason>" after mark_failed): a closed peer is never
//    reported, whatever happens to its process afterwards. The keys live under the
//    communicator's prefix: one beat key per rank, overwritten in place, and the hello keys.
// 5. The store. Only a heartbeating liveness keeps the store (the caller's, e.g. torch's
//    TCPStore) after its construction, until it closes: a communicator spanning hosts must be
//    closed before its store is torn down. A read that fails (the store does not answer)
//    counts as no beat, and the verdict then says so; a slow store delays the thread's beats
//    and reads by as long as it takes. Through Python's store the thread takes the GIL (the
//    binding destroys communicators without holding it). Load: each beating rank sets one key
//    and reads one key per remote peer per period.
// 6. Where the verdict acts (the communicators, no extra host synchronisation on any call
//    path): the CUDA communicator's watchdog polls dead() where it polled the pids
//    (cuda_communicator.cpp); the host communicator raises it at a call's start and, from
//    on_dead, aborts its fabric while a call waits (host_communicator.cpp). Both publish their
//    own failure with mark_failed, so peers on other hosts learn it within a period. Their
//    liveness timeout is half their call timeout (liveness_timeout), so that a call waiting on
//    a dead peer of another host names it before its own timeout fires.
// 7. Tests (tests/runtime/peer_liveness_test.cpp) take the pid check away by giving every rank
//    a host of its own: the hosts are an input, and no test option exists.
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
