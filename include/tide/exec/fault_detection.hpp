// How a reference-executor run shows a fault (program/faults.hpp).
//
// NOTE [fault detection]
// A run's findings map to one class, the strongest present:
//   call-order-mismatch kCallOrderMismatch: ranks issue different calls at one position of
//                       their sequences, found before running (NOTE [call identities]); it
//                       outranks everything, since the mixed calls explain what follows
//                       (ops of one call that meet another call's buffers or counters);
//   malformed           kInvalidOp: an op that cannot execute, found before running;
//   deadlock            kDeadlock, kUnsatisfiableWait: a wait nothing will satisfy;
//   race                kUnorderedRead, kUnorderedWrite: two accesses of the same bytes, at
//                       least one a write (or a release), with no happens-before edge;
//   uninitialised-read  kUnwrittenRead, kReleasedRead, kConsumedRead, with no race: a read
//                       of bytes nothing wrote, that were freed, or (a landing's source)
//                       that an earlier landing already summed, though every access was
//                       ordered: the bytes hold nothing this read may use;
//   corruption          a clean run whose checked output differs from the definition.
// A race usually also reads unwritten bytes (the reader ran before the writer), so race
// outranks uninitialised-read: the latter means the protocol ordered every access and still
// read bytes nobody provided. An injected fault must show as its catalog's Detection.
#pragma once

#include <string>

#include "tide/exec/reference_executor.hpp"
#include "tide/program/faults.hpp"

namespace tide::exec {

// `data_checked`: the outputs were compared with the definition; `data_passed`: they matched.
program::Detection classify_run(const RunResult& run, bool data_checked, bool data_passed);

// The first error message of the detected class (empty for corruption or none): which op,
// which bytes, which wait.
std::string detection_evidence(const RunResult& run, program::Detection detection);

}  // namespace tide::exec
