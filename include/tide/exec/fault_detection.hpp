// How a reference-executor run shows a fault (program/faults.hpp). A run's findings map to the
// strongest class present: call order, malformed, deadlock, race, uninitialised read, corruption
// (program::Detection's order). An injected fault must show as its catalog's Detection. Which
// finding is which class, and why: NOTE [fault detection] in docs/reference_executor.md.
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
