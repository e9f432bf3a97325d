// Emulated nodes for tests on one GPU: ranks r, p of one process with r / node_size !=
// p / node_size are on different emulated nodes, so the runner carries their puts and signals
// as messages (NOTE [CUDA call sequences] 6) although the fabric could store directly.
// - EmulatedNodesFabric forwards every call to a fabric whose ranks are all local (the virtual
//   fabric; tide::InvalidArgument otherwise) and answers load_store by node.
// - emulated_node_transports(): the rendezvous transport (NOTE [rendezvous transport]) for
//   two-sided messages and, with `one_sided`, the loopback transport (NOTE [loopback one-sided
//   transport]) that the runner takes where every template plans. Fresh ones per runner.
#pragma once

#include "tide/fabric/fabric.hpp"
#include "tide/transport/message_transport.hpp"

namespace tide::testing {

class EmulatedNodesFabric final : public fabric::Fabric {
 public:
  EmulatedNodesFabric(fabric::Fabric& inner, int node_size);
  int ranks() const override { return inner_.ranks(); }
  bool local(int rank) const override { return inner_.local(rank); }
  int device() const override { return inner_.device(); }
  int device_of(int rank) const override { return inner_.device_of(rank); }
  void* pointer(const program::Buffer& buffer) const override { return inner_.pointer(buffer); }
  std::int64_t bytes(const program::Buffer& buffer) const override { return inner_.bytes(buffer); }
  std::uint64_t* signals(int owner) const override { return inner_.signals(owner); }
  std::int64_t signal_words() const override { return inner_.signal_words(); }
  bool load_store(int from, int to) const override { return from / node_size_ == to / node_size_; }
  void release() noexcept override { inner_.release(); }

 private:
  fabric::Fabric& inner_;
  int node_size_ = 1;
};

transport::MessageTransports emulated_node_transports(fabric::Fabric& fabric, bool one_sided);

}  // namespace tide::testing
