// The SM budgets TIDE runs with unless told otherwise: the CTAs of the reduce-scatter's Level 1
// sum kernel and landing kernel (the training configuration of Sec. 7.1), and of the
// all-gather's fp32 -> bf16 cast. The program builders, every tool (`tide simulate`,
// `tide calibrate`, `tide-nccl bench`) and the benchmarks take their defaults from here, so a
// default run measures what the library runs. The sizing solver (App. G, Eq. 13-14) computes
// the reduce-scatter budgets a given machine needs.
#pragma once

namespace tide {

inline constexpr int kDefaultSumCtas = 16;
inline constexpr int kDefaultLandingCtas = 4;
inline constexpr int kDefaultCastCtas = 4;

}  // namespace tide
