// The discrete-event scheduler of the reference executor (NOTE [reference execution
// semantics] 2-4): streams, host issue times, counters, events, shared links, seeded
// tie-breaking and jitter, and deadlock reports.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "errors.hpp"
#include "memory.hpp"
#include "static_checks.hpp"

namespace tide::exec::detail {

struct InputRange {
  int buffer = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

// Runs `program` once. `memory` is null in timing-only mode (no data, no race tracking).
void simulate(const program::Program& program, const BufferTable& table, const StaticFacts& facts,
              Memory* memory, const std::vector<InputRange>& inputs, const RunOptions& options,
              ErrorSink& sink, RunResult& result);

}  // namespace tide::exec::detail
