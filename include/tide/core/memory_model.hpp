// The bounded-memory model (Sec. 5.4, 7.4).
//
// Per-GPU TIDE-RS staging, in S_fp32 blocks (Eq. 10, written for general L; the paper's
// L = 8, bf16 form is (4 n_stg + 8 n_par + 2 n_out + 2)):
//   Area_RS <= (n_stg * L * b_grad / 4 + L * n_par + 2 n_out + 2) S_fp32
// with n_out = M - 1 for In-Place (Eq. 11) and 2k for Slot-Reuse (Eq. 12). In units of NS
// (one unsharded bf16 group, S_fp32 = 2 S, N = M L):
//   In-Place   = 4 / L + 2 (n_par + 1) / M      (L = 8: 1/2 + (2 n_par + 2) / M)
//   Slot-Reuse = 2 (L + L n_par + 4k + 2) / (M L)   (L = 8: (2k + 4 n_par + 5) / (2M))
// Per-layer backward live bytes: FSDP2 4 NS (unsharded parameters, prefetched all-gather
// output, the previous layer's 2 NS fp32 reduce-scatter input). TIDE: two ring slots and the
// receive stage, (2 + (M - 1) / N) NS, plus the staging above, plus (In-Place only) the
// previous layer's bf16 gradients, 1 NS.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tide {

struct MemoryModelInput {
  int nodes = 1;                            // M
  int gpus_per_node = 8;                    // L
  int round_width = 4;                      // k
  int inbox_generations = 2;                // n_par
  int staging_slots = 2;                    // n_stg
  int grad_bytes = 2;                       // b_grad
  std::optional<std::int64_t> shard_bytes;  // S (bf16 shard of the largest group), for bytes
};

struct MemoryModel {
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
};

// Throws InvalidArgument for M < 1, L outside 1..8, k < 1, n_par outside 1..2, ...
MemoryModel evaluate_memory_model(const MemoryModelInput& in);

// FSDP2's reduce-scatter buffer (one fp32 block per GPU, N blocks) against TIDE's In-Place
// and Slot-Reuse staging bounds at a fixed per-GPU output size, for each node count.
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
