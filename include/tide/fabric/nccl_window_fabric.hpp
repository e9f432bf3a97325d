// The NCCL fabric's view for the executor: the one NCCL fabric that the runtime and the tools
// (tide-nccl) build on. Built only with NCCL.
//
// Contract (the design: NOTE [nccl window fabric] in docs/nccl_fabric.md):
// - One symmetric window per rank (NcclFabric's arena): the arena at offset 0, the signal
//   words at signal_offset() (NOTE [runtime window]), the same offsets on every rank.
// - load_store(from, to) is true where both ranks are in one LSA team and on one host, real or
//   emulated; other peers are reached by messages, through the NCCL transports
//   (tide/transport/nccl_transports.hpp) on the NCCL fabric's lanes or message_comm().
// - The runtime's constructor answers pointer() for arenas only (the caller binds tensors per
//   call); the program's constructor also cudaMallocs this rank's tensors and outputs.
// - Not collective: every rank builds its own. An executor built on it zeroes this rank's
//   words, so a barrier must follow every rank's construction of its executor.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/fabric/nccl_fabric.hpp"
#include "tide/program/program.hpp"

namespace tide::fabric {

struct NcclWindowOptions {
  // Refuse a world with ranks that are not LSA peers (one machine). The runtime's nccl backend
  // turns it off over several hosts (NOTE [runtime] 9, src/runtime/nccl_layout.hpp), as do
  // tools that carry messages.
  bool one_host = true;
  // Rank r's host, real or emulated (the runtime's nodes_as_hosts on one machine of several
  // GPUs); empty: one host. Needs the NCCL fabric's message lanes
  // (NcclFabricOptions::message_lanes).
  std::vector<int> hosts;
  int gpus_per_node = 0;  // L of the M x L split (needed by messages_between_nodes)
  // Treat ranks on different nodes of the split as on different hosts, so that every transfer
  // between nodes goes through messages.
  bool messages_between_nodes = false;
  // The communicator of messages outside the fabric's lanes (world ranks); nullptr: the fabric's
  // main communicator. A message-heavy run wants one with NCCL's default channels (tide-nccl makes
  // one by ncclCommSplit).
  ncclComm_t message_comm = nullptr;
};

class NcclWindowFabric final : public Fabric {
 public:
  static std::int64_t required_window_bytes(std::int64_t arena_bytes, std::int64_t signal_words);
  // A program's window: its largest arena (4 KiB rounded) plus its signal words.
  static std::int64_t required_window_bytes(const program::Program& program);

  // The runtime's window: `arena_bytes` per rank, `signal_words` words. Throws
  // InvalidArgument where the window is too small or `hosts` does not fit the world,
  // Unsupported (with one_host) where a rank is not an LSA peer.
  NcclWindowFabric(NcclFabric& nccl, std::int64_t arena_bytes, std::int64_t signal_words,
                   const NcclWindowOptions& options = {});
  // One program's buffers (the program must outlive the fabric). Throws InvalidArgument when
  // the program's world differs from the fabric's or the window is too small (naming
  // required_window_bytes), CudaError on allocation.
  NcclWindowFabric(NcclFabric& nccl, const program::Program& program,
                   const NcclWindowOptions& options);
  ~NcclWindowFabric() override;
  NcclWindowFabric(const NcclWindowFabric&) = delete;
  NcclWindowFabric& operator=(const NcclWindowFabric&) = delete;

  int ranks() const override;
  bool local(int rank) const override;
  int device() const override;
  void* pointer(const program::Buffer& buffer) const override;
  std::int64_t bytes(const program::Buffer& buffer) const override;
  std::uint64_t* signals(int owner) const override;
  std::int64_t signal_words() const override;
  bool load_store(int from, int to) const override;
  void release() noexcept override;

  // What the NCCL transports (tide/transport/nccl_transports.hpp) carry messages on: the NCCL
  // fabric, and the communicator for messages outside its lanes (NcclWindowOptions::
  // message_comm, else the main one).
  NcclFabric& nccl() const;
  ncclComm_t message_comm() const;

  std::int64_t signal_offset() const;
  std::int64_t tensor_bytes() const;  // cudaMalloc'ed bytes of this rank's tensors and outputs

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::fabric
