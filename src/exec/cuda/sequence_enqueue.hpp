// The runner's enqueue (steps 2-3 of NOTE [CUDA call sequences], docs/executor.md): one call of
// a mapped template onto the streams, on the stream path or under capture, its waits
// (sequence_waits.cpp), the copy-engine pool's copies (sequence_copy_pool.cpp), the order of
// calls on their caller streams, the counts of messages sent and the timing events of profiled
// calls (sequence_profile.cpp). Implemented in sequence_enqueue.cpp.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "sequence_abort_words.hpp"
#include "sequence_devices.hpp"
#include "sequence_mapping.hpp"
#include "sequence_slot_graph.hpp"
#include "tide/exec/cuda_sequence.hpp"

namespace tide::exec::sequence_detail {

// Timing events of profiled calls (one-shot programs, CudaRunOptions::profile): per op of
// template 0 (kernels only, else null) and per stream, a pair around it.
struct ProfileEvents {
  bool on = false;  // the next stream-path call records them
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> ops;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> streams;
};

// The enqueue part of the runner. It reads the mapping and the abort words, records the nodes
// of a slot graph's capture and why they cannot re-point (SlotGraphs::repoint_failure), and
// owns what calls change on the stream path: the call order, the wait scratch, the counts.
class Enqueue {
 public:
  Enqueue(const Fixed& fixed, Devices& devices, const Mapping& mapping, SlotGraphs& slot_graphs,
          const AbortWords& aborts)
      : fixed_(fixed),
        devices_(devices),
        mapping_(mapping),
        slot_graphs_(slot_graphs),
        aborts_(aborts) {}

  // One call, template e mod P, onto the streams (NOTE [CUDA call sequences] 2), with `base`
  // as what earlier calls added; under capture when `capture` is set.
  void call(std::int64_t e, std::span<const CudaCallBindings> bindings, float alpha,
            bool accumulate, cudaStream_t caller, const std::vector<std::int64_t>& base,
            Capture* capture);
  // The kernel of a kSum, kLand or kCast with this call's bindings (also to re-point a slot
  // graph's kernel nodes, SlotGraphRunner in sequence_slot_graph_runner.cpp).
  void launch_kernel_op(const SeqOp& op, const CudaCallBindings& binding, float alpha,
                        bool accumulate, cudaStream_t s) const;
  // Orders the next call on `caller` after the previous call where that ran on another
  // stream, and (once the call is enqueued) records where it ran (NOTE [CUDA call sequences] 2).
  void order_after_previous(cudaStream_t caller);
  void mark_done(cudaStream_t caller);
  // messages_sent and message_bytes_sent for call e, however it ran (stream path, a slot
  // graph's launch, a caller graph's launch in prepare_replay).
  void count_messages(std::int64_t e);
  // Profiles (sequence_profile.cpp): the events made once, recorded by the next call.
  void make_profile_events();

  // Calls run one after another (NOTE [CUDA call sequences] 2): each records last_done on its
  // caller stream, and a call on another caller stream first waits for it. The legacy default
  // stream is nullptr, a caller stream like any other: `called` says whether one was seen.
  cudaEvent_t last_done = nullptr;
  cudaStream_t last_caller = nullptr;
  bool called = false;
  // Per device: whether cuStreamBatchMemOp may carry 64-bit waits (else one by one).
  std::map<int, bool> batch_waits;
  std::int64_t messages_sent = 0;  // sender sides enqueued (under the runner's lock)
  std::int64_t message_bytes_sent = 0;
  ProfileEvents profile;

 private:
  void enqueue_op(const SeqOp& op, std::size_t index, std::int64_t e,
                  const CudaCallBindings& binding, float alpha, bool accumulate,
                  const std::vector<std::int64_t>& base, Capture* capture);
  void enqueue_copies(const SeqOp& m, std::size_t index, const CudaCallBindings& b, cudaStream_t s,
                      Capture* capture);
  void wait_terms(cudaStream_t s, int rank, std::int64_t e, std::span<const WaitTerm> terms,
                  const std::vector<std::int64_t>& base, Capture* capture);
  void record_node(cudaStream_t s, const SeqOp& op, std::size_t index, int copy, Capture* capture);
  void profile_head(std::size_t stream);
  void profile_tail(std::size_t stream);

  const Fixed& fixed_;
  Devices& devices_;
  const Mapping& mapping_;
  SlotGraphs& slot_graphs_;
  const AbortWords& aborts_;
  std::vector<CUstreamBatchMemOpParams> memops_;  // reused by every wait
};

}  // namespace tide::exec::sequence_detail
