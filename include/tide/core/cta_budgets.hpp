// The SM budgets TIDE's reduce-scatter runs with unless told otherwise: the CTAs of the Level 1
// sum kernel and of the landing kernel (the training configuration of Sec. 7.1). The program
// builder (RsProgramOptions), every tool (`tide simulate`, `tide calibrate`, `tide-nccl bench`)
// and the benchmarks take their defaults from here, so a default run measures what the library
// runs. The sizing solver (App. G, Eq. 13-14) computes the budgets a given machine needs.
#pragma once

namespace tide {

inline constexpr int kDefaultSumCtas = 16;
inline constexpr int kDefaultLandingCtas = 4;

}  // namespace tide
