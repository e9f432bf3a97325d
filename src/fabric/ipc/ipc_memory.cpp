// NOTE [ipc fabric]: memory the other processes of this host can map, and the record of it.
#include "tide/fabric/ipc_memory.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>

#include "../../cuda_driver/cuda_driver.hpp"
#include "pidfd.hpp"
#include "tide/core/env.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

namespace tide::fabric {
namespace {

using detail::check_driver;
using detail::driver;

constexpr std::int64_t kCudaMallocGrain = std::int64_t{2} << 20;

CUmemAllocationProp fd_allocation(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Why the device cannot make fd-shareable allocations, or "" where it can.
std::string fd_unsupported(int device) {
  TIDE_CUDA_CHECK(cudaSetDevice(device));
  TIDE_CUDA_CHECK(cudaFree(nullptr));  // the primary context, before driver calls
  int vmm = 0;
  int fd = 0;
  check_driver(driver().device_get_attribute(
                   &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device),
               "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
  check_driver(driver().device_get_attribute(
                   &fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, device),
               "cuDeviceGetAttribute(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)");
  if (vmm == 0 || fd == 0) {
    return "device " + std::to_string(device) +
           " has no cuMem allocations with POSIX file descriptor handles";
  }
  return {};
}

IpcHandleChoice decide(int device) {
  const std::optional<std::string> forced = env::value("TIDE_IPC_HANDLES");
  if (forced && *forced != "fd" && *forced != "cuda-ipc" && *forced != "auto") {
    throw InvalidArgument("TIDE_IPC_HANDLES='" + *forced + "' is not one of: fd, cuda-ipc, auto");
  }
  if (forced == std::optional<std::string>("cuda-ipc")) {
    return {IpcHandles::kCudaIpc, "TIDE_IPC_HANDLES=cuda-ipc"};
  }
  std::string why = fd_unsupported(device);
  if (why.empty() && !detail::pidfd_getfd_available(why)) why = "this kernel: " + why;
  if (why.empty() && !detail::peers_may_take_descriptors(why)) why = "this host: " + why;
  if (forced == std::optional<std::string>("fd")) {
    if (!why.empty()) throw Unsupported("TIDE_IPC_HANDLES=fd, but " + why);
    return {IpcHandles::kPosixFd, "TIDE_IPC_HANDLES=fd"};
  }
  if (!why.empty()) return {IpcHandles::kCudaIpc, why};
  return {IpcHandles::kPosixFd,
          "cuMem with POSIX file descriptors: the device, the kernel (pidfd_getfd) and the "
          "host's ptrace policy allow it"};
}

struct Registry {
  std::mutex mutex;
  std::map<int, IpcHandleChoice> choices;        // per device
  std::map<std::uintptr_t, IpcAllocation> live;  // by base address
};

Registry& registry() {
  static Registry r;
  return r;
}

std::int64_t granularity(int device) {
  const CUmemAllocationProp prop = fd_allocation(device);
  std::size_t g = 0;
  check_driver(
      driver().mem_get_allocation_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
      "cuMemGetAllocationGranularity");
  return static_cast<std::int64_t>(g);
}

std::int64_t rounded(std::int64_t bytes, std::int64_t grain) {
  return (bytes + grain - 1) / grain * grain;
}

void* allocate_fd(std::int64_t bytes, int device, std::uint64_t& vmm_handle) {
  const detail::DriverApi& d = driver();
  const CUmemAllocationProp prop = fd_allocation(device);
  CUmemGenericAllocationHandle handle = 0;
  check_driver(d.mem_create(&handle, static_cast<std::size_t>(bytes), &prop, 0),
               "cuMemCreate(" + std::to_string(bytes) + " bytes, POSIX fd handle)");
  CUdeviceptr va = 0;
  CUresult r = d.mem_address_reserve(&va, static_cast<std::size_t>(bytes),
                                     static_cast<std::size_t>(granularity(device)), 0, 0);
  if (r == CUDA_SUCCESS) r = d.mem_map(va, static_cast<std::size_t>(bytes), 0, handle, 0);
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d.mem_set_access(va, static_cast<std::size_t>(bytes), &access, 1);
  }
  if (r != CUDA_SUCCESS) {
    if (va != 0) {
      (void)d.mem_unmap(va, static_cast<std::size_t>(bytes));
      (void)d.mem_address_free(va, static_cast<std::size_t>(bytes));
    }
    (void)d.mem_release(handle);
    check_driver(r, "mapping an ipc allocation of " + std::to_string(bytes) + " bytes");
  }
  vmm_handle = handle;
  return reinterpret_cast<void*>(va);
}

void free_allocation(const IpcAllocation& a) {
  if (a.handles == IpcHandles::kCudaIpc) {
    TIDE_CUDA_CHECK(cudaFree(a.base));
    return;
  }
  const detail::DriverApi& d = driver();
  const auto va = reinterpret_cast<CUdeviceptr>(a.base);
  check_driver(d.mem_unmap(va, static_cast<std::size_t>(a.bytes)), "cuMemUnmap");
  check_driver(d.mem_address_free(va, static_cast<std::size_t>(a.bytes)), "cuMemAddressFree");
  check_driver(d.mem_release(static_cast<CUmemGenericAllocationHandle>(a.vmm_handle)),
               "cuMemRelease");
}

}  // namespace

std::string_view ipc_handles_name(IpcHandles handles) {
  return handles == IpcHandles::kPosixFd ? "fd" : "cuda-ipc";
}

IpcHandleChoice choose_ipc_handles(int device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.choices.find(device);
  if (it == r.choices.end()) it = r.choices.emplace(device, decide(device)).first;
  return it->second;
}

std::int64_t ipc_allocation_bytes(std::int64_t bytes, int device) {
  if (bytes < 1) throw InvalidArgument("an ipc allocation needs at least one byte");
  const bool fd = choose_ipc_handles(device).handles == IpcHandles::kPosixFd;
  return rounded(bytes, fd ? granularity(device) : kCudaMallocGrain);
}

void* ipc_allocate(std::int64_t bytes, int device) {
  const std::int64_t size = ipc_allocation_bytes(bytes, device);
  IpcAllocation a;
  a.bytes = size;
  a.device = device;
  a.handles = choose_ipc_handles(device).handles;
  TIDE_CUDA_CHECK(cudaSetDevice(device));
  if (a.handles == IpcHandles::kPosixFd) {
    a.base = static_cast<std::byte*>(allocate_fd(size, device, a.vmm_handle));
  } else {
    void* p = nullptr;
    TIDE_CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(size)));
    a.base = static_cast<std::byte*>(p);
  }
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.live.emplace(reinterpret_cast<std::uintptr_t>(a.base), a);
  return a.base;
}

void ipc_free(void* memory) {
  if (memory == nullptr) return;
  IpcAllocation a;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const auto it = r.live.find(reinterpret_cast<std::uintptr_t>(memory));
    if (it == r.live.end()) {
      throw InvalidArgument("ipc_free: the memory was not allocated by ipc_allocate");
    }
    a = it->second;
    r.live.erase(it);
  }
  free_allocation(a);
}

std::optional<IpcAllocation> find_ipc_allocation(const void* memory, std::int64_t bytes) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto p = reinterpret_cast<std::uintptr_t>(memory);
  auto it = r.live.upper_bound(p);
  if (it == r.live.begin()) return std::nullopt;
  --it;
  const IpcAllocation& a = it->second;
  if (p + static_cast<std::uintptr_t>(bytes) > it->first + static_cast<std::uintptr_t>(a.bytes)) {
    return std::nullopt;
  }
  return a;
}

}  // namespace tide::fabric
