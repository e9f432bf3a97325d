// The bounded-memory model (Sec. 5.4, 7.4).
//
// NOTE [memory model terms]
// Per-GPU TIDE-RS areas, in S_fp32 blocks (S_fp32 = the largest group's fp32 output shard),
// Eq. 10 written for general L, gradient item size b_grad and n_part pass parts (the paper's
// L = 8, bf16, one-pass form is (4 n_stg + 8 n_par + 2 n_out + 2)):
//   Area_RS <= (n_stg L b_grad / 4 + L n_par + 2 n_out) / n_part + 2
// (a block, and with it a staging chunk, is one pass part: S_fp32 / n_part; each of the two
// banks keeps one own-node spare, n_part parts). The terms are those the runtime's arena lays
// out (NOTE [communicator arena], rs_arena_layout with the pull landing):
//   n_out: outbox blocks per bank (Sec. 5.3). In-Place: a full outbox, n_part (M - 1).
//     Slot-Reuse: Eq. 9, max_i (k_i + k_{i-1}) over the schedule's network rounds (at most 2k;
//     0 when there are no rounds, M = 1).
//   n_par: inbox generations (Sec. 4.2): 1 for a one-wave schedule, 2 otherwise, and none on
//     one node, where nothing writes or reads the inbox (NOTE [no inbox on one node]). An
//     explicit n_par (1 or 2) overrides this, e.g. the paper's n_par = 2 at M = 64.
// The schedule: contributors c = 1..M (c = M the own node) in waves of W_wave per pass, and
// each wave's remote contributors in network rounds of at most k (rs_plan.hpp).
// In units of NS (one unsharded bf16 group, S_fp32 = 2 S, N = M L), one pass:
//   In-Place   = 4 / L + 2 (n_par + 1) / M         (L = 8: 1/2 + (2 n_par + 2) / M, Eq. 11)
//   Slot-Reuse = 2 (L + L n_par + 2 n_out + 2) / (M L)  (L = 8, n_out = 2k: Eq. 12)
// Per-layer backward live bytes: FSDP2 4 NS (unsharded parameters, prefetched all-gather
// output, the previous layer's 2 NS fp32 reduce-scatter input). TIDE: two ring slots and the
// receive stage with the shard in it ((2 + 1/L) NS = (2 + M / N) NS, Sec. 5.4; the runtime
// stages the shard, NOTE [communicator arena]), plus the areas above, plus (In-Place only)
// the previous layer's bf16 gradients, 1 NS.
// One node (M = 1, MemoryModelInput::one_node, the runtime's layout: NOTE [one-node TIDE-RS],
// NOTE [one-node TIDE-AG]) has its own form, chosen by evaluate_memory_model. No outbox, no
// inbox, no spares (n_out = n_par = 0) and no receive stage: the all-gather casts or copies the
// shard into the own rows of the landing slot. TIDE-RS's only area is the staging ring of
// n_stg slots of L - 1 chunks of C columns (one row per rank: the per-rank geometry):
//   Ring = n_stg (L - 1) C b_grad bytes, C = the solver's chunk (rs_defaults.hpp contracts
//   8-9, one_node_chunk_columns) for the largest group's E = S / 2 columns per rank,
// which the solver keeps at or below kOneNodeStagingNs NS (0.25) wherever its floor of
// kOneNodeMinChunk columns does not bind, E >= 8192 n_stg (L - 1) b_grad / L (below that the
// ring is at most n_stg (L - 1) 4096 b_grad bytes). Without a shard size the form takes the
// 0.25 NS bound. Per-layer backward:
//   In-Place   = 2 + Ring / NS + 1   (two ring slots, the ring, the previous layer's gradients)
//   Slot-Reuse = 2 + Ring / NS       (the gradients move into the vacated slot: no extra NS)
// In S_fp32 blocks (the *_staging_blocks fields) Ring is Ring / S_fp32 in both modes.
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
  // At M = 1: the one-node layout (the runtime's, the CLI's), else the multi-node layout that
  // a bare RsOptions keeps at M = 1. Ignored at M >= 2.
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

// FSDP2's reduce-scatter buffer (one fp32 block per GPU, N blocks) against TIDE's In-Place
// and Slot-Reuse staging bounds at a fixed per-GPU output size, for each node count (the
// terms of NOTE [memory model terms], n_stg = 2, one pass).
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
