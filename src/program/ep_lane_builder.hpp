// What both expert-parallel lane builders (ep_lane_ag.cpp, ep_lane_rs.cpp) share: the refusal
// of a fault that cannot show, and the frame every lane program has.
#pragma once

#include <cstddef>
#include <string>

#include "tide/core/error.hpp"
#include "tide/program/faults.hpp"
#include "tide/program/program.hpp"

namespace tide::program {

// Throws InvalidArgument naming `fault` when it cannot show on the lane: `why` says why (empty
// where it can; ep_ag_fault_inapplicable, ep_rs_fault_inapplicable).
inline void require_fault_shows_on_lane(Fault fault, const std::string& why) {
  if (why.empty()) return;
  throw InvalidArgument("fault " + std::string(fault_info(fault).name) +
                        " cannot show on this lane: " + why);
}

// Fills a lane program once `b` holds its ranks (one per node, b.m of them) and streams: the
// builder's counters and `events` event ids per rank, every rank's ops (b.build_rank(n), rank
// by rank), and the same buffers on every rank (`sizes`, with the builder's arena).
// `LaneBuilder` is an Emitter with m, arena.arena_bytes, counters() and build_rank(int).
template <class LaneBuilder>
void emit_lane_ranks(LaneBuilder& b, int events, BufferSizes sizes) {
  Program& p = b.program;
  p.counters = b.counters();
  p.events = events;
  for (int n = 0; n < b.m; ++n)
    b.build_rank(n);
  sizes.arena_bytes = b.arena.arena_bytes;
  p.buffers.assign(static_cast<std::size_t>(p.ranks), sizes);
}

}  // namespace tide::program
