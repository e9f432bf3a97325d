// Signal kernels: the counter additions of kSignal and kRailPut (NOTE [CUDA executor op
// mapping]). Contract: a 1-thread kernel adds to 64-bit device counters after a system-scope
// fence, so that a waiter that sees the addition sees every write its stream made before it;
// several counters may go in one launch (NOTE [CUDA call sequences]). With an abort word
// (NOTE [CUDA call sequences] 5) an addition that runs once the word is nonzero adds nothing:
// a rank whose waits were released never signals a peer as if its data were valid.
//
// Host-compilable: raw pointers, values and a cudaStream_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

namespace tide::kernels {

// Enqueues *counter += add on `stream` (atomic, system scope: __threadfence_system() then
// atomicAdd_system), unless `abort` (a device word on the stream's device; nullptr: none)
// holds a nonzero value when the kernel runs. Checks the launch.
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

// Enqueues the additions in order on `stream`, each as launch_counter_add's (fence, then
// atomicAdd_system; none once `abort` is nonzero), in one 1-thread kernel per
// kMaxCounterAddsPerLaunch of them. Checks the launches; nothing for an empty batch.
void launch_counter_adds(std::span<const CounterAdd> adds, cudaStream_t stream,
                         const std::uint64_t* abort = nullptr);

// Loads both counter-addition kernels on the current device (NOTE [preloaded kernels]).
void prepare_counter_adds();

}  // namespace tide::kernels
