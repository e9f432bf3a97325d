// Rail messages as ncclSend / ncclRecv: the contract is in tide/transport/nccl_transports.hpp.
#include <string>

#include "tide/transport/nccl_transports.hpp"

namespace tide::transport {

// NOTE [nccl fabric] 2b: world ranks are the lane communicator's ranks (color 0, key rank).
ncclComm_t NcclTwoSidedTransport::comm() const {
  ncclComm_t lane = nccl_.message_comm(lane_);
  return lane != nullptr ? lane : fallback_;
}

void NcclTwoSidedTransport::send(int /*from*/, int to, const void* data, std::size_t bytes,
                                 cudaStream_t stream) {
  ncclComm_t c = comm();
  nccl_.settle(c, ncclSend(data, bytes, ncclUint8, to, c, stream), "ncclSend (message)");
}

void NcclTwoSidedTransport::recv(int /*to*/, int from, void* data, std::size_t bytes,
                                 cudaStream_t stream) {
  ncclComm_t c = comm();
  nccl_.settle(c, ncclRecv(data, bytes, ncclUint8, from, c, stream), "ncclRecv (message)");
}

std::string NcclTwoSidedTransport::per_process_refusal() const {
  return "its rail messages are NCCL sends and receives, whose capture NCCL needs uniform over "
         "the sender and the receiver (a graph holding them launched by both), while each "
         "process decides its slot graphs from its own bindings";
}

MessageTransports nccl_transports(fabric::NcclWindowFabric& window, int lane) {
  fabric::NcclFabric& nccl = window.nccl();
  MessageTransports t;
  t.two_sided = std::make_shared<NcclTwoSidedTransport>(nccl, lane, window.message_comm());
  if (nccl.host_rma()) {
    t.one_sided = std::make_shared<NcclOneSidedTransport>(nccl, lane);
    t.no_one_sided.clear();
  } else {
    t.no_one_sided = "one-sided messages are off: " + nccl.host_rma_reason();
  }
  return t;
}

}  // namespace tide::transport
