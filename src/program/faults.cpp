#include "tide/program/faults.hpp"

#include <string>

#include "tide/core/error.hpp"

namespace tide::program {

const std::vector<FaultInfo>& fault_catalog() {
  static const std::vector<FaultInfo> catalog = {
      {Fault::kAgScatterBeforeArrival, "ag-scatter-before-arrival", "all-gather", "I4",
       "scatter stage slots without waiting for their round's DATA signal"},
      {Fault::kAgForwardBeforeArrival, "ag-forward-before-arrival", "all-gather", "I4",
       "forward slots in round d before the earlier rounds that carried them arrived"},
      {Fault::kAgNoCompletionFence, "ag-no-completion-fence", "all-gather",
       "Sec. 3.2 completion before consumption",
       "record 'parameters ready' without waiting for every local GPU's scatters"},
      {Fault::kAgNoLandingReadiness, "ag-no-landing-readiness", "all-gather",
       "Sec. 3.2 landing free before overwrite",
       "scatter into the local landings without waiting for them to be published free"},
      {Fault::kRsNoStaleZeroing, "rs-no-stale-zeroing", "reduce-scatter", "I1",
       "skip stale-block zeroing before a switch-reduce landing"},
      {Fault::kRsLandTwice, "rs-land-twice", "reduce-scatter", "I1",
       "land the first contributor of every wave twice"},
      {Fault::kRsReleaseBeforeRead, "rs-release-before-read", "reduce-scatter", "I2",
       "release the gradients without waiting for read completion"},
      {Fault::kRsStagingReuse, "rs-staging-reuse", "reduce-scatter", "I3",
       "refill a staging slot without waiting for its owner to free it"},
      {Fault::kRsOutboxReuse, "rs-outbox-reuse", "reduce-scatter", "I3",
       "sum into an outbox block before its previous send finished (Slot-Reuse)"},
      {Fault::kRsInboxReuse, "rs-inbox-reuse", "reduce-scatter", "I3",
       "put into an inbox generation without waiting for its credit"},
      {Fault::kRsSendBeforeSum, "rs-send-before-sum", "reduce-scatter", "I4",
       "put an outbox block without waiting for its Level 1 sum"},
      {Fault::kRsLandBeforeArrival, "rs-land-before-arrival", "reduce-scatter", "I4",
       "land a wave without waiting until every partial of it arrived"},
      {Fault::kAgNoStageCredit, "ag-no-stage-credit", "step", "Sec. 3.1 per-area credits (I3)",
       "put a round into a receive stage without the target's credit from the previous call"},
      {Fault::kRsBankReuse, "rs-bank-reuse", "step", "Sec. 5.2 bank alternation (I3)",
       "sum into bank e mod 2 before call e - 2 sent its outbox and landed its spares"},
      {Fault::kStepCallOrder, "step-call-order", "step", "Sec. 3.2 same call order (I4)",
       "the last rank issues two consecutive reduce-scatter calls in the other order"},
  };
  return catalog;
}

const FaultInfo& fault_info(Fault fault) {
  for (const FaultInfo& info : fault_catalog()) {
    if (info.fault == fault) return info;
  }
  throw InvalidArgument("no such fault");
}

std::string fault_collective_mismatch(Fault fault, std::string_view collective) {
  if (fault == Fault::kNone) return "";
  const std::string_view owner = fault_info(fault).collective;
  if (owner == collective) return "";
  if (owner == "step") return "it breaks a sequence of calls (use tide simulate step)";
  return "it is a" + std::string(owner == "all-gather" ? "n " : " ") + std::string(owner) +
         " fault";
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
