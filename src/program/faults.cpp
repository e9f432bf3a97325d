#include "tide/program/faults.hpp"

#include <string>

#include "tide/core/error.hpp"

namespace tide::program {

const std::vector<FaultInfo>& fault_catalog() {
  static const std::vector<FaultInfo> catalog = {
      {Fault::kAgScatterBeforeArrival, "ag-scatter-before-arrival", "all-gather", "I4",
       "scatter stage slots without waiting for their round's DATA signal", Detection::kRace,
       "no edge from the round's DATA signal to the scatter: it reads stage slots while the peer's "
       "rail put writes them"},
      {Fault::kAgForwardBeforeArrival, "ag-forward-before-arrival", "all-gather", "I4",
       "forward slots in round d before the earlier rounds that carried them arrived",
       Detection::kRace,
       "no edge from round d-1's arrival to round d's put: it forwards stage slots the earlier "
       "round's put is still writing"},
      {Fault::kAgNoCompletionFence, "ag-no-completion-fence", "all-gather",
       "Sec. 3.2 completion before consumption",
       "record 'parameters ready' without waiting for every local GPU's scatters", Detection::kRace,
       "no edge from the local GPUs' scatters to 'parameters ready': the layer reads landing bytes "
       "a peer's scatter writes"},
      {Fault::kAgNoLandingReadiness, "ag-no-landing-readiness", "all-gather",
       "Sec. 3.2 landing free before overwrite",
       "scatter into the local landings without waiting for them to be published free",
       Detection::kRace,
       "no edge from the landing's previous user to the scatter: it overwrites landing bytes that "
       "layer still reads"},
      {Fault::kRsNoStaleZeroing, "rs-no-stale-zeroing", "reduce-scatter", "I1",
       "skip stale-block zeroing before a switch-reduce landing", Detection::kUninitialisedRead,
       "the switch-reduce landing reads inbox blocks that no contributor of the wave wrote and "
       "nothing zeroed"},
      {Fault::kRsLandTwice, "rs-land-twice", "reduce-scatter", "I1",
       "land the first contributor of every wave twice", Detection::kCorruption,
       "every access is ordered, but the first contributor's partial is summed twice into the "
       "output"},
      {Fault::kRsReleaseBeforeRead, "rs-release-before-read", "reduce-scatter", "I2",
       "release the gradients without waiting for read completion", Detection::kRace,
       "no edge from the Level 1 reads to the release: it frees gradient bytes the pushes and sums "
       "still read"},
      {Fault::kRsStagingReuse, "rs-staging-reuse", "reduce-scatter", "I3",
       "refill a staging slot without waiting for its owner to free it", Detection::kRace,
       "no edge from the owner's FREE signal to the refill: the push overwrites staging bytes the "
       "owner's sum still reads"},
      {Fault::kRsOutboxReuse, "rs-outbox-reuse", "reduce-scatter", "I3",
       "sum into an outbox block before its previous send finished (Slot-Reuse)", Detection::kRace,
       "no edge from the block's send to the next sum into it: the sum overwrites outbox bytes the "
       "rail put still reads"},
      {Fault::kRsInboxReuse, "rs-inbox-reuse", "reduce-scatter", "I3",
       "put into an inbox generation without waiting for its credit", Detection::kRace,
       "no edge from the generation's INBOX_FREE credit to the put: it overwrites inbox bytes the "
       "previous wave's landing still reads"},
      {Fault::kRsSendBeforeSum, "rs-send-before-sum", "reduce-scatter", "I4",
       "put an outbox block without waiting for its Level 1 sum", Detection::kRace,
       "no edge from the Level 1 sum to the rail put: it sends outbox bytes the sum is still "
       "writing"},
      {Fault::kRsLandBeforeArrival, "rs-land-before-arrival", "reduce-scatter", "I4",
       "land a wave without waiting until every partial of it arrived", Detection::kRace,
       "no edge from the wave's arrivals to the landing: it reads inbox bytes the contributors' "
       "rail puts write"},
      {Fault::kRsPullBeforeReady, "rs-pull-before-ready", "reduce-scatter",
       "I4 (one node, Slot-Reuse)",
       "pull the peers' gradients without waiting until they copied them into their gradient "
       "areas",
       Detection::kRace,
       "no edge from the peer's copy into its gradient area (GRADS_READY) to the owner's pull: the "
       "pull reads gradient-area bytes the copy writes"},
      {Fault::kRsReleaseBeforePeerReads, "rs-release-before-peer-reads", "reduce-scatter",
       "I2 (one node, Slot-Reuse; Sec. 5.3)",
       "free the gradient area (the vacated slot) without waiting for the peers' reads of it",
       Detection::kRace,
       "no edge from the peers' pulls (PEER_READS) to the release of the gradient area: it frees "
       "bytes the peers' pulls still read"},
      {Fault::kAgNoStageCredit, "ag-no-stage-credit", "sequence", "Sec. 3.1 per-area credits (I3)",
       "put a round into a receive stage without the target's credit from the previous call",
       Detection::kRace,
       "no edge from the target's scatter of the previous call to the put: it overwrites "
       "receive-stage bytes that scatter still reads"},
      {Fault::kRsBankReuse, "rs-bank-reuse", "sequence", "Sec. 5.2 bank alternation (I3)",
       "sum into bank e mod 2 before call e - 2 sent its outbox and landed its spares",
       Detection::kRace,
       "no edge from call e-2's send and landing to call e's sum: it overwrites bank e mod 2 while "
       "call e-2 still reads it"},
      {Fault::kStepCallOrder, "step-call-order", "step", "Sec. 3.2 same call order (I4)",
       "the last rank issues two consecutive reduce-scatter calls in the other order",
       Detection::kCallOrder,
       "the last rank issues the other group's reduce-scatter at a position where its peers, "
       "which add to the counters it waits on, issue the first (NOTE [call identities]); "
       "whatever the two groups' shapes"},
      {Fault::kLaneNoHandoff, "lane-no-handoff", "communicator",
       "NOTE [lane handoff] (App. E, I3 across groups)",
       "start every lane call without waiting until every rank finished the lane's previous call",
       Detection::kRace,
       "no edge from the previous group's call on the other ranks to this call: it writes the "
       "shared receive stage or TIDE-RS areas that the other group's call still reads"},
      {Fault::kAgNoSlotRelease, "ag-no-slot-release", "communicator",
       "Sec. 3.2 landing free before overwrite, App. F ring",
       "all-gather into a shared landing slot without waiting for its previous occupant's release",
       Detection::kRace,
       "no edge from the previous occupant's layer to the all-gather: peers land this group's "
       "shards over parameters that layer still reads"},
      {Fault::kEpAgNoLandingFree, "ep-ag-no-landing-free", "ep-all-gather",
       "Sec. 3.2 landing free before overwrite (App. F lane)",
       "put a round into the target's landing without waiting until the target published it free",
       Detection::kRace,
       "no edge from the target's previous user of the landing to the put: the round writes "
       "landing bytes that layer still reads"},
      {Fault::kEpAgForwardBeforeArrival, "ep-ag-forward-before-arrival", "ep-all-gather",
       "I4 (App. F lane)",
       "forward landing rows in round d before the earlier round that carried them arrived",
       Detection::kRace,
       "no edge from round d-1's arrival to round d's put: it forwards landing rows the earlier "
       "round's put is still writing"},
      {Fault::kEpAgNoArrivalFence, "ep-ag-no-arrival-fence", "ep-all-gather",
       "Sec. 3.2 completion before consumption (App. F lane)",
       "record 'parameters ready' without waiting for every round's arrival", Detection::kRace,
       "no edge from the rounds' puts to 'parameters ready': the layer reads landing bytes a "
       "peer's put writes"},
      {Fault::kEpRsSumBeforeArrival, "ep-rs-sum-before-arrival", "ep-reduce-scatter",
       "I4 (App. F lane)", "sum a rail part without waiting until every peer's piece arrived",
       Detection::kRace,
       "no edge from the peers' rail puts to the fixed 8-source sum: it reads inbox bytes the "
       "puts write"},
      {Fault::kEpRsInboxReuse, "ep-rs-inbox-reuse", "ep-reduce-scatter", "I3 (App. F lane)",
       "put a part into an inbox generation without waiting for the destination's credit",
       Detection::kRace,
       "no edge from the destination's sum of part k - 2 to the put of part k: it overwrites "
       "inbox bytes that sum still reads"},
      {Fault::kEpRsReleaseBeforeRead, "ep-rs-release-before-read", "ep-reduce-scatter",
       "I2 (App. F lane)", "release the gradients without waiting for the puts and sums",
       Detection::kRace,
       "no edge from the rail puts and the own-contribution reads to the release: it frees "
       "gradient bytes they still read"},
  };
  return catalog;
}

std::string_view detection_name(Detection detection) {
  switch (detection) {
    case Detection::kNone:
      return "";
    case Detection::kCallOrder:
      return "call-order-mismatch";
    case Detection::kMalformed:
      return "malformed";
    case Detection::kDeadlock:
      return "deadlock";
    case Detection::kRace:
      return "race";
    case Detection::kUninitialisedRead:
      return "uninitialised-read";
    case Detection::kCorruption:
      return "corruption";
  }
  return "";
}

Detection parse_detection(std::string_view name) {
  for (Detection d : {Detection::kCallOrder, Detection::kMalformed, Detection::kDeadlock,
                      Detection::kRace, Detection::kUninitialisedRead, Detection::kCorruption}) {
    if (detection_name(d) == name) return d;
  }
  throw InvalidArgument("'" + std::string(name) +
                        "' is not a detection class (race, deadlock, corruption, malformed, "
                        "uninitialised-read, call-order-mismatch)");
}

const FaultInfo& fault_info(Fault fault) {
  for (const FaultInfo& info : fault_catalog()) {
    if (info.fault == fault) return info;
  }
  throw InvalidArgument("no such fault");
}

namespace {

// "it is an all-gather fault", "it is a reduce-scatter fault": the fault's owner, with its article.
std::string it_is_a_fault_of(std::string_view owner) {
  return "it is a" + std::string(owner == "all-gather" ? "n " : " ") + std::string(owner) +
         " fault";
}

}  // namespace

std::string fault_collective_mismatch(Fault fault, std::string_view collective) {
  if (fault == Fault::kNone) return "";
  const std::string_view owner = fault_info(fault).collective;
  if (owner == collective) return "";
  if (owner == "step") return "it breaks a sequence of calls (use tide simulate step)";
  if (owner == "sequence") {
    return "it breaks a group's own sequence of calls, which a step's lane handoff covers (NOTE "
           "[lane handoff]; it shows on a group's call sequence alone, call_sequence.hpp)";
  }
  const bool lane_owner = owner.starts_with("ep-");
  if (lane_owner || collective.starts_with("ep-")) {
    return lane_owner ? "it is a fault of the expert-parallel lane's " +
                            std::string(owner.substr(3)) + " (use --lane ep)"
                      : it_is_a_fault_of(owner) + ", not one of the expert-parallel lane";
  }
  if (owner == "communicator") {
    return "it breaks the ordering between the groups of one communicator (use tide simulate "
           "step)";
  }
  return it_is_a_fault_of(owner);
}

Fault parse_fault(std::string_view name) {
  std::string known;
  for (const FaultInfo& info : fault_catalog()) {
    if (info.name == name) return info.fault;
    known += (known.empty() ? "" : ", ") + std::string(info.name);
  }
  throw InvalidArgument("--inject '" + std::string(name) + "' is not a fault; known: " + known);
}

}  // namespace tide::program
