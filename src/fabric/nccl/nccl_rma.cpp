// NCCL's host-side one-sided operations: the contract is in nccl_rma.hpp. Every call of
// ncclPutSignal / ncclSignal / ncclWaitSignal in TIDE is in this file.
#include "nccl_rma.hpp"

#include <string>
#include <vector>

#include "tide/core/error.hpp"
#include "tide/version_gates.hpp"

namespace tide::fabric::rma {
namespace {

std::string version_text(int code) {
  // NCCL_VERSION: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
  const bool old = code < 10000;
  const int major = old ? code / 1000 : code / 10000;
  const int minor = old ? code / 100 % 10 : code / 100 % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

[[maybe_unused]] std::string not_built() {
  return "one-sided NCCL messages (ncclPutSignal / ncclWaitSignal) need NCCL >= 2.29; TIDE was "
         "built against NCCL " +
         version_text(NCCL_VERSION_CODE) +
         ": rebuild against NCCL >= 2.29 (TIDE_NCCL_ROOT) or leave TIDE_NCCL_HOST_RMA unset";
}

}  // namespace

std::string unavailable_reason() {
#if TIDE_HAS_NCCL_HOST_RMA
  int loaded = 0;
  if (ncclGetVersion(&loaded) != ncclSuccess) return "ncclGetVersion failed";
  if (loaded < NCCL_VERSION(2, 29, 0)) return "NCCL " + version_text(loaded) + " < 2.29";
  return {};
#else
  return "NCCL " + version_text(NCCL_VERSION_CODE) + " < 2.29";
#endif
}

#if TIDE_HAS_NCCL_HOST_RMA

ncclResult_t put_signal(const void* source, std::size_t bytes, int peer, ncclWindow_t window,
                        std::size_t offset, int context, ncclComm_t comm, cudaStream_t stream) {
  return ncclPutSignal(source, bytes, ncclUint8, peer, window, offset, /*sigIdx=*/0, context,
                       /*flags=*/0u, comm, stream);
}

ncclResult_t signal(int peer, int context, ncclComm_t comm, cudaStream_t stream) {
  return ncclSignal(peer, /*sigIdx=*/0, context, /*flags=*/0u, comm, stream);
}

ncclResult_t wait_signals(std::span<const SignalCount> waits, ncclComm_t comm,
                          cudaStream_t stream) {
  std::vector<ncclWaitSignalDesc_t> descs;
  descs.reserve(waits.size());
  for (const SignalCount& w : waits) {
    ncclWaitSignalDesc_t d{};
    d.opCnt = w.count;
    d.peer = w.peer;
    d.sigIdx = 0;
    d.ctx = w.context;
    descs.push_back(d);
  }
  if (descs.empty()) return ncclSuccess;
  return ncclWaitSignal(static_cast<int>(descs.size()), descs.data(), comm, stream);
}

#else

ncclResult_t put_signal(const void*, std::size_t, int, ncclWindow_t, std::size_t, int, ncclComm_t,
                        cudaStream_t) {
  throw Unsupported(not_built());
}

ncclResult_t signal(int, int, ncclComm_t, cudaStream_t) {
  throw Unsupported(not_built());
}

ncclResult_t wait_signals(std::span<const SignalCount>, ncclComm_t, cudaStream_t) {
  throw Unsupported(not_built());
}

#endif

}  // namespace tide::fabric::rma
