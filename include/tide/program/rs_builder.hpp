// Builds the TIDE-RS program (Sec. 4-5, Alg. 1) of one reduce-scatter call from its plan.
#pragma once

#include <cstdint>
#include <string>

#include "tide/core/rs_plan.hpp"
#include "tide/program/faults.hpp"
#include "tide/program/program.hpp"

namespace tide::program {

// How a wave lands. kPull (the default, and the only form run on our machines) reads the
// wave's partials from its W contributors through peer pointers. kSwitchReduce models the
// multimem form (Sec. 4.2): it reads inbox block s on all L GPUs, so stale blocks must be
// zeroed (NOTE [stale-block zeroing]) and the own-node spare copied into the inbox first.
enum class LandingStyle : std::uint8_t { kPull, kSwitchReduce };

struct RsProgramOptions {
  float alpha = 1.0f;
  bool accumulate = false;
  int sum_ctas = 16;  // Level 1 CTA budget (training configuration, Sec. 7.1)
  int landing_ctas = 4;
  LandingStyle landing = LandingStyle::kPull;
  int call_index = 0;          // position in a sequence of calls: picks the bank, e mod 2
  Fault fault = Fault::kNone;  // a reduce-scatter fault to inject on every rank
};

// Byte offsets of TIDE-RS's areas in each rank's arena (sizes from RsPlan::memory()).
struct RsArenaLayout {
  std::int64_t staging = 0;  // n_stg slots, each (L - 1) contributions x L rows x E_pass
  std::int64_t outbox = 0;   // 2 banks x n_out blocks
  std::int64_t spares = 0;   // 2 banks x n_part own-node spares
  std::int64_t inbox = 0;    // n_par generations x L blocks
  std::int64_t arena_bytes = 0;
};

RsArenaLayout rs_arena_layout(const RsPlan& plan);

struct RsProgramIds {
  int done_event = 0;       // recorded on each rank's caller stream: the output is final
  int read_done_event = 0;  // recorded on each rank's host stream: gradients may be freed
};

// The program of one TIDE-RS call on every rank. Inputs: each rank's gradients G_p
// (kTensor p, D_p x K_p elements of the plan's gradient dtype) and, when accumulating, its
// output. Output: each rank's packed fp32 shard (kOutput, S_fp32 bytes), Eq. 5.
Program build_rs_program(const RsPlan& plan, const RsProgramOptions& options,
                         RsProgramIds* ids = nullptr);

// Why `fault` cannot show on this plan and these options (empty when it can), e.g. outbox
// reuse under In-Place, whose outbox never refills a block.
std::string rs_fault_inapplicable(Fault fault, const RsPlan& plan, const RsProgramOptions& options);

}  // namespace tide::program
