// Builds the TIDE-AG program (Sec. 3.1-3.2) of one all-gather call from its plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/program/faults.hpp"
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

struct AgProgramOptions {
  // Model FSDP2's compute stream: the landing's previous reader before the call, the layer
  // reading the parameters into the output after READY (Sec. 3.2's rules become checkable).
  bool consumer = false;
  // With a consumer and no placement.entry_event: model the previous reader (a lone call).
  bool previous_user = true;
  Fault fault = Fault::kNone;  // an all-gather fault to inject on every rank
};

// Counter and event ids the program uses, so callers and tests can name them.
struct AgProgramIds {
  int ready_event = 0;  // recorded on each rank's completion stream: parameters ready
  int used_event = 0;   // with a consumer: recorded when the layer finished reading them
};

// What a TIDE-AG call shares with earlier calls (Sec. 3.1-3.2): cumulative stage credits
// (round d's target adds one per call once it scattered and forwarded) and each rank's
// previous scatter, which the next call waits for before reusing its stage.
struct AgShared {
  int stage_credit = 0;                  // first of R STAGE_CREDIT counters
  int calls = 0;                         // all-gather calls before this one
  std::vector<int> scatter_done_events;  // per earlier call: its SCATTER_DONE event id
};

// One TIDE-AG call on every rank, from fp32 masters (kTensor p; a cast) or the resident shard to
// the landing: parameter p the (N R_p, K_p) matrix at landing + Landing(p, 0), D_p rows real.
Program build_ag_program(const AgPlan& plan, const AgProgramOptions& options = {},
                         AgProgramIds* ids = nullptr);

// Call a of a step at `placement` (entry_event: the landing's previous user) in `areas`,
// sharing `shared` (advanced past it); buffer sizes left empty.
Program build_ag_call(const AgPlan& plan, const AgProgramOptions& options,
                      const CallPlacement& placement, const AgArenaLayout& areas, AgShared& shared,
                      AgProgramIds* ids = nullptr);
int ag_call_event_count();
// The kTensor inputs of one call: per parameter, its fp32 master shard (a cast) or its shard
// in the all-gather dtype (staged shards); none with a resident shard.
std::vector<std::int64_t> ag_input_bytes(const AgPlan& plan);
// The same for a group's layout and shard options (any all-gather program of that group).
std::vector<std::int64_t> shard_input_bytes(const GroupLayout& layout, const AgOptions& options);

// Why `fault` cannot show on this plan (empty when it can), e.g. forwarding on two nodes.
std::string ag_fault_inapplicable(Fault fault, const AgPlan& plan);

}  // namespace tide::program
