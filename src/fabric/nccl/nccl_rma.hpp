// NCCL's host-side one-sided operations (NCCL >= 2.29, TIDE_HAS_NCCL_HOST_RMA): the only calls
// of ncclPutSignal, ncclSignal and ncclWaitSignal in TIDE (nccl_rma.cpp). The NCCL fabric uses
// them for one-sided messages (NOTE [nccl fabric] 5, NOTE [one-sided messages]).
//
// Contract, from NCCL 2.30's nccl.h (the only source read: it does not say whether these
// calls may be captured into CUDA graphs, so TIDE never captures them):
// - put_signal: enqueues on `stream` a write of `bytes` from this rank's `source` into the
//   window `window` (registered on `comm` by every rank) of rank `peer` at `offset` bytes, and
//   a signal on signal index 0 of context `context` that the peer's wait counts.
// - signal: the signal alone.
// - wait_signals: enqueues on `stream` a wait until, for every entry, `count` more signals
//   from `peer` on signal index 0 of `context` have arrived.
// Each returns NCCL's result (ncclInProgress on a non-blocking communicator: the caller settles
// it). Where TIDE was built without TIDE_HAS_NCCL_HOST_RMA they throw tide::Unsupported naming
// the NCCL version built against and the one needed.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <span>
#include <string>

namespace tide::fabric::rma {

struct SignalCount {
  int peer = -1;
  int context = 0;
  int count = 0;
};

// Empty where this build and the loaded NCCL library both have host RMA; else why not (e.g.
// "NCCL 2.28.9 < 2.29"). Calls ncclGetVersion.
std::string unavailable_reason();

ncclResult_t put_signal(const void* source, std::size_t bytes, int peer, ncclWindow_t window,
                        std::size_t offset, int context, ncclComm_t comm, cudaStream_t stream);
ncclResult_t signal(int peer, int context, ncclComm_t comm, cudaStream_t stream);
ncclResult_t wait_signals(std::span<const SignalCount> waits, ncclComm_t comm, cudaStream_t stream);

}  // namespace tide::fabric::rma
