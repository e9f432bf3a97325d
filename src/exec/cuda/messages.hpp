// Puts and signals between ranks that cannot address each other, as two-sided messages
// (the rail path to other hosts; paper Sec. 6.1-6.2).
//
// NOTE [rail messages]
// A kRailPut or kSignal from rank s to rank d where Fabric::load_store(s, d) is false becomes:
//   sender s, in the op's place on its stream S:
//     record `ready` on S; the rank's rail stream R waits for it; for every non-empty copy
//     descriptor in order: a strided source is packed into a staging buffer on R
//     (cudaMemcpy2DAsync), then Fabric::send of its bytes to d on R; then the 8-byte abort
//     token (NOTE [abort relay]; a signal, or a put with no bytes, sends only it); record
//     `sent` on R and S waits for it (what follows the put on S follows its transfer, as with
//     a copy on S).
//   receiver d, at the same place of the global schedule, on its rail stream:
//     for every descriptor in the same order: Fabric::recv into the destination (or into a
//     staging buffer, then cudaMemcpy2DAsync into a strided destination); then the token, into
//     a poisoned word; then the op's counter addition on d's own counter, which counts only
//     where the token is 0 (NOTE [abort relay]).
// Matching: every process enqueues its rail stream's sends and receives in the order of the
// one global schedule (NOTE [enqueue order]), so for each pair of ranks the sends of one and
// the receives of the other come in the same order, as NCCL's point-to-point matching needs.
// All of a rank's messages share its one rail stream, so no NCCL operation waits behind
// another stream's later one. Deadlock freedom follows from the schedule: the earliest
// incomplete message has every dependency earlier in the schedule, hence complete, and its
// partner sits at the same place of the partner's rail stream.
// A timeout cannot release an NCCL receive waiting for a message that never comes: the
// executor then reports the stuck streams and refuses further runs (fail-stop), and only the
// communicator's abort ends it. The rendezvous transports' waits are released by
// MessageTransport::release() (the runner's release_waits()).
// Graphs: every step above is capturable (event records and waits, 2-D copies, the
// transport's sends and receives, the counter addition); whether a transport may be captured
// is its own to say (MessageTransport below).
// The CUDA executor, CudaSequenceRunner, uses this component (NOTE [CUDA call sequences] 6: its
// calls' messages, at the template's legal order; CudaExecutor's one-shot programs run there as
// sequences of period 1, NOTE [one-shot programs]). Where the
// bytes travel is a MessageTransport: FabricTransport (Fabric::send/recv, the NCCL rail); the
// ipc rendezvous transport (ipc_rendezvous_transport.hpp: processes of one host over the ipc
// fabric's message areas, hosts emulated); or in tests the rendezvous transport of
// rendezvous_transport.hpp (one process, NCCL's two-sided matching emulated over pointers).
// Opt-in, the same messages may travel one-sided instead (ncclPutSignal / ncclWaitSignal,
// NOTE [one-sided messages] in one_sided_messages.hpp).
// Arrival and flush: the receiver's counter addition follows the receive on the receiver's
// rail stream, so a wait for that counter (on any stream) is met only after the receive
// completed in stream order. NCCL completes a receive only once its bytes are visible to the
// device's later work (its proxy flushes GPUDirect RDMA writes before it reports the
// receive); the rendezvous transports copy with the receiver's own kernels, on its stream.
// So no extra flush follows an arrival: the counter's system-scope addition is the release,
// the wait's acquire pairs with it, as for a store by a peer (NOTE [CUDA call sequences] 6). How a
// region and a counter resolve to device addresses is the caller's (MessageAddresses): the runner
// takes its group's region and signal words, and a one-shot program's the fabric's buffers.
//
// NOTE [abort relay]
// Fail-stop (NOTE [CUDA call sequences] 5) for ranks whose abort words this process cannot
// load: ranks on other hosts (NCCL: not LSA peers), and ranks on other emulated hosts (ipc,
// nccl with nodes_as_hosts: mapped, but treated as unreachable, so that one GPU runs the same
// path as real hosts). Abort state travels with the messages, which are the only way such a
// rank's work reaches this process's buffers.
// 1. The sender's side, on its rail stream R after the op's `ready` event (so after every wait
//    that precedes the op): the data's sends; then a 1-thread kernel that writes the token,
//    1 where any word of the runner's verdict table is set (the abort words of this process's
//    ranks, of every rank it loads directly, and its relayed-abort word), else 0; then one
//    more 8-byte send of the token on the same pair (a signal sends only it). The token is
//    read after the data's sends completed in R's order (NCCL and the rendezvous transports
//    complete a send once its source bytes were read), not before them: a released LSA
//    peer's early copy could overwrite the source between an earlier read and the send.
//    It is its own send, not in the data's NCCL group: in an aborted group the token could
//    land while the data had not.
// 2. The receiver's side, on its rail stream: the data's receives; the token word poisoned
//    (0xff..) and the token received into it; then one kernel (counter_add.hpp,
//    launch_relayed_counter_add): nothing once the receiver's own abort word is set; a
//    nonzero token stores 1 into the runner's relayed-abort word and adds nothing; a zero
//    token adds the op's value to the counter.
// 3. The end-of-call check (abort_check.hpp) watches the relayed-abort word beside the abort
//    words of the ranks it loads directly; the runner loads only those of ranks that are
//    this process's or load/store reachable (Fabric::load_store and signals()).
// Soundness, (a) to (c) of NOTE [CUDA call sequences] 5 for a message m from s to d:
// - Claim: where m's token is 0, m's bytes are valid. The bytes can be void in three ways,
//   and each sets a word of s's verdict before the token is read. (i) A wait before m on s
//   passed only because s released it: s's abort word was written first (the release writes
//   it before any signal word) and the token kernel follows that wait through `ready`.
//   (ii) A released rank p that s loads directly overwrote the source early (a copy whose
//   credit wait was released): p's abort word was written before that copy ran, and the
//   copy ran before the send read the source, which precedes the token kernel. (iii) A
//   message into the source delivered void bytes: by induction (messages complete in R's
//   order, all of a rank's messages share R) its token was nonzero and its kernel set s's
//   relayed-abort word earlier on R. A rank that s neither loads nor messages cannot write
//   s's buffers.
// - So (a): d's counter never counts void bytes (a zero token means valid bytes; a nonzero
//   one, or a token that never came, counts nothing), whatever s's NCCL sends, which cannot
//   be made conditional, do after s's release: they still match d's receives, in order.
// - (b): void bytes that m wrote into d's buffers (a released sender sends before its
//   credit) are followed, on d's rail stream, by m's token and its kernel, which set the
//   relayed-abort word before d's rail stream records its done event; the caller stream
//   waits for that event before the end-of-call check, which then holds the call until d's
//   own release (its watchdog times it out: the counter never advanced, or the check holds
//   its completion). Messages of later calls are posted after the call's entry event, so
//   after the previous call's check. Assumed, as for copies: a receive into a buffer that an
//   earlier call or round still reads is posted only after the receiver's side of the credit
//   that frees it (its send precedes the receive on d's rail stream); a protocol builder
//   that posted such a receive earlier would need the check between them.
// - (c) is the runner's, unchanged: the first call the release did not see complete is void.
// - A dead or stalled rank sends nothing: its peers' waits time out (the watchdog), and the
//   runtime's store heartbeats (peer_liveness.hpp) fail every rank of the group within the
//   timeout, whether or not it waits for the dead rank.
// - Abort then release: ncclCommAbort makes NCCL's enqueued kernels exit without completing
//   their transfers (a receive's buffer then holds part of a message, or nothing). The token
//   word was poisoned before its receive, so an aborted token receive counts nothing, and a
//   token is sent only after its data completed, so a token that arrived says the data did.
//   The runtime releases the runners' waits (abort words first) before it aborts the NCCL
//   communicators, so that nothing a release lets run counts either way.
// Cost: per data message one 8-byte send more and two 1-thread kernels; signal messages
// already sent 8 bytes and now carry the verdict in them.
// Checked on one H200 (bench/results/ipc/realhosts-2026-12-04): the token's cases one message
// at a time (tests/exec/abort_relay_test.cpp), the runner's messages and the emulated-host
// splits bitwise with tokens, and `check-runtime --release-rank` (a rank on another emulated
// host aborts mid-call and keeps sending): every rank raised, no call returned wrong bytes.
// A nonzero token from another process was seen to arrive at 2 processes with
// CUDA_DEVICE_MAX_CONNECTIONS=32 (the peer's reason names its lane handoff's relayed abort;
// bench/results/ipc/runs-2026-12-04-s37). In the other release runs the peers' own watchdogs
// fired first: the released rank's copies sat behind its held waits at 8 hardware queues, or
// the peer had not yet posted the receives of its messages.

#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "abort_check.hpp"
#include "tide/fabric/fabric.hpp"
#include "tide/program/program.hpp"

namespace tide::exec::cuda_detail {

struct MessagePart {
  void* data = nullptr;  // the contiguous bytes sent or received (the region, or `staging`)
  std::size_t bytes = 0;
  // A strided region: packed into / unpacked from `staging` by cudaMemcpy2DAsync.
  bool strided = false;
  void* region = nullptr;
  std::size_t width = 0, rows = 0, pitch = 0;
};

// NOTE [one-sided messages] (one_sided_messages.hpp): one put of a one-sided message: `bytes`
// from byte `first` of part `part`'s source region (counted from its first byte, rows at its
// pitch) into the receiver's window at `window_offset`; a descriptor takes one put per run
// contiguous in both its source and its destination.
struct OneSidedPut {
  std::size_t part = 0;
  std::size_t first = 0;
  std::size_t bytes = 0;
  std::int64_t window_offset = 0;
};

// How a message travels one-sided; empty (one_sided false) for two-sided messages.
struct OneSidedRoute {
  bool one_sided = false;
  std::vector<OneSidedPut> puts;  // sender
  int signals = 0;                // receiver: the signals it waits for (puts and the token)
};

struct Message {
  bool sender = true;
  int self = -1;                     // the rank whose side this is (sender or receiver)
  int peer = -1;                     // the other rank
  std::vector<MessagePart> parts;    // empty: one 8-byte token
  std::uint64_t* counter = nullptr;  // receiver: its own counter word
  std::uint64_t value = 0;
  cudaEvent_t ready = nullptr;  // sender: the op's stream -> the rail stream
  cudaEvent_t sent = nullptr;   // sender: the rail stream -> the op's stream
  std::vector<void*> staging;   // device buffers this message owns
  OneSidedRoute route;          // NOTE [one-sided messages]
};

// Two-sided transfers between ranks. Contract (NCCL's point-to-point semantics): for each
// ordered pair (from, to), the k-th send(from, to, ...) matches the k-th recv(to, from, ...),
// with the same byte count; each is enqueued on a stream of its own rank's device and
// completes in that stream's order; a send may wait (on the device) until its receive is
// posted, so a caller that enqueues two pairs' sends and receives in crossing orders on one
// stream deadlocks. Host calls never wait for the device.
// release() (fail-stop, NOTE [CUDA call sequences] 5; any thread, idempotent, never waits for
// the device): every wait of the transport's own kernels, pending or later, ends at once and
// moves nothing, so the streams drain; what the released messages delivered is void. A
// transport whose waits are another library's (NCCL's) has nothing to release: the
// communicator's abort ends those.
// Graphs (NOTE [CUDA call sequences] 3, 4, 6): capture_refusal() says why sends and receives
// cannot be captured into CUDA graphs at all (empty: they can); per_process_refusal() says why
// one process may not capture a message's side while its partner enqueues the other side
// outside a graph (empty: it may, as where the matching is numbered on the device). The
// runner's own slot graphs need both empty (each process decides them from its own
// bindings); a caller's capture, which the caller makes on every rank alike, needs the first.
// path() names how messages travel, for reports: "two-sided" (NCCL send/receive),
// "one-sided" (NCCL put/signal), "ipc-rendezvous", or a one-GPU test transport's name.
class MessageTransport {
 public:
  virtual ~MessageTransport() = default;
  virtual const char* path() const = 0;
  virtual void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) = 0;
  virtual void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) = 0;
  virtual void release() noexcept {}
  virtual std::string capture_refusal() const { return {}; }
  virtual std::string per_process_refusal() const { return {}; }
};

// The fabric's own messages (Fabric::send_on_lane/recv_on_lane: one local rank per process,
// NCCL), on message lane `lane` (CudaSequencePlace::message_channels).
class FabricTransport final : public MessageTransport {
 public:
  explicit FabricTransport(fabric::Fabric& fabric, int lane = 0) : fabric_(fabric), lane_(lane) {}
  const char* path() const override { return "two-sided"; }
  void send(int from, int to, const void* data, std::size_t bytes, cudaStream_t stream) override;
  void recv(int to, int from, void* data, std::size_t bytes, cudaStream_t stream) override;
  // ncclSend / ncclRecv are capturable (NCCL >= 2.9), but NCCL needs a send and its receive
  // both captured or both not, and a graph holding them launched on both ranks alike.
  std::string per_process_refusal() const override;

 private:
  fabric::Fabric& fabric_;
  int lane_ = 0;
};

// Whether `op` is a put or signal whose counter is on a rank other than its own, and its
// (from, to) pair.
bool crosses_ranks(const program::Op& op, int& from, int& to);

// How a message resolves its device addresses: `region` the first byte of a region (nullptr:
// not addressable by this process), `counter` a counter's word (nullptr: not addressable).
struct MessageAddresses {
  std::function<std::byte*(const program::Region&)> region;
  std::function<std::uint64_t*(const program::Counter&)> counter;
};

// The sender's or the receiver's side of a message op (device pointers resolved, staging
// allocated for strided parts where `staging`, events created). A one-sided route (NOTE
// [one-sided messages]) reads and writes its regions in place and takes staging = false.
// Throws tide::Unsupported for a put whose destinations are not all on the counter's rank, or
// a region this process cannot address.
Message map_message(const program::Op& op, bool sender, const MessageAddresses& at,
                    bool staging = true);

// NOTE [abort relay]: the words one side of a message uses. Sender: `verdict` (its token's
// words) and `send_token` (an 8-byte word on the sender's device). Receiver: `recv_token` (on
// its device), `own_abort` (its abort word) and `relay` (the runner's relayed-abort word).
struct MessageRelay {
  AbortCheck verdict{};
  std::uint64_t* send_token = nullptr;
  std::uint64_t* recv_token = nullptr;
  const std::uint64_t* own_abort = nullptr;
  std::uint64_t* relay = nullptr;
};

// Enqueues one side (NOTE [rail messages], NOTE [abort relay]) through `transport`: the data,
// then the abort token. A one-sided message (m.route.one_sided) goes through
// enqueue_one_sided_message (NOTE [one-sided messages]) and needs a OneSidedTransport.
void enqueue_message(const Message& m, MessageTransport& transport, cudaStream_t rail,
                     cudaStream_t op_stream, const MessageRelay& relay);

// Frees staging and events; never throws.
void release_message(Message& m) noexcept;

}  // namespace tide::exec::cuda_detail
