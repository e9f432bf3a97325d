// The host backend's transport (architecture: transport/): two-sided messages between CPU processes
// of different hosts, through the host fabric's channels (NOTE [host rail transport] in
// docs/runtime.md; HostFabric::channel). Contract:
// - One per process and fabric, living as long as the fabric: it numbers the messages to and
//   from each peer (the k-th send to a peer matches the peer's k-th receive from this rank).
// - send() returns once its matching receive took the last chunk; recv() once the last chunk
//   is copied out. `wait(done, what)` returns once done() holds, or throws (abort, dead peer,
//   timeout). `tag` identifies the message on both sides; messages issued in different orders
//   on the two ranks throw InternalError naming both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tide/fabric/host_fabric.hpp"

namespace tide::transport {

class HostMessages {
 public:
  using Waiter = std::function<void(const std::function<bool()>& done, const std::string& what)>;

  explicit HostMessages(fabric::HostFabric& fabric);
  HostMessages(const HostMessages&) = delete;
  HostMessages& operator=(const HostMessages&) = delete;

  void send(int peer, std::span<const std::byte> data, std::int64_t tag, const Waiter& wait);
  void recv(int peer, std::span<std::byte> data, std::int64_t tag, const Waiter& wait);

 private:
  fabric::HostFabric& fabric_;
  std::vector<std::int64_t> sent_;      // per peer: messages this rank sent it
  std::vector<std::int64_t> received_;  // per peer: messages this rank received
};

}  // namespace tide::transport
