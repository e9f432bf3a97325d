// tide._C: the Python binding's module. The runtime's classes bind here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "runtime_binding.hpp"
#include "tide/core/rules.hpp"

NB_MODULE(_C, module) {
  module.doc() = "TIDE's native module: the runtime's communicator, bound for tide.fsdp";
  module.attr("__version__") = TIDE_VERSION;
  tide::python::bind_runtime(module);
  // The rules Python applies before the runtime is asked (tide/core/rules.hpp): one source.
  module.attr("MAX_PARAMS_PER_GROUP") = tide::kMaxParamsPerGroup;
  module.attr("NCCL_FABRIC_MIN_VERSION") =
      nanobind::make_tuple(tide::kNcclFabricMinVersion[0], tide::kNcclFabricMinVersion[1]);
  module.def(
      "nccl_environment_refusal",
      [](const std::optional<std::string>& nvls_enable,
         const std::optional<std::string>& cumem_enable) {
        return tide::nccl_environment_refusal(nvls_enable ? nvls_enable->c_str() : nullptr,
                                              cumem_enable ? cumem_enable->c_str() : nullptr);
      },
      nanobind::arg("nvls_enable").none(), nanobind::arg("cumem_enable").none(),
      "Why NCCL_NVLS_ENABLE / NCCL_CUMEM_ENABLE (None: unset) keep the nccl backend from its "
      "symmetric windows; '' when they do not.");
#ifdef TIDE_NCCL_ALLOCATOR
  // tide_nccl_mem_alloc / tide_nccl_mem_free in this file: a torch pluggable allocator.
  module.attr("nccl_allocator") = true;
#else
  module.attr("nccl_allocator") = false;
#endif
#ifdef TIDE_IPC_ALLOCATOR
  // tide_ipc_mem_alloc / tide_ipc_mem_free: the ipc backend's exportable windows for torch.
  module.attr("ipc_allocator") = true;
#else
  module.attr("ipc_allocator") = false;
#endif
}
