// Closed-form memory model (Sec. 5.4, Eqs. 10-12, Sec. 7.4). See the header.
#include "tide/core/memory_model.hpp"

#include <algorithm>
#include <string>

#include "tide/core/error.hpp"
#include "tide/core/topology.hpp"

namespace tide {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument(message);
}

// Eq. 10 in S_fp32 blocks.
double staging_blocks(int l, int n_stg, int n_par, int n_out, int grad_bytes) {
  return n_stg * l * grad_bytes / 4.0 + l * n_par + 2.0 * n_out + 2.0;
}

}  // namespace

MemoryModel evaluate_memory_model(const MemoryModelInput& in) {
  const Topology topo(in.nodes, in.gpus_per_node);  // validates M and L
  require(in.round_width >= 1,
          "round width k = " + std::to_string(in.round_width) + " must be at least 1");
  require(in.inbox_generations == 1 || in.inbox_generations == 2,
          "inbox generations n_par = " + std::to_string(in.inbox_generations) +
              " must be 1 (single-wave schedule) or 2");
  require(in.staging_slots >= 1, "staging slots n_stg must be at least 1");
  require(in.grad_bytes == 2 || in.grad_bytes == 4, "gradient item size must be 2 or 4 bytes");
  require(!in.shard_bytes || *in.shard_bytes > 0, "--shard-bytes must be positive");

  const int m = in.nodes;
  const int l = in.gpus_per_node;
  MemoryModel out;
  out.in_place_staging_blocks =
      staging_blocks(l, in.staging_slots, in.inbox_generations, m - 1, in.grad_bytes);
  out.slot_reuse_staging_blocks =
      staging_blocks(l, in.staging_slots, in.inbox_generations, 2 * in.round_width, in.grad_bytes);
  // One S_fp32 block is (4 / b_grad) S_grad; NS is N S_grad with bf16 S.
  const double block_ns = 2.0 / (static_cast<double>(m) * l);
  out.in_place_staging_ns = out.in_place_staging_blocks * block_ns;
  out.slot_reuse_staging_ns = out.slot_reuse_staging_blocks * block_ns;
  out.ring_and_stage_ns = 2.0 + static_cast<double>(m - 1) / topo.world();
  out.in_place_total_ns = out.ring_and_stage_ns + out.in_place_staging_ns + 1.0;
  out.slot_reuse_total_ns = out.ring_and_stage_ns + out.slot_reuse_staging_ns;
  out.fsdp2_pack_ns = 2.0;  // 4 N sum_p R_p K_p bytes = 2 NS whatever the gradient dtype
  if (in.shard_bytes) out.ns_bytes = *in.shard_bytes * topo.world();
  return out;
}

std::vector<BufferScalingRow> buffer_scaling(const std::vector<int>& node_counts, int gpus_per_node,
                                             int round_width, int wave_width, int grad_bytes) {
  std::vector<BufferScalingRow> rows;
  for (int m : node_counts) {
    const Topology topo(m, gpus_per_node);
    require(wave_width >= 1 && wave_width <= gpus_per_node,
            "wave width " + std::to_string(wave_width) + " is outside 1..L");
    BufferScalingRow row;
    row.nodes = m;
    row.inbox_generations = (m + wave_width - 1) / wave_width > 1 ? 2 : 1;
    row.fsdp2_blocks = topo.world();
    row.in_place_blocks =
        staging_blocks(gpus_per_node, 2, row.inbox_generations, m - 1, grad_bytes);
    // Eq. 9's depth never exceeds the M - 1 remote destinations there are.
    row.slot_reuse_blocks = staging_blocks(gpus_per_node, 2, row.inbox_generations,
                                           std::min(2 * round_width, m - 1), grad_bytes);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace tide
