// ncclMemAlloc as a torch pluggable allocator: tide.fsdp allocates the nccl backend's arena
// as a tensor of a torch.cuda.MemPool over these two functions where the NCCL process group
// offers no allocator of its own, so that torch's memory statistics include the arena (NOTE
// [communicator arena]). Torch loads them by name from this module's file
// (torch.cuda.memory.CUDAPluggableAllocator); they follow its signatures. Built with NCCL only.
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <sys/types.h>

#include <cstdio>

extern "C" {

__attribute__((visibility("default"))) void* tide_nccl_mem_alloc(ssize_t size, int device,
                                                                 void* /*stream*/) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    return nullptr;
  }
  void* ptr = nullptr;
  const ncclResult_t r = ncclMemAlloc(&ptr, static_cast<size_t>(size));
  (void)cudaSetDevice(previous);
  if (r != ncclSuccess) {
    std::fprintf(stderr, "tide: ncclMemAlloc(%zd) failed: %s\n", size, ncclGetErrorString(r));
    return nullptr;  // torch reports the allocation failure
  }
  return ptr;
}

__attribute__((visibility("default"))) void tide_nccl_mem_free(void* ptr, ssize_t /*size*/,
                                                               int device, void* /*stream*/) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) return;
  (void)ncclMemFree(ptr);
  (void)cudaSetDevice(previous);
}

}  // extern "C"
