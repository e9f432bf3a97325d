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

// NOTE [lane handoff]
// A lane is the sequence of one communicator's calls of one collective (every group's
// all-gathers, or every group's reduce-scatters) in the order every rank issues them. Calls of
// one group order their reuse of areas through their own sequence's credits (NOTE [call
// sequences]); calls of different groups share the receive stage and TIDE-RS's areas (NOTE
// [communicator arena]) and know nothing of each other's counters. So every lane call is
// preceded, on every rank, by the lane's handoff: call e of a sequence of period 1 on one
// counter H, a signal word of every rank that nothing else touches:
//   1. on the caller stream, after every earlier call of the lane joined it (the runtime
//      orders a call on another caller stream after the previous one): +1 on H of every rank,
//      "this rank finished every earlier call of the lane";
//   2. wait H >= N more than the earlier handoffs added: every rank finished them;
//   3. the lane call itself, whose streams start after the caller's entry event.
// So a call writes a shared area of any rank only after every rank finished every earlier
// call that read or wrote it: a device-side barrier between consecutive calls of a lane,
// with no host synchronisation. It costs each call its overlap with the previous call of the
// lane, which in FSDP2 belongs to another group and is a layer's compute away. The two lanes
// are independent (disjoint areas). Landing slots are not lane areas: an all-gather into a
// slot waits for the release of the slot's previous occupant (NOTE [runtime] 7), here an
// event that the layer records when it is done with the parameters, before its handoff.
// The handoff thus subsumes the edges a group's own sequence keeps between its calls (stage
// credits, bank e mod 2: the faults of collective "sequence" show on a group's sequence
// alone) and, as every rank signals it after its slot's release, an all-gather's wait for the
// local landings to be published free (ag-no-landing-readiness shows on a lone call).
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
  // kLaneNoHandoff: calls start without the handoff's wait; kAgNoSlotRelease: an all-gather
  // into a slot does not wait for the previous occupant's release. Other faults change
  // nothing here (the sequences carry them).
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

// The calls in order on every rank, each after its lane's handoff; after each all-gather its
// layer (a "compute" stream) reads the slot into the call's output and records the slot's
// release, which the slot's next all-gather waits for; a reduce-scatter waits for its group's
// last layer compute (its gradients). Call k's own ops are Op::call k, and
// Program::calls names them on every rank (NOTE [call identities]). Every group's call
// sequences must
// share one arena (their templates' buffer sizes) and one rank count. Throws InvalidArgument
// for a call of a group without that sequence.
LaneProgram lane_program(const std::vector<LaneGroup>& groups, const std::vector<LaneCall>& calls,
                         const LaneProgramOptions& options = {});

}  // namespace tide::program
