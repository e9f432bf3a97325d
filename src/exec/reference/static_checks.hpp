// Checks made before running (NOTE [reference execution semantics] 4): malformed ops, and
// waits that can never be satisfied.
#pragma once

#include <vector>

#include "errors.hpp"
#include "memory.hpp"

namespace tide::exec::detail {

struct StaticFacts {
  std::vector<char> valid;        // per op: well formed (else timed, but no effect)
  std::vector<int> event_record;  // per rank * events + id: the op that records it, or -1
};

StaticFacts check_program(const program::Program& program, const BufferTable& table,
                          ErrorSink& sink);

}  // namespace tide::exec::detail
