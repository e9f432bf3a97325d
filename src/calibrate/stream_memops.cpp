// Stream memory operations through the driver entry-point table (cuda_driver.hpp); see
// stream_memops.hpp.
#include "tide/calibrate/stream_memops.hpp"

#include "cuda_driver.hpp"

namespace tide::calibrate {

using fabric::detail::check_driver;
using fabric::detail::driver;

void stream_write_u32(cudaStream_t stream, std::uint32_t* addr, std::uint32_t value) {
  check_driver(driver().stream_write_value32(reinterpret_cast<CUstream>(stream),
                                             reinterpret_cast<CUdeviceptr>(addr), value,
                                             CU_STREAM_WRITE_VALUE_DEFAULT),
               "cuStreamWriteValue32");
}

void stream_wait_geq_u32(cudaStream_t stream, std::uint32_t* addr, std::uint32_t value) {
  check_driver(driver().stream_wait_value32(reinterpret_cast<CUstream>(stream),
                                            reinterpret_cast<CUdeviceptr>(addr), value,
                                            CU_STREAM_WAIT_VALUE_GEQ),
               "cuStreamWaitValue32");
}

}  // namespace tide::calibrate
