// CUDA error checks for every layer that calls CUDA (kernels, fabrics, executors, runtime,
// calibration, tools): every runtime call and every launch is checked, and a failure throws
// tide::CudaError with the call, the file, the line and CUDA's own message. CUDA support, not
// part of any one layer; core stays free of CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace tide {

// A CUDA runtime call or kernel launch failed (a driver, device or resource error, not a
// caller's argument: those throw InvalidArgument before anything is launched).
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* what, const char* file,
                                          int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + what +
                  " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}
}  // namespace detail

}  // namespace tide

#define TIDE_CUDA_CHECK(call)                                                         \
  do {                                                                                \
    const cudaError_t tide_cuda_status_ = (call);                                     \
    if (tide_cuda_status_ != cudaSuccess) {                                           \
      ::tide::detail::throw_cuda_error(tide_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)

// After a <<<>>> launch: reports launch-configuration errors (not asynchronous faults).
#define TIDE_CUDA_CHECK_LAUNCH() TIDE_CUDA_CHECK(cudaGetLastError())
