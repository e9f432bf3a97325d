// A communicator's arena (NOTE [communicator arena]) as the CLI prints it: `tide memory
// --groups` and `tide check-runtime` give the same JSON, so that they can be compared.
#pragma once

#include <nlohmann/json.hpp>

#include "tide/runtime/communicator.hpp"

namespace tide::cli {

nlohmann::json arena_json(const runtime::ArenaInfo& arena);

}  // namespace tide::cli
