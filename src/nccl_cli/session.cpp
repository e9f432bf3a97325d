// One rank of `tide-nccl` (session.hpp).
#include "session.hpp"

#include <cuda.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "cuda_driver.hpp"
#include "tide/core/env.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/fabric/device_capabilities.hpp"
#include "tide/version_gates.hpp"

namespace tide::nccl_cli {

RankSession::RankSession(const fabric::LaunchedRank& me, std::int64_t window_bytes,
                         std::chrono::milliseconds timeout)
    : me_(me) {
  int devices = 0;
  const cudaError_t found = cudaGetDeviceCount(&devices);
  if (found != cudaSuccess || devices == 0) {
    throw Unsupported(std::string("tide-nccl needs one GPU per rank and found none (") +
                      cudaGetErrorString(found) +
                      "); on a machine without GPUs use `tide simulate` (the CPU reference)");
  }
  if (me.local_rank >= devices) {
    throw InvalidArgument("tide-nccl: local rank " + std::to_string(me.local_rank) +
                          " has no GPU (this host has " + std::to_string(devices) +
                          "); launch at most one rank per GPU");
  }
  TIDE_CUDA_CHECK(cudaSetDevice(me.local_rank));
  std::vector<std::byte> id;
  if (me.rank == 0) id = fabric::NcclFabric::make_unique_id();
  id = fabric::exchange_unique_id(me, std::move(id), timeout);
  fabric::NcclFabricOptions options;
  options.device = me.local_rank;
  options.nodes = 1;
  options.gpus_per_node = me.world;
  options.virtual_nodes = true;
  options.arena_bytes = window_bytes;
  options.timeout = timeout;
  // NOTE [nccl fabric] 5: one-sided messages (asked for with TIDE_NCCL_HOST_RMA=1) live on a
  // message lane; without the knob tide-nccl makes none, as before.
  if (env::flag("TIDE_NCCL_HOST_RMA")) options.message_lanes = 1;
  fabric_ = std::make_unique<fabric::NcclFabric>(me.rank, me.world, id, options);
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

RankSession::~RankSession() {
  if (stock_ != nullptr) (void)ncclCommDestroy(stock_);
  if (messages_ != nullptr) (void)ncclCommDestroy(messages_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  if (scratch_ != nullptr) (void)cudaFree(scratch_);
}

void* RankSession::scratch(std::size_t bytes) {
  if (bytes > scratch_bytes_) {
    if (scratch_ != nullptr) TIDE_CUDA_CHECK(cudaFree(scratch_));
    scratch_bytes_ = std::max<std::size_t>(bytes, 4096);
    TIDE_CUDA_CHECK(cudaMalloc(&scratch_, scratch_bytes_));
  }
  return scratch_;
}

ncclComm_t RankSession::split_default(const char* name) {
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.commName = name;
  fabric_->settle(ncclCommSplit(fabric_->main_comm(), 0, me_.rank, &comm, &config),
                  "ncclCommSplit (a communicator with NCCL's default channels)");
  return comm;
}

ncclComm_t RankSession::stock_comm() {
  if (stock_ == nullptr) stock_ = split_default("tide.stock");
  return stock_;
}

ncclComm_t RankSession::message_comm() {
  if (messages_ == nullptr) messages_ = split_default("tide.messages");
  return messages_;
}

void RankSession::barrier(const char* what) {
  (void)sum_over_ranks(1, what);
}

template <class T>
T RankSession::all_reduce_one(T value, ncclDataType_t type, ncclRedOp_t op, const char* what) {
  auto* d = static_cast<T*>(scratch(sizeof(T)));
  TIDE_CUDA_CHECK(cudaMemcpyAsync(d, &value, sizeof value, cudaMemcpyHostToDevice, stream_));
  fabric_->settle(ncclAllReduce(d, d, 1, type, op, fabric_->main_comm(), stream_),
                  "ncclAllReduce (one value)");
  TIDE_CUDA_CHECK(cudaMemcpyAsync(&value, d, sizeof value, cudaMemcpyDeviceToHost, stream_));
  fabric_->wait(stream_, what);
  return value;
}

double RankSession::max_over_ranks(double value, const char* what) {
  return all_reduce_one(value, ncclFloat64, ncclMax, what);
}

std::int64_t RankSession::sum_over_ranks(std::int64_t value, const char* what) {
  return all_reduce_one(value, ncclInt64, ncclSum, what);
}

std::vector<std::string> RankSession::gather_text(const std::string& line, const char* what) {
  // Blobs of any length: agree on the longest, then all-gather fixed slots with a length.
  const auto longest =
      static_cast<std::size_t>(max_over_ranks(static_cast<double>(line.size()), what));
  const std::size_t slot = sizeof(std::uint64_t) + longest;
  auto* d = static_cast<std::byte*>(scratch(slot * static_cast<std::size_t>(me_.world + 1)));
  std::vector<std::byte> mine(slot, std::byte{0});
  const std::uint64_t n = line.size();
  std::memcpy(mine.data(), &n, sizeof n);
  std::memcpy(mine.data() + sizeof n, line.data(), line.size());
  std::byte* send = d + slot * static_cast<std::size_t>(me_.world);
  TIDE_CUDA_CHECK(cudaMemcpyAsync(send, mine.data(), slot, cudaMemcpyHostToDevice, stream_));
  fabric_->settle(ncclAllGather(send, d, slot, ncclUint8, fabric_->main_comm(), stream_),
                  "ncclAllGather(text)");
  std::vector<std::byte> all(slot * static_cast<std::size_t>(me_.world));
  TIDE_CUDA_CHECK(cudaMemcpyAsync(all.data(), d, all.size(), cudaMemcpyDeviceToHost, stream_));
  fabric_->wait(stream_, what);
  std::vector<std::string> out;
  for (int r = 0; r < me_.world; ++r) {
    const std::byte* p = all.data() + slot * static_cast<std::size_t>(r);
    std::uint64_t len = 0;
    std::memcpy(&len, p, sizeof len);
    out.emplace_back(reinterpret_cast<const char*>(p + sizeof len),
                     static_cast<std::size_t>(std::min<std::uint64_t>(len, longest)));
  }
  return out;
}

RankCapabilities RankSession::capabilities() const {
  return fabric::device_capabilities(fabric_->device());
}

Decision RankSession::agree_on(const GroupSignature& group) {
  RankDescription me;
  me.rank = me_.rank;
  me.world = me_.world;
  me.host_id = std::hash<std::string>{}([] {
    char name[256] = {};
    (void)gethostname(name, sizeof name - 1);
    return std::string(name);
  }());
  me.group = group;
  me.caps = capabilities();
  return agree_serialized(gather_text(serialize(me), "capability agreement"));
}

}  // namespace tide::nccl_cli
