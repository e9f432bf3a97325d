// TIDE-AG's mixed-precision cast (Sec. 3.1): fp32 master shards to bf16 in stage slot 0,
// bf16 = round-to-nearest-even(fp32), NaN -> 0x7FFF (NOTE [arithmetic order]). Any length and
// alignment. Host-compilable: raw pointers, sizes and a cudaStream_t.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tide::kernels {

inline constexpr int kMaxCastCtas = 65535;

// dst: n bf16 values (as raw 16-bit words, 2-byte aligned); src: n fp32 values (4-byte
// aligned). ctas = 0 picks a full grid (4 CTAs of 512 threads per SM).
void launch_cast_fp32_to_bf16(std::uint16_t* dst, const float* src, std::int64_t n,
                              cudaStream_t stream, int ctas = 0);

// Loads the cast kernel on the current device (NOTE [preloaded kernels]). Idempotent.
void prepare_cast();

}  // namespace tide::kernels
