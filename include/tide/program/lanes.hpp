// The calls of all of a communicator's groups, in one order: the lane handoff that lets groups
// share areas (NOTE [lane handoff]), and their expansion into one program for the reference
// executor, with the landing slots' release edges (NOTE [communicator arena]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tide/program/call_sequence.hpp"
#include "tide/program/faults.hpp"
#include "tide/program/program.hpp"

namespace tide::program {

// A lane is one communicator's calls of one collective, in the order every rank issues them.
// Every lane call is preceded, on every rank, by the lane's handoff on one counter H (a signal
// word nothing else touches): +1 on H of every rank once every earlier lane call joined the
// caller stream, then wait until H holds N more than the earlier handoffs added. So a call
// writes a shared area only after every rank finished every earlier lane call (a device-side
// barrier, no host synchronisation). The two lanes are independent; landing slots are not lane
// areas (an all-gather waits for the slot's release instead). Why, and what the handoff
// subsumes: NOTE [lane handoff] in docs/program.md.
inline constexpr int kAllGatherHandoffWord = 0;  // signal words of every rank
inline constexpr int kReduceScatterHandoffWord = 1;
inline constexpr int kHandoffWords = 2;  // groups' sequences' words follow

// The handoff's sequence for `ranks` ranks: period 1, counter 0 (placed at the lane's word).
CallSequence handoff_sequence(int ranks);

// One group's sequences as the communicator placed them, for lane_program.
struct LaneGroup {
  const CallSequence* all_gather = nullptr;      // may be null when the calls name none
  const CallSequence* reduce_scatter = nullptr;  // idem
  int all_gather_first_counter = 0;              // where its sequences' counters are
  int reduce_scatter_first_counter = 0;
  int landing_slot = 0;             // its slot, by index: groups of one index alias
  std::int64_t landing_offset = 0;  // the slot's bytes the layer reads after an all-gather
  std::int64_t landing_bytes = 0;
  std::string name;  // for call identities (NOTE [call identities])
};

struct LaneCall {
  int group = 0;
  bool reduce_scatter = false;
};

struct LaneProgramOptions {
  // kLaneNoHandoff or kAgNoSlotRelease (other faults are the sequences').
  Fault fault = Fault::kNone;
};

// Where each call's buffers are in the lane program.
struct LaneCallBuffers {
  int first_tensor = 0;  // kTensor of its first gradient (RS) or shard (AG with staged input)
  int output = -1;       // kOutput: its fp32 shard (RS), or what its layer read (AG)
  int done_event = -1;   // on every rank's caller stream: parameters ready (AG), call done (RS)
};

struct LaneProgram {
  Program program;
  std::vector<LaneCallBuffers> calls;  // per LaneCall
};

// The calls in order on every rank, each after its lane's handoff; after an all-gather its layer
// ("compute" stream) reads the slot into the call's output and records the slot's release; a
// reduce-scatter waits for its group's last layer compute (its gradients). Call k's ops are
// Op::call k. One arena and rank count; InvalidArgument for a missing sequence.
LaneProgram lane_program(const std::vector<LaneGroup>& groups, const std::vector<LaneCall>& calls,
                         const LaneProgramOptions& options = {});

}  // namespace tide::program
