// What a process keeps of a call sequence: its own ranks' ops (NOTE [kept ranks]).
#pragma once

#include <span>
#include <vector>

#include "tide/program/call_sequence.hpp"

namespace tide::program {

// NOTE [kept ranks]
// make_call_sequence builds every rank's ops of every template: finding the period, the
// validation and the legal order need them all. A process runs only its own ranks' ops (the
// host executor and the CUDA sequence runner skip the others), yet every process holding every
// rank's templates costs it memory that grows with N times the ranks' ops. So once a sequence
// is built, a process keeps of each template:
//   1. every op of a kept rank, and every op of another rank that adds to a kept rank's counter
//      (a peer's signal or rail put): the host executor receives a rail message at that op's
//      place (NOTE [host execution] 5), and a stalled wait names the ranks that signal it;
//   2. those ops in their order, with their event ages, and the legal order restricted to them:
//      the projection of a legal order, which is what an executor of the kept ranks walks
//      (NOTE [legal order]);
//   3. CallTemplate::op_ids, each kept op's index among the ops the template was built with,
//      and built_ops, their count: an op's id stays the same in every process (the host
//      executor's message tags use it);
//   4. every rank's additions and buffer sizes, as built (a few words per rank and counter):
//      the runtime advances its counter bases by them, the CUDA runner's graph waits and stall
//      reports read peers' totals.
// Other ranks' ops are gone: such a template no longer describes their work, so the reference
// executor, expand_calls and the lane programs need sequences that keep every rank.
// Throws InvalidArgument for a rank outside the sequence's. Keeping the kept ranks again
// changes nothing.
void keep_ranks(CallSequence& sequence, std::span<const int> ranks);
void keep_ranks(CallTemplate& call, std::span<const int> ranks);

// Whether a template kept for the ranks marked in `kept` (indexed by rank) keeps `op` (1 above).
bool kept_op(const Op& op, const std::vector<bool>& kept);

}  // namespace tide::program
