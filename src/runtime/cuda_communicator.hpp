// The communicator of the GPU backends (nccl, ipc): one process per rank on the GPUs of one
// host. Each group's all-gather and reduce-scatter sequences run on the CUDA sequence runner
// (NOTE [CUDA call sequences]) over the backend's windows (NOTE [runtime window]), enqueued on
// the caller's stream with no host synchronisation; a watchdog makes failure fail-stop
// (NOTE [runtime] 5). A backend adds only where its windows come from (CudaWindows).
// Built only with CUDA (TIDE_RUNTIME_CUDA).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "communicator_base.hpp"
#include "peer_liveness.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/fabric/fabric.hpp"
#include "tide/transport/message_transport.hpp"
#include "watchdog.hpp"

namespace tide::runtime::detail {

// A GPU backend's windows: this rank's and its peers', as the runner's fabric.
class CudaWindows {
 public:
  virtual ~CudaWindows() = default;
  virtual fabric::Fabric& fabric() = 0;
  // The transports of message lane `lane` (CudaSequencePlace::messages): fresh ones per runner.
  virtual transport::MessageTransports transports(int lane) = 0;
  virtual std::byte* window() const = 0;   // this rank's (the arena at offset 0)
  virtual std::int64_t bytes() const = 0;  // as allocated
  // From any thread (the watchdog's): the transport's own waits fail from now on. Idempotent.
  virtual void abort() noexcept {}
  // Gives up every resource without freeing it (device work that could not be drained).
  virtual void release() noexcept = 0;

 protected:
  CudaWindows() = default;
};

class CudaCommunicator : public CommunicatorBase {
 public:
  explicit CudaCommunicator(const CommunicatorOptions& options);
  ~CudaCommunicator() override;

  void all_gather(int group, std::uintptr_t stream, std::span<const void* const> shards) override;
  void reduce_scatter(int group, std::uintptr_t stream, std::span<const void* const> grads,
                      float* out, float alpha, bool accumulate) override;
  GraphCalls take_graph_calls() override;
  void prepare_graph_launch(const GraphCalls& calls) override;
  std::int64_t arena_bytes() const override { return windows_ ? windows_->bytes() : 0; }
  std::int64_t arena_request() override;
  void provide_arena(std::uintptr_t memory, std::int64_t bytes) override;
  void check() const override { check_alive(); }
  void fence(std::uintptr_t stream) override;
  void abort(const std::string& reason) override;

 protected:
  // The backend's part. allocation_bytes: what a window of `window_bytes` takes as allocated
  // (what provide_arena() must hold). open_windows: collective, through store(); `provided` is
  // the caller's memory (provide_arena) or nullptr.
  virtual std::int64_t allocation_bytes(std::int64_t window_bytes) const = 0;
  virtual std::unique_ptr<CudaWindows> open_windows(std::int64_t window_bytes, void* provided) = 0;

  int device_ = 0;
  RankCapabilities caps_;

 private:
  RankCapabilities capabilities() const override { return caps_; }
  void add_path_stats(int group, GroupStats& stats) const override;
  bool host_transport() const override { return false; }
  // no_rail_messages(hosts): the backend's (NOTE [runtime] 9).
  void commit() override;

  void copy_into_slot(int slot, bool wait_release, std::uintptr_t stream,
                      std::span<const std::pair<const void*, void*>> copies,
                      std::span<const std::int64_t> bytes) override;
  void record_release(int slot, std::uintptr_t stream) override;
  void run_in_lane(int lane, exec::CudaSequenceRunner& call,
                   std::span<const exec::CudaCallBindings> bindings, float alpha, bool accumulate,
                   cudaStream_t caller);
  void check_not_first_under_capture(std::uintptr_t stream) const;
  exec::CudaSequenceRunner& runner(int group, int collective) {
    return *runners_[static_cast<std::size_t>(2 * group + collective)];
  }
  void stall_if_injected(cudaStream_t caller);
  void check_alive() const;
  std::chrono::milliseconds watchdog_period() const;
  std::optional<std::string> stalled_call() const;
  std::optional<std::string> call_order_mismatch(int collective, int group,
                                                 const exec::CudaStalledCall& stall) const;
  void fail(const std::string& reason);
  bool stuck() const;
  std::vector<exec::CudaSequenceRunner*> every_runner() const;
  void drain();

  std::int64_t calls_ = 0;               // calls of every group so far
  std::uint64_t* stall_gate_ = nullptr;  // CommunicatorFaultInjection::stall_rank's gate
  // CommunicatorFaultInjection::release_rank is this rank (tests and check-runtime only).
  bool holds_messages() const { return options_.rank == options_.fault_injection.release_rank; }
  mutable std::mutex abort_mutex_;  // aborted_, from the caller's and the watchdog's thread
  std::string aborted_;             // the fail-stop reason; empty while alive
  std::unique_ptr<CudaWindows> windows_;
  std::vector<std::unique_ptr<exec::CudaSequenceRunner>> runners_;
  // NOTE [lane handoff]: per lane its handoff's runner, and the runner of its last call.
  std::unique_ptr<exec::CudaSequenceRunner> handoff_runners_[2];
  exec::CudaSequenceRunner* lane_previous_[2] = {nullptr, nullptr};
  // NOTE [arena lending]: the last fence's stream position, which each lane's next call waits for.
  cudaEvent_t fence_event_ = nullptr;
  bool fence_pending_[2] = {false, false};
  std::vector<cudaEvent_t> release_events_;  // per slot: NOTE [runtime] 7
  std::unique_ptr<PeerLiveness> liveness_;   // NOTE [peer liveness]: from the first call
  std::unique_ptr<Watchdog> watchdog_;       // after runners_: stopped before they go
};

}  // namespace tide::runtime::detail
