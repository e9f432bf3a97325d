// The host backend's messages: the contract is in tide/transport/host_messages.hpp, the
// protocol in NOTE [host rail transport] (docs/runtime.md).
#include "tide/transport/host_messages.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "tide/core/error.hpp"

namespace tide::transport {

HostMessages::HostMessages(fabric::HostFabric& fabric)
    : fabric_(fabric),
      sent_(static_cast<std::size_t>(fabric.world()), 0),
      received_(static_cast<std::size_t>(fabric.world()), 0) {}

void HostMessages::send(int peer, std::span<const std::byte> data, std::int64_t tag,
                        const Waiter& wait) {
  fabric::HostFabric::Channel& c = fabric_.channel(fabric_.rank(), peer);
  const std::int64_t k = sent_[static_cast<std::size_t>(peer)]++;
  std::atomic_ref<std::int64_t> posted(c.posted), sent(c.sent), taken(c.taken);
  const std::string what = "message " + std::to_string(k) + " to rank " + std::to_string(peer);
  wait([&] { return posted.load(std::memory_order_acquire) > k; }, "the receive matching " + what);
  const auto chunk_free = [&] {
    return taken.load(std::memory_order_acquire) == sent.load(std::memory_order_relaxed);
  };
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(fabric::HostFabric::kChunkBytes, data.size() - offset);
    wait(chunk_free, "rank " + std::to_string(peer) + " taking a chunk of " + what);
    c.message = k;
    c.tag = tag;
    c.bytes = static_cast<std::int64_t>(n);
    c.total = static_cast<std::int64_t>(data.size());
    if (n > 0) std::memcpy(c.data, data.data() + offset, n);
    sent.fetch_add(1, std::memory_order_release);
    offset += n;
  } while (offset < data.size());
  wait(chunk_free, "rank " + std::to_string(peer) + " taking the last chunk of " + what);
}

void HostMessages::recv(int peer, std::span<std::byte> data, std::int64_t tag, const Waiter& wait) {
  fabric::HostFabric::Channel& c = fabric_.channel(peer, fabric_.rank());
  const std::int64_t k = received_[static_cast<std::size_t>(peer)]++;
  std::atomic_ref<std::int64_t> posted(c.posted), sent(c.sent), taken(c.taken);
  const std::string what = "message " + std::to_string(k) + " from rank " + std::to_string(peer);
  posted.store(k + 1, std::memory_order_release);
  std::size_t offset = 0;
  do {
    wait(
        [&] {
          return sent.load(std::memory_order_acquire) > taken.load(std::memory_order_relaxed);
        },
        "a chunk of " + what);
    const std::size_t n = std::min(fabric::HostFabric::kChunkBytes, data.size() - offset);
    if (c.message != k || c.tag != tag || c.total != static_cast<std::int64_t>(data.size()) ||
        c.bytes != static_cast<std::int64_t>(n)) {
      throw InternalError("host rail transport: rank " + std::to_string(fabric_.rank()) +
                          " expected " + what + " (tag " + std::to_string(tag) + ", " +
                          std::to_string(data.size()) + " bytes) and got message " +
                          std::to_string(c.message) + " (tag " + std::to_string(c.tag) + ", " +
                          std::to_string(c.total) +
                          " bytes): the two ranks issued their messages in different orders");
    }
    if (n > 0) std::memcpy(data.data() + offset, c.data, n);
    taken.fetch_add(1, std::memory_order_release);
    offset += n;
  } while (offset < data.size());
}

}  // namespace tide::transport
