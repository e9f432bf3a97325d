// The counter addition of kSignal and kRailPut (NOTE [CUDA executor op mapping]): a 1-thread
// kernel that adds to a 64-bit device counter after a system-wide fence.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tide::exec::cuda_detail {

// Enqueues *counter += add on `stream` (atomic, system scope: __threadfence_system() then
// atomicAdd_system). Checks the launch.
void launch_counter_add(std::uint64_t* counter, std::uint64_t add, cudaStream_t stream);

}  // namespace tide::exec::cuda_detail
