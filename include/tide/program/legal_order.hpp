// A legal serial order of a program's ops, found by simulating its counters and events on the
// host (NOTE [legal order]).
#pragma once

#include <cstdint>
#include <vector>

#include "tide/program/program.hpp"

namespace tide::program {

// NOTE [legal order]
// A serial order of every rank's ops in which each op follows the earlier ops of its
// (rank, stream), each kWait follows the additions that bring its counter to its value, and
// each kEventWait follows its (rank, event) record. It is found by repeatedly taking the head
// op of any (rank, stream) whose wait the ops already taken satisfy.
// Why executors want it:
//   - the CUDA executor enqueues in it, so no hardware queue shared by several streams holds a
//     wait ahead of the signal it needs (NOTE [enqueue order]);
//   - the host executor runs one rank's ops one at a time in it. If every process runs the
//     projection of one legal order onto its ranks, none can block for good: the earliest op
//     not yet done has every op before it done, on every rank (an induction on the order).
// The concatenation of legal orders of consecutive calls is a legal order of the sequence,
// provided each call's order was found with the counter totals and recorded events its
// earlier calls leave behind (`start`).
struct SyncStart {
  // Per (rank, counter id): what earlier calls added, rank-major (rank * counters + id).
  // Empty: all zero.
  std::vector<std::int64_t> counter_totals;
  // Every event id at or above this is taken as already recorded on every rank (earlier
  // calls' events). Default: none.
  int recorded_events_from = 1 << 30;
};

struct LegalOrder {
  std::vector<int> order;     // indices into Program::ops
  std::vector<int> unplaced;  // ops no legal order reaches (a wait never satisfied), in
                              // program order; empty for a well-formed program
};

LegalOrder legal_order(const Program& program, const SyncStart& start = {});

// What the program adds to each (rank, counter id), rank-major as in SyncStart.
std::vector<std::int64_t> counter_additions(const Program& program);

}  // namespace tide::program
