// The ipc backend's windows (NOTE [ipc fabric]) as a torch pluggable allocator: tide.fsdp
// allocates the ipc backend's arena as a tensor of a torch.cuda.MemPool over these two
// functions, so that torch's memory statistics include it (NOTE [communicator arena]). The
// memory is exportable to the other processes of the host (fabric::ipc_allocate). Torch loads
// them by name from this module's file (torch.cuda.memory.CUDAPluggableAllocator); they follow
// its signatures. Built with CUDA only.
#include <cuda_runtime_api.h>
#include <sys/types.h>

#include <cstdio>
#include <exception>

#include "tide/fabric/ipc_memory.hpp"

extern "C" {

__attribute__((visibility("default"))) void* tide_ipc_mem_alloc(ssize_t size, int device,
                                                                void* /*stream*/) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return nullptr;
  void* ptr = nullptr;
  try {
    ptr = tide::fabric::ipc_allocate(static_cast<std::int64_t>(size), device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tide: ipc allocation of %zd bytes failed: %s\n", size, e.what());
  }
  (void)cudaSetDevice(previous);
  return ptr;  // nullptr: torch reports the allocation failure
}

__attribute__((visibility("default"))) void tide_ipc_mem_free(void* ptr, ssize_t /*size*/,
                                                              int device, void* /*stream*/) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return;
  try {
    tide::fabric::ipc_free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tide: freeing an ipc allocation failed: %s\n", e.what());
  }
  (void)cudaSetDevice(previous);
}

}  // extern "C"
