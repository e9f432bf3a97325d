// The message transport interface's defaults: tide/transport/message_transport.hpp.
#include "tide/transport/message_transport.hpp"

#include "tide/core/error.hpp"

namespace tide::transport {

void OneSidedTransport::send(int, int, const void*, std::size_t, cudaStream_t) {
  throw InternalError("OneSidedTransport: a two-sided send on a one-sided runner");
}

void OneSidedTransport::recv(int, int, void*, std::size_t, cudaStream_t) {
  throw InternalError("OneSidedTransport: a two-sided receive on a one-sided runner");
}

}  // namespace tide::transport
