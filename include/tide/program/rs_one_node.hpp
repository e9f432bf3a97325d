// TIDE-RS on one node (M = 1): each rank owns its own rows and Level 1 sums into its output.
// NOTE [one-node TIDE-RS] in src/program/rs_one_node.cpp holds the steps and the sync contract.
#pragma once

#include <cstdint>

#include "tide/core/rs_plan.hpp"
#include "tide/program/program.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide::program {

// Whether a one-node plan's owners pull their rows from the peers' gradient areas (Slot-Reuse)
// rather than the peers pushing them into the owners' staging (In-Place).
bool rs_one_node_pull(const RsPlan& plan);
// Bytes of the gradient area a one-node Slot-Reuse call copies its gradients into (its
// unsharded gradients, laid out as the all-gather lands them); 0 for any other plan.
std::int64_t rs_gradient_area_bytes(const RsPlan& plan);

// The call's program (build_rs_call() dispatches here for one-node plans with the pull landing).
Program build_one_node_rs_call(const RsPlan& plan, const RsProgramOptions& options,
                               const CallPlacement& placement, RsShared& shared,
                               RsProgramIds* ids = nullptr);

}  // namespace tide::program
