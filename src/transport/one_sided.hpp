// NOTE [one-sided messages]
// The rail messages of NOTE [rail messages] as one-sided puts into the receiver's registered
// window (ncclPutSignal / ncclWaitSignal, NCCL >= 2.29): the RDMA writes of the paper's rail
// phase (Sec. 6.1: the arena registered as a window, the host driving the network phase,
// Sec. 6.2), instead of ncclSend / ncclRecv. Opt-in (TIDE_NCCL_HOST_RMA=1 or
// NcclFabricOptions::host_rma on every rank; NOTE [nccl fabric] 5); two-sided stays the
// default.
// When the runner takes it (CudaSequenceRunner, at construction, the same on every process):
// its place names a one-sided transport (CudaSequencePlace::messages; NCCL's where
// NcclFabric::host_rma(), every rank agreed), and every template's messages plan
// (one_sided_plan.hpp) with the lane of the place: every destination a
// region of the receiver's arena and every source one of the sender's (caller memory, FSDP2's
// tensors and outputs, is not registered: such a sequence stays two-sided), inside the
// windows, disjoint within a call, source and destination bytes equal. Otherwise two-sided,
// and one_sided_refusal() says why.
// Steps, for a message m from s to d on lane l (k = m's number on (s, d, l), from
// OneSidedTransport::next_token_number, the same on both sides since each lane's messages come in
// one order on every rank):
//   sender s, in the op's place on its stream S:
//     1. record `ready` on S; the rail stream R waits for it (every wait before the op).
//     2. for every non-empty copy descriptor in order: one OneSidedTransport::put_signal per run
//     that is
//        contiguous in both source and destination (one for two contiguous regions, else one
//        per row), straight from the source region in s's window (its arena: NCCL puts only
//        from a symmetric window, so there is no staging) into d's window at the region's
//        offset (place.region_offset + offset).
//     3. the abort token (NOTE [abort relay] 1) written with base 2k: 2k where s's verdict is
//        clean, 2k + 1 where not, into s's send slot (d, k mod kTokenRing) of its token window
//        (OneSidedTransport::token_source); put_token puts it into d's token slot (s, k mod
//        kTokenRing) with one signal.
//     4. record `sent` on R; S waits for it.
//   receiver d, at the same place of the global schedule, on its rail stream:
//     5. OneSidedTransport::wait_signals(s, puts + 1, l): every put of m and its token signalled.
//     6. launch_relayed_counter_add with `expected` = 2k: the token slot (s, k) holding 2k
//        adds the op's value; anything else (the abort bit, a stale number: the token never
//        came, or an aborted wait let the kernel run early) sets the relayed-abort word and
//        adds nothing. The end-of-call check watches it as before (NOTE [abort relay] 3).
// Synchronisation contract, what the steps rely on from NCCL. Read in NCCL's user guide (the
// point-to-point API and usage pages, "since 2.29") and in its source from v2.29.2 to v2.30.7
// (src/enqueue.cc, src/rma/); checked bitwise against two-sided on hardware by
// scripts/device/multigpu.sh step rma, not yet run (no machine with NCCL >= 2.29 and two GPUs
// so far):
//   (i)   once a put has completed on the sender's stream its source may be reused (stated),
//         so `sent` releases the source, as with two-sided sends;
//   (ii)  a signal counts at the receiver only after its put's bytes were delivered, and
//         ncclWaitSignal completes on the receiver's stream only once they are visible to its
//         later work (stated; no flush follows, as NOTE [rail messages], Arrival and flush);
//   (iii) puts and signals to one peer on one context take effect in issue order (stated);
//         a wait for opCnt signals takes them from the peer's running count (the source keeps
//         one per peer), so each wait needs only the signals after the previous one's;
//   (iv)  ncclPutSignal takes its source and its destination only in windows registered with
//         NCCL_WIN_COLL_SYMMETRIC on the lane's communicator, each one cuMem allocation (it
//         returns ncclInvalidArgument otherwise): the sources are arena regions (the plan
//         refuses others) and the tokens' send slots; signal index, context and flags are 0.
// Not stated, and a hazard the numbered tokens bound: NCCL numbers a peer's signals when the
// host issues the call, so puts to one peer issued on two streams (two runners of one lane,
// as two groups' overlapping all-gathers) may land in the other order. A wait met by the
// other runner's signals then reads a token slot that does not hold 2k yet (the token follows
// its message's puts on one stream, (iii)) and fails stop; it never counts bytes that have not
// landed. One rail stream per lane would remove the hazard.
// The numbered token keeps (i) and (iii)'s failure modes from counting void bytes: a token
// overwritten early, or one that has not arrived, does not equal 2k and reads as an abort
// (fail-stop, never a wrong counter), which is NOTE [abort relay]'s claim with "token is 0"
// read as "token is 2k". A one-sided put cannot be made conditional either; the numbered token
// is what carries the verdict. A stale slot from an earlier message with the same k mod
// kTokenRing holds 2(k - kTokenRing) or that plus 1, never 2k; a send slot rewritten before
// its put read it carries 2(k + kTokenRing) or that plus 1, never 2k.
// Overwrites of destinations: one-sided puts land when they land, not when the receiver posts
// a receive; the program's credits (its signals back to the sender before a destination is
// reused) order them, exactly as they order load/store copies between LSA peers. The plan
// refuses destinations that overlap within a call (two puts in flight to one byte).
// Tests: the plan against a brute-force reference and the runtime's templates routed as planned
// (CPU: tests/exec/one_sided_plan_test.cpp, one_sided_messages_test.cpp); the runner's calls
// one-sided on one GPU through the loopback transport (NOTE [loopback one-sided transport];
// RsOneSided, AllGatherOneSidedLandsEveryShard in cuda_sequence_test.cpp: bitwise on the H200,
// bench/results/ipc/runs-2026-12-04-s37/).
// Graphs: NCCL 2.29 keeps no graph state for these calls, and from 2.30.3 a captured put pairs
// only with a captured wait, at most one unconsumed signal per pair (so two puts before two
// waits deadlock in a graph; src/rma/rma_ce.cc), so the transport refuses capture
// (capture_refusal() and per_process_refusal()): a one-sided runner runs its calls on the stream
// path, without slot graphs; a caller's capture is refused. Deviation from Sec. 6.1: the windows
// are registered on the message lanes' N-rank communicators (the lanes keep two threads' orders
// apart), not on the M-rank rail communicators, so registration pays the O(n_ctx N^2) connection
// barrier that the rail split avoids; one rail split per lane would restore it.
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
