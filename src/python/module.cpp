// tide._C: the Python binding's module. The runtime's classes bind here.
#include <nanobind/nanobind.h>

#include "runtime_binding.hpp"

NB_MODULE(_C, module) {
  module.doc() = "TIDE's native module: the runtime's communicator, bound for tide.fsdp";
  module.attr("__version__") = TIDE_VERSION;
  tide::python::bind_runtime(module);
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
