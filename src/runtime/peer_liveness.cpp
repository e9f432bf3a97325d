// NOTE [peer liveness]: the heartbeat thread, the verdicts and the orderly close.
#include "peer_liveness.hpp"

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "tide/core/error.hpp"
#include "tide/core/process.hpp"

namespace tide::runtime::detail {
namespace {

// "<count> <word> <rest>": the word (alive, closed, failed) and the rest (a failure's reason).
std::pair<std::string, std::string> state_of(const std::string& value) {
  const std::size_t a = value.find(' ');
  if (a == std::string::npos) return {value, {}};
  const std::size_t b = value.find(' ', a + 1);
  if (b == std::string::npos) return {value.substr(a + 1), {}};
  return {value.substr(a + 1, b - a - 1), value.substr(b + 1)};
}

}  // namespace

std::chrono::milliseconds liveness_timeout(std::chrono::milliseconds call_timeout) {
  return std::max(call_timeout / 2, std::chrono::milliseconds(1));
}

std::chrono::milliseconds liveness_period(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(10000));
}

PeerLiveness::PeerLiveness(std::shared_ptr<Store> store, PeerLivenessOptions options,
                           OnDead on_dead)
    : options_(std::move(options)),
      period_(liveness_period(options_.timeout)),
      store_(std::move(store)),
      on_dead_(std::move(on_dead)) {
  const int world = options_.world;
  if (world < 1 || options_.rank < 0 || options_.rank >= world || !store_) {
    throw InvalidArgument("peer liveness: rank " + std::to_string(options_.rank) +
                          " outside a world of " + std::to_string(world) + ", or no store");
  }
  if (!options_.hosts.empty() && options_.hosts.size() != static_cast<std::size_t>(world)) {
    throw InvalidArgument("peer liveness: " + std::to_string(options_.hosts.size()) +
                          " host indices for a world of " + std::to_string(world));
  }
  const auto host_of = [&](int r) {
    return options_.hosts.empty() ? 0 : options_.hosts[static_cast<std::size_t>(r)];
  };
  for (int r = 0; r < world; ++r)
    beating_ = beating_ || host_of(r) != host_of(options_.rank);
  // NOTE [peer liveness] 2: the first beat before the exchange, so every key exists after it.
  const Clock::time_point start = Clock::now();
  if (beating_) publish("alive");
  const std::vector<std::string> hello =
      all_gather_values(*store_, options_.key_prefix + "/liveness/hello", options_.rank, world,
                        host_name() + "\n" + std::to_string(getpid()), options_.timeout);
  for (int r = 0; r < world; ++r) {
    if (r == options_.rank) continue;
    const std::string& h = hello[static_cast<std::size_t>(r)];
    const std::size_t nl = h.find('\n');
    Peer p;
    p.rank = r;
    p.host = h.substr(0, nl);
    p.pid = nl == std::string::npos ? 0 : std::stoi(h.substr(nl + 1));
    p.local = host_of(r) == host_of(options_.rank);
    p.read = start;
    p.since = start;
    peers_.push_back(std::move(p));
  }
  closed_ = std::vector<std::atomic<bool>>(peers_.size());
  gone_ = std::vector<std::atomic<bool>>(peers_.size());
  if (!beating_) {
    store_.reset();  // NOTE [peer liveness] 5: nothing reads it again
    return;
  }
  thread_ = std::thread([this] { loop(); });
}

PeerLiveness::~PeerLiveness() {
  if (!beating_) return;
  std::string state;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    state = failed_.empty() ? "closed" : "failed " + failed_;
  }
  wake_.notify_all();
  thread_.join();
  try {
    publish(state);                  // NOTE [peer liveness] 4
  } catch (const std::exception&) {  // the store is gone: the peers see silence, as for a death
  }
}

std::string PeerLiveness::beat_key(int rank) const {
  return options_.key_prefix + "/liveness/beat/" + std::to_string(rank);
}

void PeerLiveness::publish(const std::string& state) {
  store_->set(beat_key(options_.rank), std::to_string(beats_++) + " " + state);
}

void PeerLiveness::mark_failed(const std::string& reason) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (!failed_.empty() || !beating_) return;
    failed_ = reason.empty() ? std::string("(no reason given)") : reason;
    std::replace(failed_.begin(), failed_.end(), '\n', ' ');
    failed_pending_ = true;
  }
  wake_.notify_all();
}

void PeerLiveness::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    const std::string state = failed_.empty() ? "alive" : "failed " + failed_;
    failed_pending_ = false;
    const bool judged = verdict_.has_value();
    lock.unlock();
    try {
      publish(state);
    } catch (const std::exception&) {  // the peers count it as silence; the reads say why
    }
    std::optional<DeadPeer> found = judged ? std::nullopt : read_peers();
    if (found) {
      {
        std::lock_guard hold(mutex_);
        verdict_ = *found;
        judged_.store(true);
      }
      if (on_dead_) {
        try {
          on_dead_(*found);
        } catch (...) {  // the verdict stays readable through dead() and remote_verdict()
        }
      }
    }
    lock.lock();
    wake_.wait_for(lock, period_, [this] { return stop_ || failed_pending_; });
  }
}

std::optional<DeadPeer> PeerLiveness::read_peers() {
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    if (p.local || closed_[i].load()) continue;
    std::string value = p.last;
    try {
      value = store_->get(beat_key(p.rank), options_.timeout);
      p.store_error.clear();
    } catch (const std::exception& e) {
      p.store_error = e.what();
    }
    const Clock::time_point now = Clock::now();
    const auto [word, rest] = state_of(value);
    DeadPeer d;
    d.rank = p.rank;
    d.host = p.host;
    if (word == "closed") {
      closed_[i].store(true);
      continue;
    }
    if (word == "failed") {
      d.failed = true;
      d.what = "rank " + std::to_string(p.rank) + " failed (host '" + p.host +
               "', another host): " + rest;
      return d;
    }
    if (value != p.last) {  // NOTE [peer liveness] 3 (b): it beat after the previous read
      p.last = value;
      p.since = p.read;
    }
    p.read = now;
    if (now - p.since <= options_.timeout) continue;
    d.silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.since);
    d.what = "rank " + std::to_string(p.rank) + " died or stalled (host '" + p.host +
             "', another host): its heartbeat has not advanced for " +
             std::to_string(d.silent.count()) + " ms (liveness timeout " +
             std::to_string(options_.timeout.count()) + " ms, a beat every " +
             std::to_string(period_.count()) + " ms)" +
             (p.store_error.empty() ? "" : "; the store did not answer: " + p.store_error) +
             "; look at that process and its host (killed, out of memory, hung, or cut off "
             "from the store) and restart the job";
    return d;
  }
  return std::nullopt;
}

std::optional<DeadPeer> PeerLiveness::dead() const {
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    const Peer& p = peers_[i];
    if (!p.local || closed_[i].load()) continue;
    if (!gone_[i].load()) {  // a gone process stays gone: its key is read once
      if (process_alive(p.pid)) continue;
      if (beating_) {  // NOTE [peer liveness] 3: a local peer that closed is not dead
        try {
          if (state_of(store_->get(beat_key(p.rank), options_.timeout)).first == "closed") {
            closed_[i].store(true);
            continue;
          }
        } catch (const std::exception&) {  // unknown: its pid decides
        }
      }
      gone_[i].store(true);
    }
    DeadPeer d;
    d.rank = p.rank;
    d.host = p.host;
    d.what = "rank " + std::to_string(p.rank) + " died (process " + std::to_string(p.pid) +
             " on this host, '" + p.host + "', is gone)";
    return d;
  }
  return remote_verdict();
}

std::optional<DeadPeer> PeerLiveness::remote_verdict() const {
  if (!judged_.load()) return std::nullopt;  // seq_cst: host_communicator.cpp's in_call_
  std::lock_guard lock(mutex_);
  return verdict_;
}

}  // namespace tide::runtime::detail
