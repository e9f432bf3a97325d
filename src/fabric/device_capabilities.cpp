// device_capabilities(): this process's GPU, CUDA runtime and NCCL, for the agreement.
// Built with CUDA; the NCCL fields are filled where the build has NCCL (TIDE_CAPS_WITH_NCCL).
#include "tide/fabric/device_capabilities.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#if TIDE_CAPS_WITH_NCCL
#include <nccl.h>
#endif

#include "cuda_driver.hpp"
#include "tide/cuda/check.hpp"
#include "tide/version_gates.hpp"

namespace tide::fabric {

RankCapabilities device_capabilities(int device) {
  RankCapabilities c;
  c.cuda_runtime_version = CUDART_VERSION;
  int nccl = 0;
#if TIDE_CAPS_WITH_NCCL
  if (ncclGetVersion(&nccl) == ncclSuccess) c.nccl_version = nccl;
#endif
  const int dev = device;
  cudaDeviceProp prop{};
  TIDE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  c.compute_capability = prop.major * 10 + prop.minor;
  int optin = 0;
  TIDE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  c.shared_memory_per_block = optin;
  const auto& d = fabric::detail::driver();
  auto attribute = [&](CUdevice_attribute a) {
    int v = 0;
    return d.device_get_attribute(&v, a, dev) == CUDA_SUCCESS && v != 0;
  };
  c.vmm = attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
  c.stream_memops = attribute(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
  c.multicast_capable = attribute(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED);
  int driver_version = 0;
  TIDE_CUDA_CHECK(cudaDriverGetVersion(&driver_version));
  c.copy_engine_batch = TIDE_HAS_CUDA_MEMCPY_BATCH && driver_version >= 12080;
#if TIDE_CAPS_WITH_NCCL
  c.symmetric_windows = TIDE_HAS_NCCL_SYMMETRIC_WINDOWS && nccl >= 22700;
  c.nccl_device_api = TIDE_HAS_NCCL_DEVICE_API && nccl >= 22800;
  c.nccl_host_rma = TIDE_HAS_NCCL_HOST_RMA && nccl >= 22900;
#endif
  return c;
}

}  // namespace tide::fabric
