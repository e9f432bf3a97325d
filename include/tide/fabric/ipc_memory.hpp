// Device memory that the other processes of this host can map (NOTE [ipc fabric]): the ipc
// fabric's windows, also handed to torch.cuda.MemPool (tide._C's tide_ipc_mem_alloc) so that
// torch's memory statistics count them. Built only where CUDA is found.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tide::fabric {

// How an allocation is shared with another process.
enum class IpcHandles : std::uint8_t {
  kPosixFd,  // cuMemCreate with a POSIX file descriptor handle; peers take it with pidfd_getfd
  kCudaIpc,  // cudaMalloc and cudaIpcGetMemHandle / cudaIpcOpenMemHandle
};

std::string_view ipc_handles_name(IpcHandles handles);  // "fd" or "cuda-ipc"

struct IpcHandleChoice {
  IpcHandles handles = IpcHandles::kCudaIpc;
  std::string why;  // one line: what decided it
};

// The handles this process uses on `device` (decided once): TIDE_IPC_HANDLES forces one (fd without
// support: Unsupported); else fd where the device has POSIX fd handles, the kernel pidfd_getfd and
// peers may take this process's descriptors (Yama 0 or CAP_SYS_PTRACE); else cuda-ipc.
IpcHandleChoice choose_ipc_handles(int device);

// The bytes an allocation of `bytes` takes on `device` (rounded up to the VMM granularity for
// fd handles, to 2 MiB for cudaMalloc).
std::int64_t ipc_allocation_bytes(std::int64_t bytes, int device);

// Allocates and records ipc_allocation_bytes(bytes, device) with choose_ipc_handles' handles
// (CudaError). ipc_free(nullptr) does nothing; other memory: InvalidArgument.
void* ipc_allocate(std::int64_t bytes, int device);
void ipc_free(void* memory);

// A recorded allocation.
struct IpcAllocation {
  std::byte* base = nullptr;
  std::int64_t bytes = 0;
  int device = -1;
  IpcHandles handles = IpcHandles::kCudaIpc;
  std::uint64_t vmm_handle = 0;  // CUmemGenericAllocationHandle (fd handles)
};

// The recorded allocation that holds [memory, memory + bytes), or nullopt.
std::optional<IpcAllocation> find_ipc_allocation(const void* memory, std::int64_t bytes);

}  // namespace tide::fabric
