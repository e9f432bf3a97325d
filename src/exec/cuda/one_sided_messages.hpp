// NOTE [one-sided messages]
// The rail messages of NOTE [rail messages] as one-sided puts into the receiver's registered
// window (ncclPutSignal / ncclWaitSignal, NCCL >= 2.29): the RDMA writes of the paper's rail
// phase (Sec. 6.1: the arena registered as a window, the host driving the network phase,
// Sec. 6.2), instead of ncclSend / ncclRecv. Opt-in (TIDE_NCCL_HOST_RMA=1 or
// NcclFabricOptions::host_rma on every rank; NOTE [nccl fabric] 5); two-sided stays the
// default.
// When the runner takes it (CudaSequenceRunner, at construction, the same on every process):
// Fabric::one_sided() (every rank agreed), no test or ipc transport, and every template's
// messages plan (messages/one_sided_plan.hpp) with the lane of the place: every destination a
// region of the receiver's arena (caller memory, FSDP2's tensors and outputs, is not
// registered: such a sequence stays two-sided), inside the window, disjoint within a call,
// source and destination bytes equal. Otherwise two-sided, and one_sided_refusal() says why.
// Steps, for a message m from s to d on lane l (k = m's number on (s, d, l), from
// Fabric::next_token_number, the same on both sides since each lane's messages come in one
// order on every rank):
//   sender s, in the op's place on its stream S:
//     1. record `ready` on S; the rail stream R waits for it (every wait before the op).
//     2. for every non-empty copy descriptor in order: a strided source is packed into staging
//        on R; then one Fabric::put_signal per destination row (one for a contiguous
//        destination) into d's window at the region's offset (place.region_offset + offset).
//     3. the abort token (NOTE [abort relay] 1) written with base 2k: 2k where s's verdict is
//        clean, 2k + 1 where not; Fabric::put_token puts it into d's token slot (s, k mod
//        kTokenRing) with one signal.
//     4. record `sent` on R; S waits for it.
//   receiver d, at the same place of the global schedule, on its rail stream:
//     5. Fabric::wait_signals(s, puts + 1, l): every put of m and its token signalled.
//     6. launch_relayed_counter_add with `expected` = 2k: the token slot (s, k) holding 2k
//        adds the op's value; anything else (the abort bit, a stale number: the token never
//        came, or an aborted wait let the kernel run early) sets the relayed-abort word and
//        adds nothing. The end-of-call check watches it as before (NOTE [abort relay] 3).
// Synchronisation contract, what the steps rely on from NCCL. nccl.h (2.30.7) documents the
// calls' arguments only, so these are assumptions, checked bitwise against two-sided on
// hardware by scripts/device/multigpu.sh step rma and not yet run (no machine with NCCL >=
// 2.29 and two GPUs so far):
//   (i)   a put completes on the sender's stream only after its source was read (as ncclSend),
//         so `sent` may release the source, as with two-sided sends;
//   (ii)  a signal is counted at the receiver only after its put's bytes are visible there,
//         and ncclWaitSignal completes on the receiver's stream once they are visible to its
//         later work (no flush follows, as NOTE [rail messages], Arrival and flush);
//   (iii) signals from one peer on one (signal index, context) are counted in issue order, so
//         that a wait for m's signals is not met by a later message's.
// The numbered token keeps (i) and (iii)'s failure modes from counting void bytes: a token
// overwritten early, or one that has not arrived, does not equal 2k and reads as an abort
// (fail-stop, never a wrong counter), which is NOTE [abort relay]'s claim with "token is 0"
// read as "token is 2k". A one-sided put cannot be made conditional either; the numbered token
// is what carries the verdict. A stale slot from an earlier message with the same k mod
// kTokenRing holds 2(k - kTokenRing) or that plus 1, never 2k.
// Overwrites of destinations: one-sided puts land when they land, not when the receiver posts
// a receive; the program's credits (its signals back to the sender before a destination is
// reused) order them, exactly as they order load/store copies between LSA peers. The plan
// refuses destinations that overlap within a call (two puts in flight to one byte).
// Tests: the plan against a brute-force reference and the runtime's templates routed as planned
// (CPU: tests/exec/one_sided_plan_test.cpp, one_sided_messages_test.cpp); the runner's calls
// one-sided on one GPU through the loopback transport (NOTE [loopback one-sided transport];
// RsOneSided, AllGatherOneSidedLandsEveryShard in cuda_sequence_test.cpp: bitwise on the H200,
// bench/results/ipc/runs-2026-12-04-s37/).
// Graphs: nccl.h does not say ncclPutSignal / ncclWaitSignal may be captured, so the transport
// refuses capture (capture_refusal() and per_process_refusal()): a one-sided runner runs its
// calls on the stream path, without slot graphs; a caller's capture is refused.
// Deviation from Sec. 6.1: the windows are registered on the message lanes' N-rank
// communicators (the lanes keep two threads' orders apart), not on the M-rank rail
// communicators, so registration pays the O(n_ctx N^2) connection barrier that the rail split
// avoids; one rail split per lane would restore it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "messages.hpp"
#include "messages/one_sided_plan.hpp"
#include "tide/fabric/fabric.hpp"
#include "tide/program/program.hpp"

namespace tide::exec::cuda_detail {

// The one-sided plan's input for `ops` (indices into p.ops, the messages of one call in
// schedule order) on lane `lane`: a piece per destination row, at region_offset + offset for
// arena destinations, messages::kNotInWindow for caller memory. Throws tide::InvalidArgument
// where a descriptor's source and destination bytes differ.
std::vector<messages::OneSidedMessage> one_sided_input(const program::Program& p,
                                                       std::span<const int> ops,
                                                       std::int64_t region_offset, int lane);

// Where one-sided messages travel (NOTE [one-sided messages]): puts with a signal into a
// rank's window, numbered tokens, waits for signals. Each call names both ranks; enqueued on
// a stream of its first rank's device, completing in its order. send()/recv() throw
// tide::InternalError (every message of a one-sided runner is routed). Implemented over the
// fabric (FabricOneSidedTransport, NCCL) and, for tests on one GPU, over the virtual fabric's
// pointers (LoopbackOneSidedTransport, loopback_one_sided_transport.hpp).
class OneSidedTransport : public MessageTransport {
 public:
  void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) override;
  void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) override;
  // `bytes` from `data` into `to`'s window at `window_offset`, then one signal at `to`.
  virtual void put_signal(int from, int to, const void* data, std::size_t bytes,
                          std::int64_t window_offset, cudaStream_t stream) = 0;
  // The 8-byte token at `token` into `to`'s slot for `from`'s `number`-th token, then a signal.
  virtual void put_token(int from, int to, const std::uint64_t* token, std::uint64_t number,
                         cudaStream_t stream) = 0;
  // Until `count` more signals from `from` have arrived at `to`.
  virtual void wait_signals(int to, int from, int count, cudaStream_t stream) = 0;
  // 1, 2, ... for the tokens `self` sends to (receives from) `peer`, in call order.
  virtual std::uint64_t next_token_number(int self, int peer, bool sending) = 0;
  // Where `from`'s `number`-th token to `to` lands (device, on `to`'s device).
  virtual const std::uint64_t* token_slot(int to, int from, std::uint64_t number) const = 0;
};

// Over Fabric::put_signal / put_token / wait_signals on one lane (NCCL: one local rank per
// process, so the fabric's calls name only the peer).
class FabricOneSidedTransport final : public OneSidedTransport {
 public:
  FabricOneSidedTransport(fabric::Fabric& fabric, int lane) : fabric_(fabric), lane_(lane) {}
  const char* path() const override { return "one-sided"; }
  void put_signal(int from, int to, const void* data, std::size_t bytes, std::int64_t window_offset,
                  cudaStream_t stream) override;
  void put_token(int from, int to, const std::uint64_t* token, std::uint64_t number,
                 cudaStream_t stream) override;
  void wait_signals(int to, int from, int count, cudaStream_t stream) override;
  std::uint64_t next_token_number(int self, int peer, bool sending) override;
  const std::uint64_t* token_slot(int to, int from, std::uint64_t number) const override;
  // nccl.h does not document ncclPutSignal / ncclWaitSignal as capturable.
  std::string capture_refusal() const override;
  std::string per_process_refusal() const override { return capture_refusal(); }

 private:
  fabric::Fabric& fabric_;
  int lane_ = 0;
};

// Routes one side of a message op one-sided (m.route): the sender's puts (part, first byte,
// bytes, window offset), the receiver's signal count. `m` is map_message's for the same op.
void route_one_sided(const program::Op& op, std::int64_t region_offset, Message& m);

// Steps 1-6 above for one side of `m`.
void enqueue_one_sided_message(const Message& m, OneSidedTransport& transport, cudaStream_t rail,
                               cudaStream_t op_stream, const MessageRelay& relay);

}  // namespace tide::exec::cuda_detail
