// A legal serial order of a program's ops, found by simulating its counters and events.
#pragma once

#include <cstdint>
#include <vector>

#include "tide/program/program.hpp"

namespace tide::program {

// Every rank's ops in one serial order: each op after the earlier ops of its (rank, stream), each
// kWait after the additions it needs, each kEventWait after its record. The concatenation of legal
// orders of consecutive calls, each found from the totals its earlier calls leave (`start`), is one
// of the sequence. Why the executors walk it: NOTE [legal order] in docs/program.md.
struct SyncStart {
  // What earlier calls added per (rank, counter id), rank-major; empty: all zero.
  std::vector<std::int64_t> counter_totals;
  // Event ids at or above this count as recorded on every rank (earlier calls').
  int recorded_events_from = 1 << 30;
};

struct LegalOrder {
  std::vector<int> order;     // indices into Program::ops
  std::vector<int> unplaced;  // ops no legal order reaches, in program order
};

LegalOrder legal_order(const Program& program, const SyncStart& start = {});

// What the program adds to each (rank, counter id), rank-major as in SyncStart.
std::vector<std::int64_t> counter_additions(const Program& program);

}  // namespace tide::program
