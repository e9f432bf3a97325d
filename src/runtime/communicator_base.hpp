// What every backend's communicator shares (NOTE [runtime] 1-4, 7): registration through the
// capability agreement, the groups and their places in the one arena, the lanes' handoffs,
// the landing slots' occupants, call bookkeeping. A backend adds its capabilities, its arena
// (commit) and how a call runs.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "group.hpp"
#include "peer_liveness.hpp"
#include "tide/core/capability.hpp"
#include "tide/program/lanes.hpp"
#include "tide/runtime/communicator.hpp"

namespace tide::runtime::detail {

// NOTE [runtime] 10: the signal words after the lanes' handoff words that the runtime itself
// uses on every rank; the groups' sequences' words follow them.
inline constexpr int kAbortWord = program::kHandoffWords;
inline constexpr int kCallTagWords[2] = {kAbortWord + 1, kAbortWord + 2};  // per lane
inline constexpr int kRuntimeWords = kAbortWord + 3;  // call_tags.hpp: what the tags hold

class CommunicatorBase : public Communicator {
 public:
  explicit CommunicatorBase(const CommunicatorOptions& options);

  Registration register_group(const GroupSpec& spec) final;
  const GroupInfo& info(int group) final;
  const GroupInfo& planned_info(int group) const final { return group_at(group).info; }
  void assign_landing_slots(std::span<const int> slots) final;
  GroupStats stats(int group) const final {
    GroupStats s = group_at(group).stats;
    add_path_stats(group, s);
    return s;
  }
  int rank() const final { return options_.rank; }
  int world() const final { return options_.world; }
  void release(int group, std::uintptr_t stream) final;
  void stage_gradients(int group, std::uintptr_t stream, std::span<const void* const> grads) final;
  bool holds_slot(int group) const final;
  ArenaInfo arena() final;

 protected:
  // What this rank can do, and whether the groups run on the host transport.
  virtual RankCapabilities capabilities() const = 0;
  virtual bool host_transport() const = 0;
  // NOTE [runtime] 9: why this backend cannot carry rail traffic between `hosts` hosts (empty
  // when it can).
  virtual std::string no_rail_messages(int hosts) const = 0;
  // NOTE [runtime] 11: why this backend cannot run the expert-parallel lane ("" when it can).
  // Every backend runs it: the host executor, and the CUDA sequence runner (the 8-source sum
  // is its Level 1 launch; rail puts and signals between hosts are its messages).
  virtual std::string ep_lane_refusal() const { return {}; }
  // NOTE [runtime] 9: rank r's host index (0, 1, ... in rank order), after the first
  // registration.
  const std::vector<int>& hosts() const { return hosts_; }
  // NOTE [runtime] 3: creates the arena at the first use (collective); sets every group's
  // info().landing and info().resident.
  virtual void commit() = 0;
  // How the group's calls ran, where the backend knows (GroupStats::*_replays).
  virtual void add_path_stats(int /*group*/, GroupStats& /*stats*/) const {}
  bool committed() const { return committed_; }
  // Also lets go of the bootstrap store: nothing after the arena's creation needs it, and a
  // caller's store (torch's TCPStore, whose server runs on rank 0) must not be kept alive by
  // a communicator past the caller's own teardown.
  void mark_committed() {
    committed_ = true;
    store_.reset();
  }
  // The bootstrap store until the arena exists (registration, agreement, the arena).
  Store& store() { return *store_; }
  // The same, to keep past mark_committed() (NOTE [peer liveness] 5: heartbeats across hosts).
  std::shared_ptr<Store> shared_store() const { return store_; }
  // NOTE [peer liveness]: this rank's liveness options (its hosts, its key prefix, half its
  // call timeout), after the first registration.
  PeerLivenessOptions liveness_options() const;
  // NOTE [communicator arena]: at commit (or arena_request()), before the backend creates its
  // arena: lays out the arena for every group, places their sequences and the handoffs
  // (arena_bytes_, signal_words_). Collective the first time; then does nothing.
  void lay_out();
  bool laid_out() const { return laid_out_; }
  std::uintptr_t provided_memory_ = 0;  // provide_arena()
  std::int64_t provided_bytes_ = 0;
  // The backend's part of release(): order the slot's next all-gather after `stream`'s work.
  virtual void record_release(int /*slot*/, std::uintptr_t /*stream*/) {}
  // The backend's part of stage_gradients(): after waiting for the slot's release where
  // `wait_release`, copy `bytes` from `src` to `dst` (this rank's memory) on `stream`.
  virtual void copy_into_slot(int slot, bool wait_release, std::uintptr_t stream,
                              std::span<const std::pair<const void*, void*>> copies,
                              std::span<const std::int64_t> bytes) = 0;
  // NOTE [runtime] 8, in reduce_scatter: the staged gradients' pointers when `grads` is empty
  // (throws InvalidArgument when nothing is staged); after the call, release_staged().
  std::vector<const void*> gradients_of(Group& g, std::span<const void* const> grads) const;
  void release_staged(Group& g, std::uintptr_t stream);
  // NOTE [runtime] 7, before an all-gather of `g`: refuses a slot another group holds, then
  // takes it; returns whether the slot was released before (its next user must wait for it).
  bool take_slot(const Group& g);

  Group& group_at(int group);  // throws InvalidArgument for an id not registered
  const Group& group_at(int group) const;
  // Checks a call's pointers: their counts, and none null for a parameter with bytes (a
  // caller's tensor subclass may report no address). Then the (group, collective) tag of the
  // next call.
  void check_all_gather(const Group& g, std::span<const void* const> shards) const;
  void check_reduce_scatter(const Group& g, std::span<const void* const> grads,
                            const float* out) const;
  std::int64_t next_call_index() { return calls_++; }
  // Distinct per (group, collective); the lanes' handoffs have tags of their own.
  static std::int64_t call_tag(const Group& g, int collective) {
    return (std::int64_t{g.index} << 1) | collective;
  }
  static std::int64_t handoff_tag(int collective) { return -1 - collective; }

  CommunicatorOptions options_;
  Topology topology_;
  RsOptions rs_options_;  // the library's defaults
  std::vector<std::unique_ptr<Group>> groups_;
  // Set by lay_out(): the arena, its size and the signal words (the handoffs' first).
  program::CommunicatorArena layout_;
  std::int64_t arena_bytes_ = 0;
  int signal_words_ = 0;
  SequenceState handoffs_[2];  // NOTE [lane handoff]: the all-gather and RS lanes

 private:
  std::size_t group_slot(int group) const;  // the index of a registered group id, or throws
  // NOTE [runtime] 9: collective, at the first registration: hosts_, topology_ and, where the
  // topology cannot be served, hosts_refusal_.
  void discover_hosts();
  EpLaneOffer ep_lane_offer() const;  // NOTE [runtime] 11, after discover_hosts()
  std::uint64_t host_id_ = 0;         // this rank's (emulated: per node)
  std::vector<int> hosts_;
  std::string hosts_refusal_;
  int registrations_ = 0;
  std::int64_t calls_ = 0;
  bool committed_ = false;
  std::shared_ptr<Store> store_;
  bool laid_out_ = false;
  std::vector<int> occupant_;   // per slot: the group holding it, or -1 (lay_out)
  std::vector<bool> released_;  // per slot: released at least once
};

}  // namespace tide::runtime::detail
