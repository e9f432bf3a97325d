// Rail messages as one-sided NCCL puts (one_sided.hpp; NOTE [one-sided messages] in
// docs/executor.md): the contract is in tide/transport/nccl_transports.hpp.
#include <string>

#include "fabric/nccl/nccl_rma.hpp"
#include "tide/core/error.hpp"
#include "tide/transport/nccl_transports.hpp"

namespace tide::transport {

using fabric::NcclFabric;

namespace {

// NOTE [nccl fabric] 5: a lane's token area holds world() receive rings (one per sender),
// then world() send rings (one per receiver), kTokenRing words each.
std::size_t token_offset(int sender, std::uint64_t number) {
  return (static_cast<std::size_t>(sender) * NcclFabric::kTokenRing +
          static_cast<std::size_t>(number % NcclFabric::kTokenRing)) *
         sizeof(std::uint64_t);
}
std::size_t send_token_offset(int world, int receiver, std::uint64_t number) {
  return token_offset(world + receiver, number);
}

}  // namespace

// The lane's communicator with its one-sided windows (NOTE [nccl fabric] 5), or a throw.
ncclComm_t NcclOneSidedTransport::comm() const {
  const NcclFabric& f = nccl_;
  ncclComm_t comm = f.message_comm(lane_);
  if (!f.host_rma() || comm == nullptr || f.lane_window(lane_) == nullptr) {
    throw Unsupported("NcclWindowFabric: no one-sided messages on lane " + std::to_string(lane_) +
                      " (" + (f.host_rma() ? "the fabric has no such lane" : f.host_rma_reason()) +
                      "); carry them two-sided");
  }
  return comm;
}

void NcclOneSidedTransport::put_signal(int /*from*/, int to, const void* data, std::size_t bytes,
                                       std::int64_t window_offset, cudaStream_t stream) {
  NcclFabric& f = nccl_;
  ncclComm_t c = comm();
  if (window_offset < 0 || window_offset > f.arena_bytes() ||
      bytes > static_cast<std::size_t>(f.arena_bytes() - window_offset)) {
    throw InvalidArgument("NcclWindowFabric: a one-sided put of " + std::to_string(bytes) +
                          " bytes at offset " + std::to_string(window_offset) +
                          " leaves the window of " + std::to_string(f.arena_bytes()) + " bytes");
  }
  // NOTE [one-sided messages] (iv): NCCL puts only from a symmetric window, the arena here.
  const auto* arena = static_cast<const std::byte*>(f.arena());
  const auto* source = static_cast<const std::byte*>(data);
  if (source < arena || source > arena + f.arena_bytes() ||
      bytes > static_cast<std::size_t>(arena + f.arena_bytes() - source)) {
    throw InvalidArgument("NcclWindowFabric: a one-sided put of " + std::to_string(bytes) +
                          " bytes reads outside this rank's arena; ncclPutSignal puts only "
                          "from a registered window, so carry the message two-sided");
  }
  f.settle(c,
           fabric::rma::put_signal(data, bytes, to, f.lane_window(lane_),
                                   static_cast<std::size_t>(window_offset), 0, c, stream),
           "ncclPutSignal (message)");
}

void NcclOneSidedTransport::put_token(int from, int to, const std::uint64_t* token,
                                      std::uint64_t number, cudaStream_t stream) {
  NcclFabric& f = nccl_;
  ncclComm_t c = comm();
  if (token != token_source(from, to, number)) {
    throw InvalidArgument(
        "NcclWindowFabric: a token put from outside its send slot; write it "
        "at token_source(peer, number, lane), inside the token window");
  }
  f.settle(c,
           fabric::rma::put_signal(token, sizeof(std::uint64_t), to, f.lane_token_window(lane_),
                                   token_offset(f.rank(), number), 0, c, stream),
           "ncclPutSignal (abort token)");
}

void NcclOneSidedTransport::signal(int peer, cudaStream_t stream) {
  ncclComm_t c = comm();
  nccl_.settle(c, fabric::rma::signal(peer, 0, c, stream), "ncclSignal (message)");
}

void NcclOneSidedTransport::wait_signals(int /*to*/, int from, int count, cudaStream_t stream) {
  ncclComm_t c = comm();
  const fabric::rma::SignalCount wait{from, 0, count};
  nccl_.settle(c, fabric::rma::wait_signals({&wait, 1}, c, stream), "ncclWaitSignal (message)");
}

std::uint64_t NcclOneSidedTransport::next_token_number(int /*self*/, int peer, bool sending) {
  return nccl_.next_token_number(peer, lane_, sending);
}

std::uint64_t* NcclOneSidedTransport::token_source(int /*from*/, int to, std::uint64_t number) {
  (void)comm();
  return nccl_.token_area(lane_) +
         send_token_offset(nccl_.world(), to, number) / sizeof(std::uint64_t);
}

const std::uint64_t* NcclOneSidedTransport::token_slot(int /*to*/, int from,
                                                       std::uint64_t number) const {
  (void)comm();
  return nccl_.token_area(lane_) + token_offset(from, number) / sizeof(std::uint64_t);
}

std::string NcclOneSidedTransport::capture_refusal() const {
  return "its rail messages are one-sided NCCL puts (ncclPutSignal / ncclWaitSignal), which "
         "a graph holds only as matched captured puts and waits with one signal in flight per "
         "pair (NCCL >= 2.30.3; none before: NOTE [one-sided messages]); unset "
         "TIDE_NCCL_HOST_RMA for capturable two-sided messages";
}

}  // namespace tide::transport
