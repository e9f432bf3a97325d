// Emulated nodes for tests on one GPU: the contract is in tide/testing/emulated_nodes.hpp.
#include "tide/testing/emulated_nodes.hpp"

#include <memory>
#include <string>

#include "tide/core/error.hpp"
#include "tide/testing/loopback_one_sided_transport.hpp"
#include "tide/testing/rendezvous_transport.hpp"

namespace tide::testing {

EmulatedNodesFabric::EmulatedNodesFabric(fabric::Fabric& inner, int node_size)
    : inner_(inner), node_size_(node_size) {
  if (node_size < 1) {
    throw InvalidArgument("EmulatedNodesFabric: node_size " + std::to_string(node_size) + " < 1");
  }
  for (int r = 0; r < inner.ranks(); ++r)
    if (!inner.local(r))
      throw InvalidArgument("CudaSequenceRunner: test messages need every rank local");
}

transport::MessageTransports emulated_node_transports(fabric::Fabric& fabric, bool one_sided) {
  transport::MessageTransports t;
  t.two_sided = std::make_shared<RendezvousTransport>(fabric.ranks(), fabric.device());
  if (one_sided) {
    t.one_sided = std::make_shared<LoopbackOneSidedTransport>(fabric, fabric.ranks());
    t.no_one_sided.clear();
  } else {
    t.no_one_sided = "its messages travel through a rendezvous transport";
  }
  return t;
}

}  // namespace tide::testing
