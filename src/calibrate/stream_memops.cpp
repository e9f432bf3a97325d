// Stream memory operations through cudaGetDriverEntryPoint*; see stream_memops.hpp.
#include "stream_memops.hpp"

#include <cuda.h>

#include <string>

#include "tide/kernels/cuda_check.hpp"
#include "tide/version_gates.hpp"

namespace tide::calibrate {
namespace {

using WriteFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WaitFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

void* entry_point(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if TIDE_HAS_DRIVER_ENTRY_POINT_BY_VERSION
  TIDE_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
#else
  TIDE_CUDA_CHECK(cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &found));
#endif
  if (found != cudaDriverEntryPointSuccess || fn == nullptr)
    throw CudaError(std::string("driver entry point ") + name + " not found");
  return fn;
}

struct Table {
  WriteFn write = reinterpret_cast<WriteFn>(entry_point("cuStreamWriteValue32"));
  WaitFn wait = reinterpret_cast<WaitFn>(entry_point("cuStreamWaitValue32"));
};

const Table& table() {
  static const Table t;
  return t;
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS)
    throw CudaError(std::string(what) + " failed: CUresult " + std::to_string(static_cast<int>(r)));
}

}  // namespace

void stream_write_u32(cudaStream_t stream, std::uint32_t* addr, std::uint32_t value) {
  check(table().write(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(addr),
                      value, CU_STREAM_WRITE_VALUE_DEFAULT),
        "cuStreamWriteValue32");
}

void stream_wait_geq_u32(cudaStream_t stream, std::uint32_t* addr, std::uint32_t value) {
  check(table().wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(addr), value,
                     CU_STREAM_WAIT_VALUE_GEQ),
        "cuStreamWaitValue32");
}

}  // namespace tide::calibrate
