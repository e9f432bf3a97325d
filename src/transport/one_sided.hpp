// One-sided rail messages: the rail messages of NOTE [rail messages] as ncclPutSignal /
// ncclWaitSignal into the receiver's registered window (NCCL >= 2.29, opt-in:
// TIDE_NCCL_HOST_RMA=1, NOTE [nccl fabric] 5). A runner takes it at construction, the same on
// every process, only where its place names a one-sided transport and every template's
// messages plan on the place's lane (one_sided_plan.hpp: sources and destinations in the
// arenas' windows, disjoint within a call, byte counts equal); else two-sided, and
// one_sided_refusal() says why.
// Steps for a message m from s to d on lane l (k = m's number on (s, d, l), from
// OneSidedTransport::next_token_number, the same on both sides):
//   sender s, on the op's stream S:
//     1. record `ready` on S; the rail stream R waits for it.
//     2. one OneSidedTransport::put_signal per run contiguous in source and destination,
//        from s's window into d's at place.region_offset + offset (no staging).
//     3. the abort token (NOTE [abort relay] 1), 2k where s's verdict is clean, else 2k + 1,
//        into s's send slot (d, k mod kTokenRing); put_token puts it into d's slot (s, ...).
//     4. record `sent` on R; S waits for it.
//   receiver d, on its rail stream:
//     5. OneSidedTransport::wait_signals(s, puts + 1, l).
//     6. launch_relayed_counter_add with `expected` = 2k: adds the op's value only where the
//        token slot holds 2k; anything else sets the relayed-abort word.
// Sync contract: the source is reusable once `sent` completed; the counter adds only after
// m's bytes are visible on d; a token other than 2k reads as an abort (fail-stop, never a
// wrong counter). Destinations are reused only after the program's credits. The transport
// refuses graph capture: a one-sided runner runs on the stream path. NCCL's guarantees
// (i)-(iv), the hazard the numbered tokens bound, tests and the deviation from Sec. 6.1:
// NOTE [one-sided messages] in docs/executor.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "message.hpp"
#include "one_sided_plan.hpp"
#include "tide/program/program.hpp"

namespace tide::transport {

// The one-sided plan's input for `ops` (indices into p.ops, the messages of one call in
// schedule order) on lane `lane`: per descriptor whose source (the sender's arena) and
// destination (the receiver's) are both in a window, a piece per run contiguous in both, at
// region_offset + offset on each side; else one piece with kNotInWindow for the side
// in caller memory (the plan refuses it). Throws tide::InvalidArgument where a descriptor in
// the windows has source and destination bytes that differ.
std::vector<OneSidedMessage> one_sided_input(const program::Program& p, std::span<const int> ops,
                                             std::int64_t region_offset, int lane);

// Routes one side of a message op one-sided (m.route): the sender's puts (part, first byte,
// bytes, window offset), the receiver's signal count. `m` is map_message's for the same op.
void route_one_sided(const program::Op& op, std::int64_t region_offset, Message& m);

// Steps 1-6 above for one side of `m`.
void enqueue_one_sided_message(const Message& m, OneSidedTransport& transport, cudaStream_t rail,
                               cudaStream_t op_stream, const MessageRelay& relay);

}  // namespace tide::transport
