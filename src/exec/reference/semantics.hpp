// Data effects of ops (NOTE [reference execution semantics] 2, 5): copies, the Level 1 sum,
// landings, casts, zero fills and releases, applied to Memory at an op's completion.
#pragma once

#include "memory.hpp"

namespace tide::exec::detail {

// Applies `op`'s effect on memory. `op` must have passed validate_ops. Sync ops do nothing.
void apply_data(const program::Op& op, const BufferTable& table, Memory& memory);

}  // namespace tide::exec::detail
