// The TIDE-AG plan (Sec. 3.1): which shard slots move in which round, and the copies that scatter
// them to their parameter-major landing (Eq. 2). M = 1: rank r copies its P shard pieces to their
// landing on every local GPU (P descriptors per destination). M > 1: Bruck recursive doubling over
// each rail in ceil(log2 M) rounds; round d sends the first c_d = min(2^d, M - 2^d) slots to
// (n - 2^d) mod M and receives as many from (n + 2^d) mod M into stage slots [2^d, 2^d + c_d).
// Slot i holds node (n + i) mod M's shard (slot 0 the own). A run of >= min_strided_run slots not
// crossing the wrap is one strided copy per parameter (landing pitch L s_p, stage pitch S); the
// last round is split into at most max_last_round_groups. Round d >= 1 waits for its target's
// confirmation of round d - 1's heads (head then tail, head_bytes per round). See docs/core.md.
#pragma once

#include <cstdint>
#include <vector>

#include "tide/core/layout.hpp"

namespace tide {

struct AgOptions {
  bool mixed_precision_cast = false;  // fp32 master shards cast into stage slot 0
  // The shard arrives per call as per-parameter tensors copied into stage slot 0 (no resident
  // shard). Implied by mixed_precision_cast.
  bool staged_shards = false;
  // Where the rank's own shard (slot 0) is read from: stage slot 0, or the resident shard.
  bool shard_in_stage() const { return mixed_precision_cast || staged_shards; }
  int min_strided_run = 4;  // merge runs of at least this many slots
  int max_last_round_groups = 4;
  std::int64_t head_bytes = std::int64_t{8} << 20;  // lead-based pacing: heads per round
};

struct AgRound {
  int index = 0;           // d
  int slot_count = 0;      // c_d
  int first_slot = 0;      // 2^d: received into [first_slot, first_slot + slot_count)
  int peer_distance = 0;   // 2^d: send to (n - 2^d) mod M, receive from (n + 2^d) mod M
  std::int64_t bytes = 0;  // c_d * S on the rail
  std::int64_t head_bytes = 0;
  std::int64_t tail_bytes = 0;
  bool paced = false;  // waits for the target's confirmation of round d - 1's heads
};

// Slots received together (one round, or one part of the last round) and scattered together.
struct AgSlotGroup {
  int round = 0;
  int first_slot = 0;
  int slot_count = 0;
};

// One copy-engine descriptor of the scatter into the landing; a 1-D copy when height == 1.
struct AgScatterCopy {
  int param = 0;
  int first_slot = 0;
  int height = 1;               // slots covered (rows of the 2-D copy)
  bool from_resident = false;   // slot 0 read in place from the resident-shard region
  std::int64_t src_offset = 0;  // bytes into the stage (or the resident shard)
  std::int64_t src_pitch = 0;   // S
  std::int64_t dst_offset = 0;  // bytes into the landing, Eq. 2, of the first slot's rank
  std::int64_t dst_pitch = 0;   // L * s_p
  std::int64_t width = 0;       // s_p
};

struct AgDescriptorCounts {
  std::int64_t per_destination = 0;  // descriptors one landing write set needs
  std::int64_t unicast = 0;          // per rank per call: L destinations
  std::int64_t multicast = 0;        // per rank per call: one multicast destination
  std::int64_t flat_unicast = 0;     // without strided merging: M * P per destination
  std::int64_t flat_multicast = 0;
};

class AgPlan {
 public:
  // Throws InvalidArgument for options out of range, and for a mixed-precision cast into an
  // all-gather dtype other than bf16 (the cast kernel writes bf16).
  AgPlan(const GroupLayout& layout, AgOptions options);

  const GroupLayout& layout() const { return layout_; }
  const AgOptions& options() const { return options_; }
  const std::vector<AgRound>& rounds() const { return rounds_; }           // R entries
  const std::vector<AgSlotGroup>& slot_groups() const { return groups_; }  // in arrival order

  // Receive stage: (M - 1) S bytes, or M S with the mixed-precision cast (slot 0 staged);
  // none on one node (one_node()).
  std::int64_t stage_bytes() const;
  // NOTE [one-node TIDE-AG] (program/ag_builder.cpp): M = 1 with the shard per call: no stage.
  bool one_node() const { return layout_.topology().nodes() == 1 && options_.shard_in_stage(); }
  std::int64_t stage_slot_offset(int slot) const;
  int source_node(int node, int slot) const;  // (n + slot) mod M

  // The scatter of node n's local GPU l, slot 0 (own shard) first, then every group in
  // arrival order; the same symmetric offsets serve every destination GPU.
  std::vector<AgScatterCopy> scatter_copies(int node, int local) const;
  AgDescriptorCounts descriptor_counts(int node) const;
  AgDescriptorCounts max_descriptor_counts() const;  // over all nodes

 private:
  GroupLayout layout_;
  AgOptions options_;
  std::vector<AgRound> rounds_;
  std::vector<AgSlotGroup> groups_;
};

// ceil(log2(m)) for m >= 1.
int ceil_log2(std::int64_t m);

}  // namespace tide
