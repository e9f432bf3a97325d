// Fault injection (App. E I1-I4, Sec. 3.2): each fault breaks one piece of the protocol on
// every rank; a correct executor catches it as its expected Detection, never otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tide::program {

enum class Fault {
  kNone,
  // TIDE-AG (Sec. 3.1-3.2)
  kAgScatterBeforeArrival,  // scatter a stage slot without waiting for its round's data (I4)
  kAgForwardBeforeArrival,  // forward slots in round d before earlier rounds arrived (I4)
  kAgNoCompletionFence,     // record "parameters ready" without the node-wide fence (3.2)
  kAgNoLandingReadiness,    // scatter into local landings before they are published free (3.2)
  // TIDE-RS (Sec. 4-5, App. E)
  kRsNoStaleZeroing,     // skip stale-block zeroing before a switch-reduce landing (I1)
  kRsLandTwice,          // land one contributor twice (I1)
  kRsReleaseBeforeRead,  // release gradients without waiting for read completion (I2)
  kRsStagingReuse,       // refill a staging slot before its owner summed it (I3)
  kRsOutboxReuse,        // refill an outbox block before its send (Slot-Reuse, I3)
  kRsInboxReuse,         // put into an inbox generation before its credit (I3)
  kRsSendBeforeSum,      // put an outbox block before its sum finished (I4)
  kRsLandBeforeArrival,  // land a wave before all its partials arrived (I4)
  // One-node TIDE-RS, Slot-Reuse (NOTE [one-node TIDE-RS])
  kRsPullBeforeReady,         // pull a peer's gradients before it copied them in (I4)
  kRsReleaseBeforePeerReads,  // free the gradient area before the peers read it (I2, Sec. 5.3)
  // A group's own sequence of calls (call_sequence.hpp; Sec. 3.1, 5.2)
  kAgNoStageCredit,  // put into a receive stage before its target scattered the last call (3.1)
  kRsBankReuse,      // sum into bank e mod 2 before call e - 2 sent and landed it (5.2, I3)
  // A training step (training_step.hpp; Sec. 3.2)
  kStepCallOrder,  // one rank issues two calls in the other order (3.2 same call order, I4)
  // A communicator's groups sharing one arena (NOTE [communicator arena], [lane handoff])
  kLaneNoHandoff,    // a lane call starts before every rank finished the lane's previous call
  kAgNoSlotRelease,  // an all-gather into a shared slot before its previous occupant released it
  // Expert-parallel lanes (App. F, L_sub = 1; ep_lane.hpp)
  kEpAgNoLandingFree,         // put into a peer's landing before it was published free (3.2)
  kEpAgForwardBeforeArrival,  // forward landing rows before the round that carried them (I4)
  kEpAgNoArrivalFence,        // record "parameters ready" before every round arrived (3.2)
  kEpRsSumBeforeArrival,      // sum a rail part before every piece of it arrived (I4)
  kEpRsInboxReuse,            // put a part into an inbox generation before its credit (I3)
  kEpRsReleaseBeforeRead,     // release the gradients before the puts and sums read them (I2)
};

// How a run shows a fault, strongest first (NOTE [fault detection] in
// docs/reference_executor.md: which executor findings map to which class).
enum class Detection : std::uint8_t {
  kNone,               // nothing found
  kCallOrder,          // ranks issue different calls at one position, found before running
  kMalformed,          // an op that cannot execute (bounds, ids), found before running
  kDeadlock,           // a wait that is never satisfied
  kRace,               // two accesses of the same bytes without a happens-before edge
  kUninitialisedRead,  // a read of bytes nothing wrote (or that were released)
  kCorruption,         // a clean run whose output differs from the definition
};

std::string_view detection_name(Detection detection);  // "race", ...; "" for kNone
// Throws InvalidArgument for an unknown name.
Detection parse_detection(std::string_view name);

struct FaultInfo {
  Fault fault;
  std::string_view name;         // CLI name, e.g. "ag-no-completion-fence"
  std::string_view collective;   // "all-gather", "reduce-scatter", "sequence", "step",
                                 // "communicator", "ep-all-gather", "ep-reduce-scatter"
  std::string_view rule;         // the invariant or safety rule it breaks
  std::string_view description;  // one line
  Detection expected;            // how the reference executor must catch it
  std::string_view mechanism;    // why: the missing edge and the bytes that race, or the data
};

const std::vector<FaultInfo>& fault_catalog();  // every fault but kNone
const FaultInfo& fault_info(Fault fault);
// Empty when `fault` (or kNone) belongs to `collective`; else why not, and where to run it.
std::string fault_collective_mismatch(Fault fault, std::string_view collective);
// Throws InvalidArgument listing the known names.
Fault parse_fault(std::string_view name);

}  // namespace tide::program
