// Stream memory operations (cuStreamWriteValue32 / cuStreamWaitValue32): the device-memory
// signals TIDE's streams use instead of host round trips (Sec. 3.2, App. E). Resolved through
// the runtime's driver entry points, so nothing links libcuda and a binary built with them
// still starts on a machine without a driver.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tide::calibrate {

// *addr = value, in stream order.
void stream_write_u32(cudaStream_t stream, std::uint32_t* addr, std::uint32_t value);
// Blocks `stream` until (int32)(*addr - value) >= 0 (CU_STREAM_WAIT_VALUE_GEQ).
void stream_wait_geq_u32(cudaStream_t stream, std::uint32_t* addr, std::uint32_t value);

}  // namespace tide::calibrate
