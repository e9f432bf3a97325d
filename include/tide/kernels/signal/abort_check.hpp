// Signal kernels: the peer abort check at the end of every call (NOTE [CUDA call sequences]
// 5) and a message's abort token (NOTE [abort relay]).
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

// Enqueues the 1-warp check: returns at once while every watched word is 0; else spins until
// every own word is set (the watchdog released this process), so the call never completes as
// valid. Graph-capturable. Checks the launch.
void launch_abort_check(const AbortCheck& check, cudaStream_t stream);

// NOTE [abort relay] (docs/executor.md): enqueues one 1-thread kernel that, after a system-scope
// fence, writes into `token` base | (1 where any of `verdict`'s words is nonzero, else 0); `base`
// (bit 0 clear) numbers one-sided messages' tokens (NOTE [one-sided messages]). Checks the launch.
void launch_abort_token(const AbortCheck& verdict, std::uint64_t* token, cudaStream_t stream,
                        std::uint64_t base = 0);

// Loads the abort check's kernels on the current device (NOTE [preloaded kernels]).
void prepare_abort_check();

}  // namespace tide::kernels
