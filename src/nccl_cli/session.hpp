// One rank of `tide-nccl`: the launched rank, its NCCL fabric, and the small collectives the
// runner needs between runs (barrier, max, sum, text gather), all bounded by the fabric's
// timeout (NOTE [nccl fabric waits]).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tide/core/capability.hpp"
#include "tide/fabric/launch.hpp"
#include "tide/fabric/nccl_fabric.hpp"

namespace tide::nccl_cli {

class RankSession {
 public:
  // Exchanges the unique id (NOTE [launch]), uses device local_rank, and builds a fabric of
  // 1 x world with a window of `window_bytes` (NOTE [nccl window fabric]: on one host one
  // fabric serves every M x L split).
  RankSession(const fabric::LaunchedRank& me, std::int64_t window_bytes,
              std::chrono::milliseconds timeout);
  ~RankSession();

  fabric::NcclFabric& fabric() { return *fabric_; }
  int rank() const { return me_.rank; }
  int world() const { return me_.world; }
  const fabric::LaunchedRank& launched() const { return me_; }

  // A communicator over the same ranks with NCCL's default configuration (no channel cap,
  // blocking): what stock FSDP2 runs its collectives on. Made on first use.
  ncclComm_t stock_comm();
  // Another such communicator for TIDE's messages (NOTE [rail messages]), apart from the
  // stock collectives'.
  ncclComm_t message_comm();

  void barrier(const char* what);
  double max_over_ranks(double value, const char* what);
  std::int64_t sum_over_ranks(std::int64_t value, const char* what);
  // Every rank's line (at most 1000 bytes each; longer lines are cut), indexed by rank.
  std::vector<std::string> gather_text(const std::string& line, const char* what);

  // This rank's capabilities (device, CUDA, NCCL), for the agreement of Sec. 6.3.
  RankCapabilities capabilities() const;
  // agree() over every rank's description, exchanged on the main communicator.
  Decision agree_on(const GroupSignature& group);

 private:
  fabric::LaunchedRank me_;
  std::unique_ptr<fabric::NcclFabric> fabric_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t stock_ = nullptr;
  ncclComm_t messages_ = nullptr;
  ncclComm_t split_default(const char* name);
  void* scratch_ = nullptr;  // device bytes for the small collectives
  std::size_t scratch_bytes_ = 0;

  void* scratch(std::size_t bytes);
  template <class T>
  T all_reduce_one(T value, ncclDataType_t type, ncclRedOp_t op, const char* what);
};

}  // namespace tide::nccl_cli
