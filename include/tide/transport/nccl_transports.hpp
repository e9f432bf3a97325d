// The NCCL transports (architecture: transport/): rail messages over the NCCL fabric's
// communicators, one local rank per process, so each call's own rank is this process's.
// - NcclTwoSidedTransport: ncclSend / ncclRecv on lane `lane`'s communicator (NOTE [nccl
//   fabric] 2b), else the window's message communicator. A send and its receive must be both
//   captured or both not (per_process_refusal).
// - NcclOneSidedTransport: ncclPutSignal / ncclWaitSignal into the lane's windows (NOTE [nccl
//   fabric] 5; Unsupported where the lane has none); puts only from this rank's arena and tokens
//   from their send slots (else InvalidArgument); not capturable (capture_refusal).
// - nccl_transports(window, lane): the two-sided one, plus the one-sided one where host_rma().
#pragma once

#include <nccl.h>

#include <cstdint>
#include <string>

#include "tide/fabric/nccl_fabric.hpp"
#include "tide/fabric/nccl_window_fabric.hpp"
#include "tide/transport/message_transport.hpp"

namespace tide::transport {

class NcclTwoSidedTransport final : public MessageTransport {
 public:
  NcclTwoSidedTransport(fabric::NcclFabric& nccl, int lane, ncclComm_t fallback)
      : nccl_(nccl), lane_(lane), fallback_(fallback) {}
  const char* path() const override { return "two-sided"; }
  void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) override;
  void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) override;
  std::string per_process_refusal() const override;

 private:
  ncclComm_t comm() const;
  fabric::NcclFabric& nccl_;
  int lane_ = 0;
  ncclComm_t fallback_ = nullptr;
};

class NcclOneSidedTransport final : public OneSidedTransport {
 public:
  NcclOneSidedTransport(fabric::NcclFabric& nccl, int lane) : nccl_(nccl), lane_(lane) {}
  const char* path() const override { return "one-sided"; }
  void put_signal(int from, int to, const void* data, std::size_t bytes, std::int64_t window_offset,
                  cudaStream_t stream) override;
  void put_token(int from, int to, const std::uint64_t* token, std::uint64_t number,
                 cudaStream_t stream) override;
  void wait_signals(int to, int from, int count, cudaStream_t stream) override;
  std::uint64_t next_token_number(int self, int peer, bool sending) override;
  std::uint64_t* token_source(int from, int to, std::uint64_t number) override;
  const std::uint64_t* token_slot(int to, int from, std::uint64_t number) const override;
  // A bare signal to `peer` (no data).
  void signal(int peer, cudaStream_t stream);
  std::string capture_refusal() const override;
  std::string per_process_refusal() const override { return capture_refusal(); }

 private:
  ncclComm_t comm() const;  // the lane's, with its windows, or a throw
  fabric::NcclFabric& nccl_;
  int lane_ = 0;
};

MessageTransports nccl_transports(fabric::NcclWindowFabric& window, int lane);

}  // namespace tide::transport
