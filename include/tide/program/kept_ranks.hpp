// What a process keeps of a call sequence: its own ranks' ops (NOTE [kept ranks]).
#pragma once

#include <span>
#include <vector>

#include "tide/program/call_sequence.hpp"

namespace tide::program {

// Keeps of each template: every op of a kept rank and every op of another rank that adds to a
// kept rank's counter, in order with their event ages and the legal order restricted to them;
// CallTemplate::op_ids (each op's id as built, the same in every process) and built_ops; every
// rank's additions and buffer sizes. Such a template no longer describes other ranks' work:
// the reference executor, expand_calls and lane programs need every rank. Why: NOTE [kept
// ranks] in docs/program.md. InvalidArgument for a rank outside the sequence; idempotent.
void keep_ranks(CallSequence& sequence, std::span<const int> ranks);
void keep_ranks(CallTemplate& call, std::span<const int> ranks);

// Whether a template kept for the ranks marked in `kept` (indexed by rank) keeps `op` (1 above).
bool kept_op(const Op& op, const std::vector<bool>& kept);

}  // namespace tide::program
