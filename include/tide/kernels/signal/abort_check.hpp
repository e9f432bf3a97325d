// Signal kernels: the peer abort check and the abort token. Contract: at the end of every call
// of a sequence whose ranks publish abort words (NOTE [CUDA call sequences] 5), a 1-warp
// kernel on the caller stream lets the call complete only while no rank's waits have been
// released; a message's sender records what it knows of the abort state in a token
// (NOTE [abort relay]).
//
// Host-compilable: raw pointers, device tables of pointers and a cudaStream_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tide::kernels {

// Device tables (on the caller stream's device): `watched` are the abort words of the ranks
// that other processes run (peer mappings), `own` this process's ranks' words.
struct AbortCheck {
  const std::uint64_t* const* watched = nullptr;
  int watched_count = 0;
  const std::uint64_t* const* own = nullptr;
  int own_count = 0;
};

// Enqueues the check on `stream`: returns at once while every watched word is 0; where one is
// set, spins until every own word is set (this process released its waits: its watchdog
// timed the call out), so that the call, and the caller's work after it, never completes as
// valid. Graph-capturable (fixed pointers). Checks the launch.
void launch_abort_check(const AbortCheck& check, cudaStream_t stream);

// NOTE [abort relay] (docs/executor.md): enqueues one 1-thread kernel that, after a system-scope
// fence, writes into `token` base | (1 where any of `verdict`'s words is nonzero, else 0);
// `base` (bit 0 clear) numbers one-sided messages' tokens (NOTE [one-sided messages]).
// Checks the launch.
void launch_abort_token(const AbortCheck& verdict, std::uint64_t* token, cudaStream_t stream,
                        std::uint64_t base = 0);

// Loads the abort check's kernels on the current device (NOTE [preloaded kernels]).
void prepare_abort_check();

}  // namespace tide::kernels
