// The bounded-memory model (Sec. 5.4, 7.4): per-GPU TIDE-RS areas in S_fp32 blocks (Eq. 10, any
// L, b_grad, n_part) and per-layer backward bytes in NS (one unsharded bf16 group), with the
// terms the runtime's arena lays out (NOTE [communicator arena]):
//   Area_RS <= (n_stg L b_grad / 4 + L n_par + 2 n_out) / n_part + 2
//   n_out: outbox blocks per bank; In-Place n_part (M - 1), Slot-Reuse Eq. 9 (0 without rounds).
//   n_par: inbox generations; 1 for one wave, 2 otherwise, 0 on one node; an explicit one wins.
// At M = 1 with MemoryModelInput::one_node (the runtime's layout) the one-node form holds:
// TIDE-RS's only area is the staging ring, n_stg (L - 1) C b_grad bytes with C from
// one_node_chunk_columns. Eq. 11-12, the per-layer totals and the one-node form derived:
// NOTE [memory model terms] in docs/core.md.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tide {

struct MemoryModelInput {
  int nodes = 1;          // M
  int gpus_per_node = 8;  // L
  int round_width = 4;    // k
  int wave_width = 0;     // W_wave; 0 selects L
  int passes = 1;         // n_part
  // n_par; empty: from the schedule (NOTE [memory model terms]).
  std::optional<int> inbox_generations;
  int staging_slots = 2;                    // n_stg
  int grad_bytes = 2;                       // b_grad
  std::optional<std::int64_t> shard_bytes;  // S (bf16 shard of the largest group), for bytes
  // At M = 1: the one-node layout (the runtime's), else the multi-node one. Ignored at M >= 2.
  bool one_node = true;
};

// The schedule's terms (NOTE [memory model terms]).
struct MemorySchedule {
  int waves = 0;              // all passes: n_part ceil(M / W_wave)
  int rounds = 0;             // network rounds, all passes
  int inbox_generations = 0;  // n_par as the runtime lays it out (0 at M = 1)
  int in_place_outbox = 0;    // n_out, In-Place: n_part (M - 1)
  int slot_reuse_outbox = 0;  // n_out, Slot-Reuse: Eq. 9
};

// Throws InvalidArgument for M < 1, L outside 1..8, k < 1, W_wave outside 0..L, n_part < 1.
MemorySchedule memory_schedule(int nodes, int gpus_per_node, int round_width, int wave_width = 0,
                               int passes = 1);

struct MemoryModel {
  int inbox_generations = 0;  // n_par used
  int in_place_outbox = 0;    // n_out per mode
  int slot_reuse_outbox = 0;
  // Eq. 10 bounds in S_fp32 blocks.
  double in_place_staging_blocks = 0;
  double slot_reuse_staging_blocks = 0;
  // Eq. 11-12 in NS.
  double in_place_staging_ns = 0;
  double slot_reuse_staging_ns = 0;
  // Per-layer backward totals in NS.
  double ring_and_stage_ns = 0;
  double in_place_total_ns = 0;
  double slot_reuse_total_ns = 0;
  double fsdp2_total_ns = 4;
  double fsdp2_pack_ns = 0;  // FSDP2's fp32 reduce-scatter input, B_pack (Eq. 3)
  // NS in bytes when a shard size was given.
  std::optional<std::int64_t> ns_bytes;
  // The one-node form was used (M = 1 with MemoryModelInput::one_node).
  bool one_node = false;
  // One node with a shard size: the staging ring's bytes, n_stg (L - 1) C b_grad.
  std::optional<std::int64_t> staging_ring_bytes;
};

// Throws InvalidArgument as memory_schedule does, for n_par outside 1..2, n_stg < 1, ...
MemoryModel evaluate_memory_model(const MemoryModelInput& in);

// FSDP2's reduce-scatter buffer (N fp32 blocks) against TIDE's staging bounds per node count,
// at a fixed per-GPU output (n_stg = 2, one pass).
struct BufferScalingRow {
  int nodes = 0;
  int inbox_generations = 0;
  double fsdp2_blocks = 0;
  double in_place_blocks = 0;
  double slot_reuse_blocks = 0;
};
std::vector<BufferScalingRow> buffer_scaling(const std::vector<int>& node_counts, int gpus_per_node,
                                             int round_width, int wave_width, int grad_bytes);

}  // namespace tide
