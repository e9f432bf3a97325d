// NOTE [runtime] 5-8 on GPUs: the communicator of the nccl and ipc backends
// (cuda_communicator.hpp).
#include "cuda_communicator.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "call_tags.hpp"
#include "tide/core/env.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/fabric/device_capabilities.hpp"
#include "tide/fabric/runtime_window.hpp"

namespace tide::runtime::detail {
namespace {

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TIDE_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

CudaCommunicator::CudaCommunicator(const CommunicatorOptions& options) : CommunicatorBase(options) {
  device_ = options.device;
  if (device_ < 0) TIDE_CUDA_CHECK(cudaGetDevice(&device_));
  TIDE_CUDA_CHECK(cudaSetDevice(device_));
  caps_ = fabric::device_capabilities(device_);
}

CudaCommunicator::~CudaCommunicator() {
  // The watchdog first; then the calls still running get the timeout to finish (a stalled
  // one aborts, which releases its waits, so nothing below can hang); then the runners
  // (their streams and events), the window and the communicators.
  watchdog_.reset();
  if (committed()) {
    drain();
    if (stuck()) {  // NOTE [runtime] 5: nothing that synchronises may run; leak it all
      for (auto& r : runners_)
        static_cast<void>(r.release());
      for (auto& r : handoff_runners_)
        static_cast<void>(r.release());
      if (windows_) windows_->release();
      static_cast<void>(windows_.release());
      return;
    }
    (void)cudaDeviceSynchronize();
  }
  runners_.clear();
  for (auto& r : handoff_runners_)
    r.reset();
  for (cudaEvent_t e : release_events_)
    (void)cudaEventDestroy(e);
  if (fence_event_ != nullptr) (void)cudaEventDestroy(fence_event_);
  if (stall_gate_ != nullptr) (void)cudaFree(stall_gate_);
  windows_.reset();
}

void CudaCommunicator::all_gather(int group, std::uintptr_t stream,
                                  std::span<const void* const> shards) {
  Group& g = group_at(group);
  check_all_gather(g, shards);
  check_not_first_under_capture(stream);
  commit();
  check_alive();
  const auto caller = reinterpret_cast<cudaStream_t>(stream);
  // NOTE [runtime] 7: the slot's previous occupant is done with it (an event, on the device).
  if (take_slot(g)) {
    TIDE_CUDA_CHECK(
        cudaStreamWaitEvent(caller, release_events_[static_cast<std::size_t>(g.slot)],
                            capturing(caller) ? cudaEventWaitExternal : cudaEventWaitDefault));
  }
  std::vector<exec::CudaCallBindings> bindings(static_cast<std::size_t>(options_.world));
  exec::CudaCallBindings& mine = bindings[static_cast<std::size_t>(options_.rank)];
  if (g.ag.options().shard_in_stage()) {
    mine.tensors.assign(shards.begin(), shards.end());
  } else {
    // The previous all-gather (maybe on another stream) may still read the resident shard.
    runner(group, 0).order_after_previous(caller);
    for (std::size_t p = 0; p < shards.size(); ++p) {  // copy-in: a local copy of S bytes
      const ParamLayout& pl = g.layout.param(static_cast<int>(p));
      TIDE_CUDA_CHECK(cudaMemcpyAsync(g.info.resident + pl.offset, shards[p],
                                      static_cast<std::size_t>(pl.shard_bytes),
                                      cudaMemcpyDeviceToDevice, caller));
    }
  }
  stall_if_injected(caller);
  run_in_lane(0, runner(group, 0), bindings, 1.0f, false, caller);
  count_all_gather(g, !shards.empty());
}

void CudaCommunicator::reduce_scatter(int group, std::uintptr_t stream,
                                      std::span<const void* const> grads, float* out, float alpha,
                                      bool accumulate) {
  Group& g = group_at(group);
  check_reduce_scatter(g, grads, out);
  check_not_first_under_capture(stream);
  commit();
  check_alive();
  std::vector<exec::CudaCallBindings> bindings(static_cast<std::size_t>(options_.world));
  exec::CudaCallBindings& mine = bindings[static_cast<std::size_t>(options_.rank)];
  mine.tensors = gradients_of(g, grads);
  mine.output = out;
  stall_if_injected(reinterpret_cast<cudaStream_t>(stream));
  run_in_lane(1, runner(group, 1), bindings, alpha, accumulate,
              reinterpret_cast<cudaStream_t>(stream));
  release_staged(g, stream);  // NOTE [runtime] 8: after the call's reads, on its stream
  count_reduce_scatter(g);
}

// A lane's handoff calls are captured with the calls they precede (group -1).
GraphCalls CudaCommunicator::take_graph_calls() {
  GraphCalls out;
  for (std::size_t i = 0; i < runners_.size(); ++i) {
    const exec::CudaCapturedCalls c = runners_[i]->take_captured();
    if (c.calls > 0)
      out.sequences.push_back({static_cast<int>(i / 2), i % 2 == 1, c.first_call, c.calls});
  }
  for (int lane = 0; lane < 2 && committed(); ++lane) {
    const exec::CudaCapturedCalls c = handoff_runners_[lane]->take_captured();
    if (c.calls > 0) out.sequences.push_back({-1, lane == 1, c.first_call, c.calls});
  }
  return out;
}

// Every sequence is checked before any advances, so a refused launch leaves the host's
// call indices as they were.
void CudaCommunicator::prepare_graph_launch(const GraphCalls& calls) {
  check_alive();
  if (!committed() && !calls.sequences.empty()) {
    throw InvalidArgument("prepare_graph_launch: no call was captured yet");
  }
  auto captured = [this](const GraphCalls::Sequence& q) -> exec::CudaSequenceRunner& {
    if (q.group == -1) return *handoff_runners_[q.reduce_scatter ? 1 : 0];
    (void)group_at(q.group);
    return runner(q.group, q.reduce_scatter ? 1 : 0);
  };
  for (const GraphCalls::Sequence& q : calls.sequences)
    captured(q).check_replay({q.first_call, q.calls});
  for (const GraphCalls::Sequence& q : calls.sequences)
    captured(q).prepare_replay({q.first_call, q.calls});
}

std::int64_t CudaCommunicator::arena_request() {
  if (committed()) throw InvalidArgument("arena_request: the arena exists already");
  lay_out();
  return allocation_bytes(fabric::window_bytes(arena_bytes_, signal_words_));
}

void CudaCommunicator::provide_arena(std::uintptr_t memory, std::int64_t bytes) {
  const std::int64_t needed = arena_request();
  if (memory == 0 || bytes < needed) {
    throw InvalidArgument("provide_arena: " + std::to_string(bytes) + " bytes at " +
                          std::to_string(memory) + " for an arena of " + std::to_string(needed) +
                          " bytes (ask arena_request())");
  }
  provided_memory_ = memory;
  provided_bytes_ = bytes;
}

// Fail-stop (NOTE [runtime] 5), from the caller's or the watchdog's thread: the reason is
// kept for every later call, the runners' waits are released so that their streams (and
// the caller streams joined to them) drain, and the NCCL communicators are aborted.

void CudaCommunicator::abort(const std::string& reason) {
  {
    std::lock_guard lock(abort_mutex_);
    if (!aborted_.empty()) return;
    aborted_ = reason;
  }
  // NOTE [peer liveness] 6: the peers on other hosts learn it within a period.
  const auto tell_peers = [&] {
    if (liveness_) liveness_->mark_failed("rank " + std::to_string(options_.rank) + ": " + reason);
  };
  if (!holds_messages()) tell_peers();
  // NOTE [abort relay]: the waits first (abort words before any signal word), then the
  // messages' own waits, then the NCCL communicators; the tokens make the order safe.
  for (exec::CudaSequenceRunner* r : every_runner()) {
    try {
      r->release_waits();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tide: rank %d: releasing the waits failed: %s\n", options_.rank,
                   e.what());
    }
  }
  if (holds_messages()) {  // the injected fault: peers hear of it from the tokens alone
    std::this_thread::sleep_for(options_.fault_injection.release_hold);
    for (exec::CudaSequenceRunner* r : every_runner())
      r->release_messages();
    tell_peers();
  }
  if (windows_) windows_->abort();
  // NOTE [CUDA call sequences] 5 (c): the calls whose outputs are garbage, named in every later
  // raise, so that nobody takes one of them for a result.
  std::string void_calls;
  for (std::size_t i = 0; i < runners_.size(); ++i) {
    const std::int64_t first = runners_[i]->first_void_call();
    if (first < 0 || first >= runners_[i]->calls()) continue;  // none was in flight
    void_calls += std::string(void_calls.empty() ? "" : ", ") +
                  (i % 2 == 0 ? "all-gather" : "reduce-scatter") + " calls " +
                  std::to_string(first) + " on of group '" + groups_[i / 2]->spec.name + "'";
  }
  if (!void_calls.empty()) {
    std::lock_guard lock(abort_mutex_);
    aborted_ += "; outputs void (never use them): " + void_calls;
  }
}

void CudaCommunicator::add_path_stats(int group, GroupStats& stats) const {
  if (!committed()) return;
  const auto at = static_cast<std::size_t>(2 * group);
  const exec::CudaSequenceRunner& ag_runner = *runners_[at];
  const exec::CudaSequenceRunner& rs_runner = *runners_[at + 1];
  // Captures first: a call captures and launches under the runner's lock, so replays >= 0.
  stats.all_gather_graph_captures = ag_runner.graph_captures();
  stats.reduce_scatter_graph_captures = rs_runner.graph_captures();
  // A capture whose launch threw counts without its launch: never below 0.
  stats.all_gather_replays =
      std::max<std::int64_t>(0, ag_runner.graph_launches() - stats.all_gather_graph_captures);
  stats.reduce_scatter_replays =
      std::max<std::int64_t>(0, rs_runner.graph_launches() - stats.reduce_scatter_graph_captures);
  stats.all_gather_repoint_failure = ag_runner.repoint_failure();
  stats.reduce_scatter_repoint_failure = rs_runner.repoint_failure();
  // NOTE [runtime] 9: what this rank sent to ranks of other hosts.
  stats.rail_messages = ag_runner.messages_sent() + rs_runner.messages_sent();
  stats.rail_message_bytes = ag_runner.message_bytes_sent() + rs_runner.message_bytes_sent();
  // NOTE [one-sided messages]: each sequence's path, and why not one-sided.
  const std::string ag = ag_runner.message_path();
  const std::string rs = rs_runner.message_path();
  if (ag.empty() && rs.empty()) return;  // every peer addressable: no messages
  stats.message_path = (ag.empty() ? "none" : ag) + "/" + (rs.empty() ? "none" : rs);
  for (const exec::CudaSequenceRunner* r : {&ag_runner, &rs_runner})
    if (!r->message_path().empty() && stats.message_path_reason.empty())
      stats.message_path_reason = r->one_sided_refusal();
}

void CudaCommunicator::commit() {
  if (committed()) return;
  TIDE_CUDA_CHECK(cudaSetDevice(device_));
  lay_out();
  windows_ = open_windows(fabric::window_bytes(arena_bytes_, signal_words_),
                          reinterpret_cast<void*>(provided_memory_));  // nullptr: its own
  exec::CudaSequenceOptions runner_options;
  runner_options.replay_graphs = !env::flag("TIDE_NO_GRAPH_REPLAY");
  // The setup below on a private stream, synchronised before the runners (which synchronise
  // only their own setup, NOTE [CUDA call sequences] 1) are built: no device-wide wait.
  cudaStream_t setup = nullptr;
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&setup, cudaStreamNonBlocking));
  static const std::uint64_t open = 1;  // outlives the asynchronous copy
  if (options_.rank == options_.fault_injection.stall_rank &&
      options_.fault_injection.stall_at_call >= 0) {
    void* gate = nullptr;
    TIDE_CUDA_CHECK(cudaMalloc(&gate, 8));
    TIDE_CUDA_CHECK(cudaMemcpyAsync(gate, &open, 8, cudaMemcpyHostToDevice, setup));
    stall_gate_ = static_cast<std::uint64_t*>(gate);
    runner_options.fault_injection.gate_rank = options_.rank;
    runner_options.fault_injection.gate_word = stall_gate_;
  }
  if (holds_messages()) runner_options.fault_injection.hold_messages_on_release = true;
  exec::CudaSequenceOptions handoff_options;  // never gated: the stall is a group's call
  handoff_options.replay_graphs = runner_options.replay_graphs;
  // NOTE [runtime] 10: this rank's call-tag words start at 0 (the runners zero their own
  // counters and the abort word).
  std::uint64_t* words = windows_->fabric().signals(options_.rank);
  for (const int word : kCallTagWords)
    TIDE_CUDA_CHECK(cudaMemsetAsync(words + word, 0, 8, setup));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(setup));
  TIDE_CUDA_CHECK(cudaStreamDestroy(setup));
  // NOTE [graph wait budget]: a lane's calls run one after another (NOTE [lane handoff]), so
  // its runners' graph waits count once per device: the all-gather lane and the RS lane.
  const std::uint64_t graph_lanes[2] = {exec::new_graph_lane(), exec::new_graph_lane()};
  for (int lane = 0; lane < 2; ++lane) {
    exec::CudaSequencePlace place{0, handoffs_[lane].first_counter};
    place.abort_word = kAbortWord;
    place.message_channels = lane;  // NOTE [ipc rendezvous transport]: a lane's set
    place.messages = windows_->transports(lane);
    handoff_options.graph_lane = graph_lanes[lane];
    handoff_runners_[lane] = std::make_unique<exec::CudaSequenceRunner>(
        handoffs_[lane].sequence, windows_->fabric(), place, handoff_options);
  }
  release_events_.assign(layout_.slots.size(), nullptr);
  for (cudaEvent_t& e : release_events_)
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  for (auto& g : groups_) {
    for (int collective = 0; collective < 2; ++collective) {
      const SequenceState& calls = collective == 0 ? g->all_gathers : g->reduce_scatters;
      exec::CudaSequencePlace place{0, calls.first_counter};
      place.abort_word = kAbortWord;
      place.call_tag_word = kCallTagWords[collective];
      place.call_tag = call_tag_of(g->index);
      place.message_channels = collective;  // the lane's (NOTE [ipc rendezvous transport])
      place.messages = windows_->transports(collective);
      runner_options.graph_lane = graph_lanes[collective];  // lane 0: all-gathers, 1: RS
      runners_.push_back(std::make_unique<exec::CudaSequenceRunner>(
          calls.sequence, windows_->fabric(), place, runner_options));
    }
    std::byte* arena = windows_->window();
    g->info.landing = arena + g->ag_areas.landing;
    g->info.resident = g->ag.options().shard_in_stage() ? nullptr : arena + g->ag_areas.resident;
    g->info.graph_period =
        std::lcm(runners_[runners_.size() - 2]->event_slots(), runners_.back()->event_slots());
  }
  // Every runner zeroed its rank's signal words; no rank may signal a peer before that.
  static_cast<void>(all_gather_values(store(), options_.key_prefix + "/cuda/ready", options_.rank,
                                      options_.world, "1", options_.timeout));
  // NOTE [peer liveness]: so that the watchdog can name a peer that died: by its pid on this
  // host, by its heartbeats on another.
  liveness_ = std::make_unique<PeerLiveness>(shared_store(), liveness_options());
  mark_committed();
  watchdog_ = std::make_unique<Watchdog>([this] { return stalled_call(); },
                                         [this](const std::string& reason) { fail(reason); },
                                         watchdog_period());
}

void CudaCommunicator::copy_into_slot(int slot, bool wait_release, std::uintptr_t stream,
                                      std::span<const std::pair<const void*, void*>> copies,
                                      std::span<const std::int64_t> bytes) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (wait_release) {
    TIDE_CUDA_CHECK(
        cudaStreamWaitEvent(s, release_events_[static_cast<std::size_t>(slot)],
                            capturing(s) ? cudaEventWaitExternal : cudaEventWaitDefault));
  }
  for (std::size_t i = 0; i < copies.size(); ++i) {
    TIDE_CUDA_CHECK(cudaMemcpyAsync(copies[i].second, copies[i].first,
                                    static_cast<std::size_t>(bytes[i]), cudaMemcpyDeviceToDevice,
                                    s));
  }
}

// NOTE [runtime] 10: behind the abort check, so that once a peer released its waits the slot's
// next occupant (and the caller's work after the release) holds until this rank's own release.
void CudaCommunicator::record_release(int slot, std::uintptr_t stream) {
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  handoff_runners_[0]->enqueue_abort_check(s);
  TIDE_CUDA_CHECK(
      cudaEventRecordWithFlags(release_events_[static_cast<std::size_t>(slot)], s,
                               capturing(s) ? cudaEventRecordExternal : cudaEventRecordDefault));
}

// NOTE [lane handoff]: the caller stream after the lane's previous call (which may have run
// on another stream) and after the last fence (NOTE [arena lending]), the handoff, then the call.
void CudaCommunicator::run_in_lane(int lane, exec::CudaSequenceRunner& call,
                                   std::span<const exec::CudaCallBindings> bindings, float alpha,
                                   bool accumulate, cudaStream_t caller) {
  if (lane_previous_[lane] != nullptr) lane_previous_[lane]->order_after_previous(caller);
  if (fence_pending_[lane]) {
    TIDE_CUDA_CHECK(cudaStreamWaitEvent(
        caller, fence_event_, capturing(caller) ? cudaEventWaitExternal : cudaEventWaitDefault));
    fence_pending_[lane] = false;
  }
  const std::vector<exec::CudaCallBindings> none(static_cast<std::size_t>(options_.world));
  handoff_runners_[lane]->enqueue(none, 1.0f, false, caller);
  call.enqueue(bindings, alpha, accumulate, caller);
  lane_previous_[lane] = &call;
}

// NOTE [arena lending]: each lane's handoff (NOTE [lane handoff]) on `stream`, after the lane's
// last call joined it: a device-side barrier of every rank that the watchdog watches and an
// abort releases like any handoff. The lanes' next calls wait for the stream's position.
void CudaCommunicator::fence(std::uintptr_t stream) {
  check_alive();
  if (!committed())
    throw InvalidArgument("fence: the arena does not exist yet (make a call first)");
  TIDE_CUDA_CHECK(cudaSetDevice(device_));
  const auto s = reinterpret_cast<cudaStream_t>(stream);
  if (capturing(s)) throw InvalidArgument("fence: its stream is being captured into a CUDA graph");
  if (fence_event_ == nullptr)
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&fence_event_, cudaEventDisableTiming));
  const std::vector<exec::CudaCallBindings> none(static_cast<std::size_t>(options_.world));
  for (int lane = 0; lane < 2; ++lane) {
    if (lane_previous_[lane] != nullptr) lane_previous_[lane]->order_after_previous(s);
    handoff_runners_[lane]->enqueue(none, 1.0f, false, s);
  }
  TIDE_CUDA_CHECK(cudaEventRecord(fence_event_, s));
  fence_pending_[0] = fence_pending_[1] = true;
}

// NOTE [runtime] 6: the first call sets up the arena and synchronises, which a capture
// cannot hold.
void CudaCommunicator::check_not_first_under_capture(std::uintptr_t stream) const {
  if (committed()) return;
  TIDE_CUDA_CHECK(cudaSetDevice(device_));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TIDE_CUDA_CHECK(cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &status));
  if (status != cudaStreamCaptureStatusNone) {
    throw InvalidArgument(
        "a TIDE call cannot be the communicator's first while its stream is being captured "
        "into a CUDA graph (the first call creates the arena and synchronises): make one "
        "call of every group before capturing, as a warm-up step does");
  }
}

// The injected stall (CommunicatorFaultInjection::stall_rank): the gate closes before that call.
void CudaCommunicator::stall_if_injected(cudaStream_t caller) {
  if (stall_gate_ != nullptr && calls_ == options_.fault_injection.stall_at_call) {
    TIDE_CUDA_CHECK(cudaMemsetAsync(stall_gate_, 0, 8, caller));
  }
  ++calls_;
}

void CudaCommunicator::check_alive() const {
  std::lock_guard lock(abort_mutex_);
  if (!aborted_.empty()) {
    throw CommunicationError("rank " + std::to_string(options_.rank) +
                             ": communicator aborted: " + aborted_);
  }
}

// A tenth of the timeout, between 1 ms and 100 ms.
std::chrono::milliseconds CudaCommunicator::watchdog_period() const {
  return std::clamp(options_.timeout / 10, std::chrono::milliseconds(1),
                    std::chrono::milliseconds(100));
}

// The watchdog's check: the first call of any runner past the timeout, or, where a peer is
// dead (NOTE [peer liveness]: its process gone on this host, its heartbeat silent or failed
// on another), the first call still running a tenth of the timeout (at least 1 s) after its
// enqueue (a peer that finished its job and exited is no failure while this rank's calls
// still complete).
std::optional<std::string> CudaCommunicator::stalled_call() const {
  TIDE_CUDA_CHECK(cudaSetDevice(device_));
  const std::optional<DeadPeer> dead = liveness_ ? liveness_->dead() : std::nullopt;
  const auto bound = !dead ? options_.timeout
                           : std::min(options_.timeout, std::max(std::chrono::milliseconds(1000),
                                                                 options_.timeout / 10));
  const std::vector<exec::CudaSequenceRunner*> all = every_runner();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::optional<exec::CudaStalledCall> stall = all[i]->stalled(bound);
    if (!stall) continue;
    const bool handoff = i >= runners_.size();
    const int collective =
        handoff ? static_cast<int>(i - runners_.size()) : static_cast<int>(i % 2);
    const std::string kind = collective == 0 ? "all-gather" : "reduce-scatter";
    const std::string call =
        handoff ? "the handoff before " + kind + " " + std::to_string(stall->call) +
                      " of the communicator (every rank finishing the previous " + kind + ")"
                : kind + " call " + std::to_string(stall->call) + " of group '" +
                      groups_[i / 2]->spec.name + "'";
    const std::optional<std::string> misordered =
        handoff ? std::nullopt : call_order_mismatch(collective, static_cast<int>(i / 2), *stall);
    std::string reason =
        dead ? dead->what + "; rank " + std::to_string(options_.rank) + " was waiting in " + call
        : misordered ? *misordered
                     : "rank " + std::to_string(options_.rank) + ": " + call +
                           " did not complete within " + std::to_string(options_.timeout.count()) +
                           " ms (a peer stalled, died or issued another call order)";
    if (!stall->waits.empty()) reason += "; unsatisfied: ";
    for (std::size_t k = 0; k < stall->waits.size(); ++k)
      reason += (k == 0 ? "" : "; ") + stall->waits[k];
    // NOTE [abort relay]: each runner has its own relayed-abort word, and the call held may be
    // another's (a group's call behind its lane's handoff): name every runner a token reached.
    for (std::size_t j = 0; j < all.size(); ++j) {
      if (j == i) continue;
      const std::optional<bool> relayed = all[j]->relayed_abort();
      if (!relayed) break;  // the queues are held: no more bounded reads
      if (!*relayed) continue;
      reason += j >= runners_.size()
                    ? "; the " +
                          std::string(j == runners_.size() ? "all-gather" : "reduce-scatter") +
                          " lane's handoff"
                    : "; group '" + groups_[j / 2]->spec.name + "''s " +
                          (j % 2 == 0 ? "all-gather" : "reduce-scatter");
      reason +=
          " received a message that carried an abort token (a rank this one cannot read "
          "aborted)";
    }
    return reason;
  }
  return std::nullopt;
}

// NOTE [runtime] 10: the line of a stalled call of `group` that a peer's call-tag word shows
// was misordered (call_tags.hpp); nullopt where none does.
std::optional<std::string> CudaCommunicator::call_order_mismatch(
    int collective, int group, const exec::CudaStalledCall& stall) const {
  const std::optional<CallOrderMismatch> m = find_call_order_mismatch(
      stall.call_tags, options_.rank, group, static_cast<int>(groups_.size()));
  if (!m) return std::nullopt;
  const std::string named =
      m->peer_group >= 0
          ? "group '" + groups_[static_cast<std::size_t>(m->peer_group)]->spec.name + "''s"
          : "another group's";
  return "call-order mismatch (misordered calls): rank " + std::to_string(options_.rank) + "'s " +
         (collective == 0 ? "all-gather" : "reduce-scatter") + " call " +
         std::to_string(m->lane_call) + " of the communicator is group '" +
         groups_[static_cast<std::size_t>(group)]->spec.name + "''s, rank " +
         std::to_string(m->peer) + "'s is " + named +
         ": the ranks issued their groups' calls in different orders (every rank must issue the "
         "same calls in the same order)";
}

// The watchdog's verdict (NOTE [runtime] 5): one line, the abort, then a bounded wait for
// the released streams to drain. Streams that stay held (a release copy queued behind a
// held hardware queue) would hang the process's next synchronisation forever, so the
// process then ends, as PyTorch's NCCL watchdog ends it after a collective's timeout.
void CudaCommunicator::fail(const std::string& reason) {
  std::fprintf(stderr, "tide: %s\n", reason.c_str());
  std::fflush(stderr);
  abort(reason);
  const auto grace = std::min(options_.timeout, std::chrono::milliseconds(10000));
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!stuck()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::fprintf(stderr,
               "tide: rank %d: the GPU's streams stay held after the abort; ending the "
               "process (fail-stop)\n",
               options_.rank);
  std::fflush(stderr);
  std::_Exit(1);
}

bool CudaCommunicator::stuck() const {
  bool any = false;
  for (const exec::CudaSequenceRunner* r : every_runner())
    any = any || r->stuck();
  return any;
}

// The groups' runners (2 g + collective), then the lanes' handoffs (NOTE [lane handoff]).
std::vector<exec::CudaSequenceRunner*> CudaCommunicator::every_runner() const {
  std::vector<exec::CudaSequenceRunner*> all;
  for (const auto& r : runners_)
    all.push_back(r.get());
  for (const auto& r : handoff_runners_) {
    if (r) all.push_back(r.get());
  }
  return all;
}

// Waits, bounded by the timeout, until every runner's calls completed; aborts otherwise.
void CudaCommunicator::drain() {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    bool idle = true;
    for (const exec::CudaSequenceRunner* r : every_runner())
      idle = idle && r->idle();
    if (idle) return;
    if (std::chrono::steady_clock::now() > deadline) {
      std::optional<std::string> reason = stalled_call();
      abort(reason ? *reason : "calls still running at teardown after the timeout");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace tide::runtime::detail
