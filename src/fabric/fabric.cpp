// The fabric interface's defaults (include/tide/fabric/fabric.hpp): no messages.
#include "tide/fabric/fabric.hpp"

#include <string>

#include "tide/core/error.hpp"

namespace tide::fabric {

namespace {

[[noreturn]] void no_messages(int peer) {
  throw Unsupported("this fabric cannot send messages (rank " + std::to_string(peer) +
                    " is not load/store reachable and the fabric has no send/receive path)");
}

}  // namespace

void Fabric::send(const void*, std::size_t, int peer, cudaStream_t) {
  no_messages(peer);
}

void Fabric::recv(void*, std::size_t, int peer, cudaStream_t) {
  no_messages(peer);
}

}  // namespace tide::fabric
