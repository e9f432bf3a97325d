// Signal kernels: kSignal's and kRailPut's counter additions (NOTE [CUDA executor op mapping]).
// A 1-thread kernel adds to 64-bit counters after a system-scope fence (a waiter that sees the
// addition sees the stream's earlier writes); none once the abort word is nonzero (NOTE [CUDA
// call sequences] 5). Host-compilable: raw pointers, values and a cudaStream_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

namespace tide::kernels {

// *counter += add (__threadfence_system(), atomicAdd_system) unless `abort` (nullptr: none) is
// nonzero when it runs. Checks the launch.
void launch_counter_add(std::uint64_t* counter, std::uint64_t add, cudaStream_t stream,
                        const std::uint64_t* abort = nullptr);

// NOTE [abort relay] (docs/executor.md): the receiver's addition of a message, one 1-thread
// kernel on `stream`: nothing where `abort` (nullptr: none) is nonzero; else, after a
// system-scope fence, where `token` differs from `expected` (0; a one-sided message's number,
// NOTE [one-sided messages]) it stores 1 into `relay` and adds nothing; else *counter += add
// as launch_counter_add. Checks the launch.
void launch_relayed_counter_add(std::uint64_t* counter, std::uint64_t add,
                                const std::uint64_t* token, std::uint64_t* relay,
                                cudaStream_t stream, const std::uint64_t* abort,
                                std::uint64_t expected = 0);

// One addition of a batch.
struct CounterAdd {
  std::uint64_t* counter = nullptr;
  std::uint64_t add = 0;
};

// The most additions one launch carries (its kernel parameters: 16 bytes each).
inline constexpr std::size_t kMaxCounterAddsPerLaunch = 32;

// The additions in order, each as launch_counter_add's, one kernel per
// kMaxCounterAddsPerLaunch. Checks the launches.
void launch_counter_adds(std::span<const CounterAdd> adds, cudaStream_t stream,
                         const std::uint64_t* abort = nullptr);

// Loads both counter-addition kernels on the current device (NOTE [preloaded kernels]).
void prepare_counter_adds();

}  // namespace tide::kernels
