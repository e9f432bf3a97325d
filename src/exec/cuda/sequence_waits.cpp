// The waits of a call (steps 2-3 of NOTE [CUDA call sequences], docs/executor.md): a fused
// kWait's terms at host-known thresholds on the stream path, as stream memory operations, or
// under capture as wait kernels whose thresholds follow the slot's generation on the device.
#include <vector>

#include "cuda_driver.hpp"
#include "sequence_generations.hpp"
#include "sequence_state.hpp"
#include "tide/kernels/signal/generation_wait.hpp"

namespace tide::exec {

using sequence_detail::Capture;

namespace {

std::int64_t threshold(const sequence_detail::WaitTerm& w, const std::vector<std::int64_t>& base) {
  return w.total == sequence_detail::kConstantWait ? w.value : base[w.total] + w.value;
}

CUstreamBatchMemOpParams wait_op(std::uint64_t* word, std::int64_t threshold) {
  CUstreamBatchMemOpParams op{};
  op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
  op.waitValue.address = reinterpret_cast<CUdeviceptr>(word);
  op.waitValue.value64 = static_cast<cuuint64_t>(threshold > 0 ? threshold : 0);
  op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  return op;
}

}  // namespace

// The waits of one (fused) kWait (NOTE [CUDA call sequences] 2-3). Outside capture: the
// waits whose threshold is > 0 (the others are met already), as one cuStreamBatchMemOp, or
// one cuStreamWaitValue64 each where the device cannot batch them. Under capture (call e):
// wait kernels, each term's threshold base + value at this call and a step of what Q calls
// add to its counter per generation of the slot.
void sequence_detail::Enqueue::wait_terms(cudaStream_t s, int rank, std::int64_t e,
                                          std::span<const sequence_detail::WaitTerm> terms,
                                          const std::vector<std::int64_t>& base, Capture* capture) {
  if (capture != nullptr) {
    std::vector<kernels::GenerationWait> waits;
    waits.reserve(terms.size());
    for (const sequence_detail::WaitTerm& w : terms) {
      const std::int64_t step = w.total == sequence_detail::kConstantWait
                                    ? 0
                                    : slot_graphs_.slot_period_additions[w.total];
      const std::int64_t t = threshold(w, base);
      if (step == 0 && t <= 0) continue;  // met by every call of the slot
      waits.push_back(cuda_detail::generation_wait(w.word, t, step, e, fixed_.q));
    }
    kernels::launch_generation_waits(waits, slot_graphs_.generations + e % fixed_.q, s);
    return;
  }
  memops_.clear();
  for (const sequence_detail::WaitTerm& w : terms) {
    const std::int64_t t = threshold(w, base);
    if (t > 0) memops_.push_back(wait_op(w.word, t));
  }
  if (memops_.empty()) return;
  const auto stream = reinterpret_cast<CUstream>(s);
  if (memops_.size() > 1 && batch_waits[fixed_.fabric.device_of(rank)]) {
    fabric::detail::check_driver(
        sequence_detail::graph_driver().stream_batch_mem_op(
            stream, static_cast<unsigned int>(memops_.size()), memops_.data(), 0),
        "cuStreamBatchMemOp");
    return;
  }
  for (const CUstreamBatchMemOpParams& op : memops_)
    fabric::detail::check_driver(
        fabric::detail::driver().stream_wait_value64(
            stream, op.waitValue.address, op.waitValue.value64, CU_STREAM_WAIT_VALUE_GEQ),
        "cuStreamWaitValue64");
}

}  // namespace tide::exec
