// Classifies a run's findings (NOTE [fault detection]).
#include "tide/exec/fault_detection.hpp"

namespace tide::exec {
namespace {

using program::Detection;

Detection class_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kCallOrderMismatch:
      return Detection::kCallOrder;
    case ErrorKind::kInvalidOp:
      return Detection::kMalformed;
    case ErrorKind::kDeadlock:
    case ErrorKind::kUnsatisfiableWait:
      return Detection::kDeadlock;
    case ErrorKind::kUnorderedRead:
    case ErrorKind::kUnorderedWrite:
      return Detection::kRace;
    case ErrorKind::kUnwrittenRead:
    case ErrorKind::kReleasedRead:
    case ErrorKind::kConsumedRead:
      return Detection::kUninitialisedRead;
  }
  return Detection::kMalformed;
}

}  // namespace

Detection classify_run(const RunResult& run, bool data_checked, bool data_passed) {
  Detection strongest = Detection::kNone;
  for (int k = 0; k < kErrorKinds; ++k) {
    const auto kind = static_cast<ErrorKind>(k);
    if (run.count(kind) == 0) continue;
    const Detection d = class_of(kind);
    if (strongest == Detection::kNone || d < strongest) strongest = d;
  }
  if (run.deadlock && (strongest == Detection::kNone || Detection::kDeadlock < strongest)) {
    strongest = Detection::kDeadlock;
  }
  if (strongest == Detection::kNone && data_checked && !data_passed) {
    strongest = Detection::kCorruption;
  }
  return strongest;
}

std::string detection_evidence(const RunResult& run, program::Detection detection) {
  for (const ExecError& e : run.errors) {
    if (class_of(e.kind) == detection) return e.message;
  }
  return "";
}

}  // namespace tide::exec
