// Profiled calls of the CUDA executor (CudaRunOptions::profile, one-shot programs): timing
// events around every kernel op and at the head and tail of every stream of the call.
// Synchronisation: the head of a stream is recorded after it waits for the call's entry
// event, the tail before its done event, each kernel's pair on the kernel's stream around its
// launch; CudaExecutor reads them once the call completed (executor.cpp). Stream path only:
// captured calls are not profiled.
#include <cuda_runtime_api.h>

#include "sequence_state.hpp"
#include "tide/cuda/check.hpp"

namespace tide::exec {

using program::OpKind;

namespace {

cudaEvent_t timing_event() {
  cudaEvent_t e = nullptr;
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
  return e;
}

}  // namespace

void sequence_detail::Enqueue::make_profile_events() {
  if (!profile.streams.empty() || mapping_.templates.empty()) return;
  const std::vector<sequence_detail::SeqOp>& ops = mapping_.templates[0].ops;
  profile.ops.assign(ops.size(), {nullptr, nullptr});
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const sequence_detail::SeqOp& m = ops[i];
    const bool kernel =
        m.kind == OpKind::kSum || m.kind == OpKind::kLand || m.kind == OpKind::kCast;
    if (!kernel || m.empty || m.message) continue;
    devices_.use_device_of(m.rank);
    profile.ops[i] = {timing_event(), timing_event()};
  }
  for (std::size_t i = 0; i < devices_.streams.size(); ++i) {
    devices_.use_device_of(devices_.stream_rank[i]);
    profile.streams.emplace_back(timing_event(), timing_event());
  }
}

void sequence_detail::Enqueue::profile_head(std::size_t stream) {
  if (stream >= profile.streams.size()) return;
  TIDE_CUDA_CHECK(cudaEventRecord(profile.streams[stream].first, devices_.streams[stream]));
}

void sequence_detail::Enqueue::profile_tail(std::size_t stream) {
  if (stream >= profile.streams.size()) return;
  TIDE_CUDA_CHECK(cudaEventRecord(profile.streams[stream].second, devices_.streams[stream]));
}

}  // namespace tide::exec
