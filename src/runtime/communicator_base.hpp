// What every backend's communicator shares (NOTE [runtime] 1-4): registration through the
// capability agreement, the groups and their regions, call bookkeeping. A backend adds its
// capabilities, its arena (commit) and how a call runs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "group.hpp"
#include "tide/core/capability.hpp"
#include "tide/runtime/communicator.hpp"

namespace tide::runtime::detail {

class CommunicatorBase : public Communicator {
 public:
  explicit CommunicatorBase(const CommunicatorOptions& options);

  Registration register_group(const GroupSpec& spec) final;
  const GroupInfo& info(int group) const final;
  GroupStats stats(int group) const final {
    GroupStats s = group_at(group).stats;
    add_path_stats(group, s);
    return s;
  }
  int rank() const final { return options_.rank; }
  int world() const final { return options_.world; }

 protected:
  // What this rank can do, and whether the groups run on the host transport.
  virtual RankCapabilities capabilities() const = 0;
  virtual bool host_transport() const = 0;
  // NOTE [runtime] 3: creates the arena at the first use (collective); sets every group's
  // info().landing and info().resident.
  virtual void commit() const = 0;
  // How the group's calls ran, where the backend knows (GroupStats::*_replays).
  virtual void add_path_stats(int /*group*/, GroupStats& /*stats*/) const {}
  bool committed() const { return committed_; }
  void mark_committed() const { committed_ = true; }

  Group& group_at(int group) const;
  // Checks a call's pointer counts; the (group, collective) tag of the next call.
  void check_all_gather(const Group& g, std::size_t shards) const;
  void check_reduce_scatter(const Group& g, std::size_t grads, const float* out) const;
  std::int64_t next_call_index() { return calls_++; }
  static std::int64_t call_tag(const Group& g, int collective) {
    return (g.region_offset << 1) | collective;  // distinct per (group, collective)
  }

  CommunicatorOptions options_;
  Topology topology_;
  RsOptions rs_options_;  // the library's defaults
  std::vector<std::unique_ptr<Group>> groups_;
  std::int64_t regions_bytes_ = 0;  // the arena: every group's region
  int signal_words_ = 0;            // every group's sequences' counters

 private:
  int registrations_ = 0;
  std::int64_t calls_ = 0;
  mutable bool committed_ = false;
};

}  // namespace tide::runtime::detail
