// NOTE [host fabric]: POSIX shared-memory segments, one per rank, mapped by every rank.
#include "tide/fabric/host_fabric.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "tide/core/error.hpp"
#include "tide/core/process.hpp"

namespace tide::fabric {
namespace {

constexpr std::uint64_t kMagic = 0x54494445'484f5354ULL;  // "TIDEHOST"
constexpr std::size_t kReasonBytes = 448;

// The head of every segment. `state`: 0 running, 1 an abort is being written, 2 aborted,
// 3 closed (the rank finished and destroyed its fabric: gone, but not dead).
struct SegmentHeader {
  std::uint64_t magic;
  std::int32_t rank;
  std::int32_t pid;
  std::int32_t state;
  std::int64_t call_index;  // NOTE [host fabric] 4; written by the owner only
  std::int64_t call_tag;
  char reason[kReasonBytes];
};

std::size_t round_up(std::size_t x, std::size_t to) {
  return (x + to - 1) / to * to;
}

std::string errno_text() {
  return std::strerror(errno);
}

// How many hosts `hosts` names (0 for an empty list: one host).
std::size_t distinct_hosts(const std::vector<int>& hosts) {
  std::vector<int> sorted = hosts;
  std::sort(sorted.begin(), sorted.end());
  return static_cast<std::size_t>(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
}

std::string segment_name(const std::string& job, int rank) {
  return "/tide-" + job + "-r" + std::to_string(rank);
}

SegmentHeader* header_of(void* base) {
  return static_cast<SegmentHeader*>(base);
}

}  // namespace

HostFabric::HostFabric(Store& store, const HostFabricOptions& options) : options_(options) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    throw InvalidArgument("host fabric: rank " + std::to_string(options.rank) +
                          " outside a world of " + std::to_string(options.world));
  }
  if (options.arena_bytes < 0 || options.counters < 0) {
    throw InvalidArgument("host fabric: negative arena or counter count");
  }
  if (!options.hosts.empty()) {
    if (options.hosts.size() != static_cast<std::size_t>(options.world)) {
      throw InvalidArgument("host fabric: " + std::to_string(options.hosts.size()) +
                            " host ids for a world of " + std::to_string(options.world));
    }
    if (*std::min_element(options.hosts.begin(), options.hosts.end()) < 0) {
      throw InvalidArgument("host fabric: a negative host id");
    }
  }
  counters_offset_ = round_up(sizeof(SegmentHeader), 64);
  std::size_t end =
      counters_offset_ + sizeof(std::int64_t) * static_cast<std::size_t>(options.counters);
  if (distinct_hosts(options.hosts) > 1) {  // NOTE [host rail transport]: a channel per peer
    channels_offset_ = round_up(end, alignof(Channel));
    end = channels_offset_ + sizeof(Channel) * static_cast<std::size_t>(options.world);
  }
  arena_offset_ = round_up(end, 4096);
  const std::size_t bytes =
      std::max<std::size_t>(arena_offset_ + static_cast<std::size_t>(options.arena_bytes), 4096);

  // 1. The job id, then this rank's segment.
  const std::string prefix = options.key_prefix + "/host_fabric";
  std::string job;
  if (options.rank == 0) {
    std::random_device random;
    char id[64];
    std::snprintf(id, sizeof id, "%08x%08x-%d", random(), random(), static_cast<int>(getpid()));
    job = id;
    store.set(prefix + "/job", job);
  } else {
    job = store.get(prefix + "/job", options.timeout);
  }
  const std::string own = segment_name(job, options.rank);
  const int fd = shm_open(own.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    throw CommunicationError("host fabric: shm_open('" + own + "') failed: " + errno_text());
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const std::string why = errno_text();
    close(fd);
    shm_unlink(own.c_str());
    throw CommunicationError("host fabric: cannot size shared memory to " + std::to_string(bytes) +
                             " bytes: " + why + " (is /dev/shm large enough?)");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(own.c_str());
    throw CommunicationError("host fabric: mmap of " + std::to_string(bytes) +
                             " bytes failed: " + errno_text());
  }
  SegmentHeader* h = header_of(base);
  h->magic = kMagic;
  h->rank = options.rank;
  h->pid = static_cast<std::int32_t>(getpid());
  h->state = 0;
  h->call_index = -1;
  h->call_tag = 0;
  maps_.assign(static_cast<std::size_t>(options.world), Mapping{});
  maps_[static_cast<std::size_t>(options.rank)] = Mapping{base, bytes};

  // 2. Map every peer, then unlink the own name once every rank has mapped it.
  try {
    store.set(prefix + "/created/" + std::to_string(options.rank), own);
    for (int r = 0; r < options.world; ++r) {
      if (r == options.rank) continue;
      const std::string name = store.get(prefix + "/created/" + std::to_string(r), options.timeout);
      const int pfd = shm_open(name.c_str(), O_RDWR, 0600);
      if (pfd < 0) {
        throw CommunicationError("host fabric: cannot open rank " + std::to_string(r) +
                                 "'s segment '" + name + "': " + errno_text() +
                                 " (all ranks must run on one host)");
      }
      void* peer = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
      close(pfd);
      if (peer == MAP_FAILED) {
        throw CommunicationError("host fabric: mmap of rank " + std::to_string(r) +
                                 "'s segment failed: " + errno_text());
      }
      maps_[static_cast<std::size_t>(r)] = Mapping{peer, bytes};
      if (header_of(peer)->magic != kMagic || header_of(peer)->rank != r) {
        throw CommunicationError("host fabric: rank " + std::to_string(r) +
                                 "'s segment has the wrong header (mismatched job?)");
      }
    }
    store.set(prefix + "/mapped/" + std::to_string(options.rank), "1");
    for (int r = 0; r < options.world; ++r)
      store.get(prefix + "/mapped/" + std::to_string(r), options.timeout);
  } catch (...) {
    shm_unlink(own.c_str());
    for (Mapping& m : maps_) {
      if (m.base) munmap(m.base, m.bytes);
    }
    maps_.clear();
    throw;
  }
  shm_unlink(own.c_str());
}

HostFabric::~HostFabric() {
  if (!maps_.empty()) {
    std::int32_t running = 0;
    std::atomic_ref<std::int32_t>(
        header_of(maps_[static_cast<std::size_t>(options_.rank)].base)->state)
        .compare_exchange_strong(running, 3, std::memory_order_acq_rel);
  }
  for (Mapping& m : maps_) {
    if (m.base) munmap(m.base, m.bytes);
  }
}

std::byte* HostFabric::arena(int rank) const {
  if (!load_store(options_.rank, rank)) {
    throw InternalError("host fabric: rank " + std::to_string(options_.rank) +
                        " addressed the arena of rank " + std::to_string(rank) +
                        ", on another host (NOTE [host fabric] 6)");
  }
  return static_cast<std::byte*>(maps_.at(static_cast<std::size_t>(rank)).base) + arena_offset_;
}

std::int64_t* HostFabric::counter(int rank, int id) const {
  if (id < 0 || id >= options_.counters) {
    throw InternalError("host fabric: counter " + std::to_string(id) + " outside " +
                        std::to_string(options_.counters));
  }
  if (!load_store(options_.rank, rank)) {
    throw InternalError("host fabric: rank " + std::to_string(options_.rank) +
                        " addressed a signal word of rank " + std::to_string(rank) +
                        ", on another host (NOTE [host fabric] 6)");
  }
  return reinterpret_cast<std::int64_t*>(
             static_cast<std::byte*>(maps_.at(static_cast<std::size_t>(rank)).base) +
             counters_offset_) +
         id;
}

int HostFabric::dead_peer() const {
  for (int r = 0; r < options_.world; ++r) {
    // NOTE [host fabric] 5: a rank of another host has no pid this process may read.
    if (r == options_.rank || !load_store(options_.rank, r)) continue;
    SegmentHeader* h = header_of(maps_[static_cast<std::size_t>(r)].base);
    if (std::atomic_ref<std::int32_t>(h->state).load(std::memory_order_acquire) == 3) continue;
    if (!process_alive(h->pid)) return r;
  }
  return -1;
}

std::string HostFabric::aborted() const {
  const SegmentHeader* h = header_of(maps_[static_cast<std::size_t>(options_.rank)].base);
  const int state = std::atomic_ref<std::int32_t>(const_cast<SegmentHeader*>(h)->state)
                        .load(std::memory_order_acquire);
  if (state == 0 || state == 3) return {};
  if (state == 1) return "a rank is aborting the communicator";
  return std::string(h->reason, strnlen(h->reason, kReasonBytes));
}

void HostFabric::abort(const std::string& reason) {
  for (const Mapping& m : maps_) {
    SegmentHeader* h = header_of(m.base);
    std::atomic_ref<std::int32_t> state(h->state);
    std::int32_t expected = 0;
    if (!state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    const std::size_t n = std::min(reason.size(), kReasonBytes - 1);
    std::memcpy(h->reason, reason.data(), n);
    h->reason[n] = '\0';
    state.store(2, std::memory_order_release);
  }
}

}  // namespace tide::fabric

namespace tide::fabric {

void HostFabric::announce(const CallAnnouncement& call) {
  SegmentHeader* h = header_of(maps_[static_cast<std::size_t>(options_.rank)].base);
  std::atomic_ref<std::int64_t>(h->call_index).store(-1, std::memory_order_release);
  std::atomic_ref<std::int64_t>(h->call_tag).store(call.tag, std::memory_order_release);
  std::atomic_ref<std::int64_t>(h->call_index).store(call.index, std::memory_order_release);
}

HostFabric::CallAnnouncement HostFabric::announced(int rank) const {
  SegmentHeader* h = header_of(maps_.at(static_cast<std::size_t>(rank)).base);
  CallAnnouncement a;
  // Index, tag, index again: a torn read (the owner moved on in between) reads as "no call".
  const std::int64_t before =
      std::atomic_ref<std::int64_t>(h->call_index).load(std::memory_order_acquire);
  a.tag = std::atomic_ref<std::int64_t>(h->call_tag).load(std::memory_order_acquire);
  const std::int64_t after =
      std::atomic_ref<std::int64_t>(h->call_index).load(std::memory_order_acquire);
  a.index = before == after ? after : -1;
  return a;
}

}  // namespace tide::fabric

namespace tide::fabric {

int HostFabric::host_of(int rank) const {
  if (rank < 0 || rank >= options_.world) {
    throw InternalError("host fabric: rank " + std::to_string(rank) + " outside a world of " +
                        std::to_string(options_.world));
  }
  return options_.hosts.empty() ? 0 : options_.hosts[static_cast<std::size_t>(rank)];
}

bool HostFabric::load_store(int from, int to) const {
  return host_of(from) == host_of(to);
}

HostFabric::Channel& HostFabric::channel(int owner, int peer) const {
  if (channels_offset_ == 0 || load_store(owner, peer)) {
    throw InternalError("host fabric: a message between ranks " + std::to_string(owner) + " and " +
                        std::to_string(peer) +
                        ", which address each other (messages travel between hosts only)");
  }
  return reinterpret_cast<Channel*>(
      static_cast<std::byte*>(maps_.at(static_cast<std::size_t>(owner)).base) +
      channels_offset_)[peer];
}

}  // namespace tide::fabric
