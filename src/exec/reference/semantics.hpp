// Data effects of ops on the reference executor's memory (NOTE [reference execution
// semantics] 2, 5): tide::exec::apply_data over the simulated buffers.
#pragma once

#include "memory.hpp"
#include "tide/exec/data_effects.hpp"

namespace tide::exec::detail {

// Applies `op`'s effect on memory. `op` must have passed validate_ops. Sync ops do nothing.
void apply_data(const program::Op& op, const BufferTable& table, Memory& memory);

}  // namespace tide::exec::detail
