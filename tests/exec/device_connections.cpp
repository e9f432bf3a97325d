// The sequence runner's GPU tests run many ranks' streams in one process (4 ranks of RS at
// 1 x 4 hold about 32 streams, plus the watch's readers). With CUDA's default of 8 hardware
// queues, a release copy can be queued behind a held wait on another stream and drain only once
// that wait is met (paper App. E; bench/results/hwqueues/): the release tests would then fail
// by design, not by a bug. The runtime's answer is the demo's CUDA_DEVICE_MAX_CONNECTIONS=32
// (docs/runtime.md, Hardware queues); these tests take the same setting, before any CUDA call
// creates the context, unless the caller chose one.
#include <cstdlib>

namespace {

const bool kDeviceConnectionsSet = [] {
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  return true;
}();

}  // namespace
