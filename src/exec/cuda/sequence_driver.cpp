// The driver entry points the sequence runner calls (GraphDriver in sequence_state.hpp),
// resolved once per process at run time, so that nothing links libcuda.
#include <string>

#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/version_gates.hpp"

namespace tide::exec {

namespace sequence_detail {
namespace {

// The entry point `name`, or null where the driver lacks it.
template <typename Fn>
void resolve_optional_entry(Fn& fn, const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if TIDE_HAS_DRIVER_ENTRY_POINT_BY_VERSION
  TIDE_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found));
#else
  TIDE_CUDA_CHECK(cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &found));
#endif
  fn = found == cudaDriverEntryPointSuccess ? reinterpret_cast<Fn>(p) : nullptr;
}

template <typename Fn>
void resolve_entry(Fn& fn, const char* name) {
  resolve_optional_entry(fn, name);
  if (fn == nullptr) throw CudaError(std::string("CUDA driver entry point ") + name + " not found");
}

}  // namespace

const GraphDriver& graph_driver() {
  static const GraphDriver d = [] {
    GraphDriver g;
    resolve_entry(g.ctx_get_current, "cuCtxGetCurrent");
    resolve_optional_entry(g.stream_batch_mem_op, "cuStreamBatchMemOp");
    return g;
  }();
  return d;
}

}  // namespace sequence_detail

}  // namespace tide::exec
