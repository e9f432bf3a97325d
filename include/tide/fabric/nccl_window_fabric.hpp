// The NCCL fabric's view for the executor: the one NCCL fabric that the runtime and the tools
// (tide-nccl) build on. Built only with NCCL.
// Contract (NOTE [nccl window fabric] in docs/nccl_fabric.md): one symmetric window per rank,
// the arena at 0 and the signal words at signal_offset() (NOTE [runtime window]). load_store is
// true within one LSA team on one host (real or emulated); other peers get messages through
// the NCCL transports. The runtime's constructor answers pointer() for arenas only; the
// program's also cudaMallocs this rank's tensors and outputs. Not collective, but an executor
// on it zeroes this rank's words: a barrier must follow every rank's executor construction.
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
  // Refuse ranks that are not LSA peers (off over several hosts, NOTE [runtime] 9).
  bool one_host = true;
  // Rank r's host, real or emulated; empty: one host. Needs the fabric's message lanes.
  std::vector<int> hosts;
  int gpus_per_node = 0;  // L of the M x L split (needed by messages_between_nodes)
  // Ranks of different nodes as of different hosts: messages between nodes.
  bool messages_between_nodes = false;
  // Messages outside the fabric's lanes (world ranks); nullptr: the main communicator.
  ncclComm_t message_comm = nullptr;
};

class NcclWindowFabric final : public Fabric {
 public:
  static std::int64_t required_window_bytes(std::int64_t arena_bytes, std::int64_t signal_words);
  // A program's window: its largest arena (4 KiB rounded) plus its signal words.
  static std::int64_t required_window_bytes(const program::Program& program);

  // The runtime's window. InvalidArgument (window too small, bad `hosts`), Unsupported (with
  // one_host, a rank not an LSA peer).
  NcclWindowFabric(NcclFabric& nccl, std::int64_t arena_bytes, std::int64_t signal_words,
                   const NcclWindowOptions& options = {});
  // One program's buffers (the program outlives the fabric). InvalidArgument (world, window
  // too small), CudaError.
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

  // What the NCCL transports carry messages on.
  NcclFabric& nccl() const;
  ncclComm_t message_comm() const;

  std::int64_t signal_offset() const;
  std::int64_t tensor_bytes() const;  // cudaMalloc'ed bytes of this rank's tensors and outputs

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::fabric
