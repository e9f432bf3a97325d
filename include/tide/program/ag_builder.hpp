// Builds the TIDE-AG program (Sec. 3.1-3.2) of one all-gather call from its plan.
#pragma once

#include <cstdint>

#include "tide/core/ag_plan.hpp"
#include "tide/program/program.hpp"

namespace tide::program {

// Where TIDE-AG keeps its bytes in each rank's arena.
struct AgArenaLayout {
  std::int64_t resident = 0;  // S bytes: the resident shard (in-place adoption); absent with a cast
  std::int64_t stage = 0;     // the receive stage, AgPlan::stage_bytes()
  std::int64_t landing = 0;   // N S bytes: the parameter-major landing (Eq. 2)
  std::int64_t arena_bytes = 0;
};

AgArenaLayout ag_arena_layout(const AgPlan& plan);

// Counter and event ids the program uses, so callers and tests can name them.
struct AgProgramIds {
  int ready_event = 0;  // recorded on each rank's completion stream: parameters ready
};

// The program of one TIDE-AG call on every rank. With a mixed-precision cast the inputs
// are each rank's fp32 master shards (kTensor p, R_p K_p elements); otherwise the resident
// shard region of the arena holds the rank's packed bf16/fp32 shard. The output is the
// landing region: on every rank, parameter p is the (N R_p, K_p) matrix at landing +
// Landing(p, 0), whose first D_p rows are real.
Program build_ag_program(const AgPlan& plan, AgProgramIds* ids = nullptr);

}  // namespace tide::program
