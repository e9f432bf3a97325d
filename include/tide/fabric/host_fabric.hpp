// The host fabric: the CPU processes of one host share their arenas and signal words through
// POSIX shared memory (architecture: fabric/host). One rank per process.
// Contract (points 1-6: NOTE [host fabric] in docs/runtime.md): construction is collective
// through the store, and the segments' names are unlinked once all are mapped (none outlives
// the job). Signal words are shared atomics (peers add with release order after their writes,
// the owner waits with acquire loads). abort() marks every rank's header; dead_peer() finds a
// dead peer of this host by pid; announce() tells a call-order mismatch from a timeout. Ranks
// of different hosts do not address each other and exchange messages through channel().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tide/core/store.hpp"

namespace tide::fabric {

struct HostFabricOptions {
  int rank = 0;
  int world = 1;
  std::int64_t arena_bytes = 0;
  int counters = 0;
  std::string key_prefix = "tide";  // store keys of this fabric
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::vector<int> hosts;  // NOTE [host fabric] 6: rank r's host; empty: every rank on one
};

class HostFabric {
 public:
  // Collective: every rank of the world constructs it with the same sizes and prefix.
  HostFabric(Store& store, const HostFabricOptions& options);
  ~HostFabric();
  HostFabric(const HostFabric&) = delete;
  HostFabric& operator=(const HostFabric&) = delete;

  int rank() const { return options_.rank; }
  int world() const { return options_.world; }
  std::int64_t arena_bytes() const { return options_.arena_bytes; }
  // A rank of another host (NOTE [host fabric] 6) has no arena or counters this process may
  // touch: both throw InternalError for it.
  std::byte* arena(int rank) const;
  std::int64_t* counter(int rank, int id) const;  // use through std::atomic_ref

  // NOTE [host fabric] 6: whether `from` addresses `to`'s arena and signal words.
  bool load_store(int from, int to) const;
  int host_of(int rank) const;

  // NOTE [host rail transport] (docs/runtime.md): one channel per (owner, peer) of different
  // hosts in the owner's segment (owner sends); InternalError for ranks that address each other.
  static constexpr std::size_t kChunkBytes = std::size_t{64} << 10;
  struct alignas(64) Channel {
    std::int64_t posted;   // receives the peer posted (written by the peer)
    std::int64_t sent;     // chunks the owner wrote
    std::int64_t taken;    // chunks the peer copied out (written by the peer)
    std::int64_t message;  // the chunk's header: the pair's message number,
    std::int64_t tag;      // its tag,
    std::int64_t bytes;    // this chunk's bytes
    std::int64_t total;    // and the message's
    std::byte data[kChunkBytes];
  };
  Channel& channel(int owner, int peer) const;

  // The first peer of this host found dead, or -1 (NOTE [host fabric] 5).
  int dead_peer() const;
  // The reason some rank aborted, or empty.
  std::string aborted() const;
  // Marks every rank's header aborted with `reason` (the first reason wins).
  void abort(const std::string& reason);

  // NOTE [host fabric] 4.
  struct CallAnnouncement {
    std::int64_t index = -1;  // -1: no call yet
    std::int64_t tag = 0;
  };
  void announce(const CallAnnouncement& call);
  CallAnnouncement announced(int rank) const;

 private:
  struct Mapping {
    void* base = nullptr;
    std::size_t bytes = 0;
  };
  HostFabricOptions options_;
  std::size_t counters_offset_ = 0;
  std::size_t channels_offset_ = 0;  // 0: one host, no channels
  std::size_t arena_offset_ = 0;
  std::vector<Mapping> maps_;
};

}  // namespace tide::fabric
