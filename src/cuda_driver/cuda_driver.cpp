// Resolves the driver entry points of cuda_driver.hpp through the CUDA runtime (no libcuda
// link). The version gate lives in tide/version_gates.hpp.
#include "cuda_driver.hpp"

#include <cuda_runtime_api.h>

#include "tide/cuda/check.hpp"
#include "tide/version_gates.hpp"

namespace tide::fabric::detail {
namespace {

// The ABI TIDE was written against: the entry points as CUDA 12.0 defines them.
constexpr int kDriverAbi = 12000;

template <typename Fn>
void resolve(Fn& fn, const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if TIDE_HAS_DRIVER_ENTRY_POINT_BY_VERSION
  TIDE_CUDA_CHECK(
      cudaGetDriverEntryPointByVersion(name, &p, kDriverAbi, cudaEnableDefault, &found));
#else
  TIDE_CUDA_CHECK(cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &found));
#endif
  if (found != cudaDriverEntryPointSuccess || p == nullptr) {
    throw CudaError(std::string("CUDA driver entry point ") + name +
                    " not found: update the NVIDIA driver (TIDE needs the CUDA 12.0 driver API)");
  }
  fn = reinterpret_cast<Fn>(p);
}

DriverApi load() {
  DriverApi d;
  resolve(d.get_error_name, "cuGetErrorName");
  resolve(d.device_get_attribute, "cuDeviceGetAttribute");
  resolve(d.mem_get_allocation_granularity, "cuMemGetAllocationGranularity");
  resolve(d.mem_create, "cuMemCreate");
  resolve(d.mem_release, "cuMemRelease");
  resolve(d.mem_address_reserve, "cuMemAddressReserve");
  resolve(d.mem_address_free, "cuMemAddressFree");
  resolve(d.mem_map, "cuMemMap");
  resolve(d.mem_unmap, "cuMemUnmap");
  resolve(d.mem_set_access, "cuMemSetAccess");
  resolve(d.mem_export_to_shareable_handle, "cuMemExportToShareableHandle");
  resolve(d.mem_import_from_shareable_handle, "cuMemImportFromShareableHandle");
  resolve(d.stream_wait_value64, "cuStreamWaitValue64");
  resolve(d.stream_write_value64, "cuStreamWriteValue64");
  resolve(d.stream_wait_value32, "cuStreamWaitValue32");
  resolve(d.stream_write_value32, "cuStreamWriteValue32");
  return d;
}

}  // namespace

const DriverApi& driver() {
  static const DriverApi api = load();
  return api;
}

void check_driver(CUresult r, const std::string& what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (driver().get_error_name == nullptr || driver().get_error_name(r, &name) != CUDA_SUCCESS ||
      name == nullptr) {
    name = "unknown CUresult";
  }
  throw CudaError(what + " failed: " + name + " (" + std::to_string(static_cast<int>(r)) + ")");
}

}  // namespace tide::fabric::detail
