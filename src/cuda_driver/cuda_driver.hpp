// The CUDA driver entry points TIDE uses (VMM: cuMemCreate, cuMemMap ...; stream memory
// operations), resolved once at run time through the runtime's driver entry points, so nothing
// links libcuda and a binary built with them still starts, and skips its GPU work, on a machine
// without a driver. The one table of the fabrics, the CUDA executor and `tide calibrate`.
#pragma once

#include <cuda.h>

#include <string>

namespace tide::fabric::detail {

struct DriverApi {
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*mem_get_allocation_granularity)(std::size_t*, const CUmemAllocationProp*,
                                             CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*mem_create)(CUmemGenericAllocationHandle*, std::size_t, const CUmemAllocationProp*,
                         unsigned long long) = nullptr;
  CUresult (*mem_release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*mem_address_reserve)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr,
                                  unsigned long long) = nullptr;
  CUresult (*mem_address_free)(CUdeviceptr, std::size_t) = nullptr;
  CUresult (*mem_map)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle,
                      unsigned long long) = nullptr;
  CUresult (*mem_unmap)(CUdeviceptr, std::size_t) = nullptr;
  CUresult (*mem_set_access)(CUdeviceptr, std::size_t, const CUmemAccessDesc*,
                             std::size_t) = nullptr;
  CUresult (*mem_export_to_shareable_handle)(void*, CUmemGenericAllocationHandle,
                                             CUmemAllocationHandleType,
                                             unsigned long long) = nullptr;
  CUresult (*mem_import_from_shareable_handle)(CUmemGenericAllocationHandle*, void*,
                                               CUmemAllocationHandleType) = nullptr;
  CUresult (*stream_wait_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  CUresult (*stream_write_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int) = nullptr;
  CUresult (*stream_wait_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
  CUresult (*stream_write_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
};

// The table, resolved once (thread-safe). Throws tide::CudaError naming the entry point that
// the driver does not provide.
const DriverApi& driver();

// Throws tide::CudaError "<what> failed: CUDA_ERROR_... (code)" unless r is CUDA_SUCCESS.
void check_driver(CUresult r, const std::string& what);

}  // namespace tide::fabric::detail
