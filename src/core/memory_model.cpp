// Closed-form memory model (Sec. 5.4, Eqs. 9-12, Sec. 7.4). See NOTE [memory model terms] in
// docs/core.md.
#include "tide/core/memory_model.hpp"

#include <algorithm>
#include <string>

#include "tide/core/error.hpp"
#include "tide/core/rs_defaults.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/core/topology.hpp"

namespace tide {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument(message);
}

// Eq. 10 in S_fp32 blocks (NOTE [memory model terms]).
double staging_blocks(int l, int n_stg, int n_par, int n_out, int grad_bytes, int passes) {
  return (n_stg * l * grad_bytes / 4.0 + l * n_par + 2.0 * n_out) / passes + 2.0;
}

// The one-node form (NOTE [memory model terms]): the staging ring and nothing else of TIDE-RS,
// no receive stage.
MemoryModel one_node_memory_model(const MemoryModelInput& in, const MemorySchedule& s) {
  const int l = in.gpus_per_node;  // N = L
  MemoryModel out;
  out.one_node = true;
  out.inbox_generations = 0;
  out.in_place_outbox = s.in_place_outbox;      // 0: no remote destinations
  out.slot_reuse_outbox = s.slot_reuse_outbox;  // 0: no network rounds (Eq. 9)
  double ring_ns = kOneNodeStagingNs;
  if (l == 1) ring_ns = 0;  // nothing is staged
  if (in.shard_bytes) {
    // The largest group's plan, as RsPlan lays it out at M = 1: one sub-slice per rank of E
    // columns, n_part pass parts of E_pass columns, both rounded up to the vector width.
    const std::int64_t vec = RsOptions{}.vector_elems;
    const std::int64_t e = *in.shard_bytes / 2;  // S counts bf16 items
    const std::int64_t sub_slice = (e + vec - 1) / vec * vec;
    const std::int64_t pass = ((sub_slice + in.passes - 1) / in.passes + vec - 1) / vec * vec;
    const std::int64_t chunk =
        one_node_chunk_columns(l, e, pass, vec, in.staging_slots, in.grad_bytes);
    out.staging_ring_bytes =
        std::int64_t{in.staging_slots} * (l - 1) * chunk * std::int64_t{in.grad_bytes};
    out.ns_bytes = *in.shard_bytes * l;
    ring_ns = static_cast<double>(*out.staging_ring_bytes) / static_cast<double>(*out.ns_bytes);
  }
  const double block_ns = 2.0 / l;  // one S_fp32 block
  out.in_place_staging_ns = ring_ns;
  out.slot_reuse_staging_ns = ring_ns;
  out.in_place_staging_blocks = ring_ns / block_ns;
  out.slot_reuse_staging_blocks = ring_ns / block_ns;
  out.ring_and_stage_ns = 2.0;  // two ring slots, no receive stage (NOTE [one-node TIDE-AG])
  out.in_place_total_ns = out.ring_and_stage_ns + ring_ns + 1.0;
  out.slot_reuse_total_ns = out.ring_and_stage_ns + ring_ns;
  out.fsdp2_pack_ns = 2.0;
  return out;
}

}  // namespace

MemorySchedule memory_schedule(int nodes, int gpus_per_node, int round_width, int wave_width,
                               int passes) {
  const Topology topo(nodes, gpus_per_node);  // validates M and L
  require(round_width >= 1,
          "round width k = " + std::to_string(round_width) + " must be at least 1");
  require(wave_width >= 0 && wave_width <= gpus_per_node,
          "wave width " + std::to_string(wave_width) + " is outside 1..L (0: L)");
  require(passes >= 1, "passes n_part = " + std::to_string(passes) + " must be at least 1");
  const int m = nodes;
  const int w = wave_width == 0 ? gpus_per_node : wave_width;
  MemorySchedule s;
  const int waves_per_pass = (m + w - 1) / w;
  s.waves = passes * waves_per_pass;
  // Contributors c = 1..M per pass, waves of W_wave; a wave's remote contributors (c < M) go
  // out in rounds of at most k, and rounds never cross a wave. Eq. 9 runs over the rounds in
  // order, passes included (k_{-1} = 0).
  int previous = 0;
  for (int pass = 0; pass < passes; ++pass) {
    for (int wave = 0; wave < waves_per_pass; ++wave) {
      const int remote = std::min((wave + 1) * w, m - 1) - wave * w;  // may be <= 0
      for (int left = remote; left > 0; left -= round_width) {
        const int width = std::min(round_width, left);
        s.slot_reuse_outbox = std::max(s.slot_reuse_outbox, width + previous);
        previous = width;
        ++s.rounds;
      }
    }
  }
  s.in_place_outbox = passes * (m - 1);  // a full outbox (Sec. 5.3)
  s.inbox_generations = m == 1 ? 0 : (s.waves == 1 ? 1 : 2);
  return s;
}

MemoryModel evaluate_memory_model(const MemoryModelInput& in) {
  const MemorySchedule s =
      memory_schedule(in.nodes, in.gpus_per_node, in.round_width, in.wave_width, in.passes);
  require(!in.inbox_generations || *in.inbox_generations == 1 || *in.inbox_generations == 2,
          "inbox generations n_par = " + std::to_string(in.inbox_generations.value_or(0)) +
              " must be 1 (single-wave schedule) or 2 (or left to the schedule)");
  require(in.staging_slots >= 1, "staging slots n_stg must be at least 1");
  require(in.grad_bytes == 2 || in.grad_bytes == 4, "gradient item size must be 2 or 4 bytes");
  require(!in.shard_bytes || *in.shard_bytes > 0, "--shard-bytes must be positive");

  if (in.nodes == 1 && in.one_node) return one_node_memory_model(in, s);

  const int m = in.nodes;
  const int l = in.gpus_per_node;
  const int world = m * l;
  MemoryModel out;
  out.inbox_generations = in.inbox_generations.value_or(s.inbox_generations);
  out.in_place_outbox = s.in_place_outbox;
  out.slot_reuse_outbox = s.slot_reuse_outbox;
  out.in_place_staging_blocks = staging_blocks(l, in.staging_slots, out.inbox_generations,
                                               out.in_place_outbox, in.grad_bytes, in.passes);
  out.slot_reuse_staging_blocks = staging_blocks(l, in.staging_slots, out.inbox_generations,
                                                 out.slot_reuse_outbox, in.grad_bytes, in.passes);
  // One S_fp32 block is (4 / b_grad) S_grad; NS is N S_grad with bf16 S.
  const double block_ns = 2.0 / world;
  out.in_place_staging_ns = out.in_place_staging_blocks * block_ns;
  out.slot_reuse_staging_ns = out.slot_reuse_staging_blocks * block_ns;
  out.ring_and_stage_ns = 2.0 + static_cast<double>(m) / world;  // (2 + 1/L) NS (Sec. 5.4)
  out.in_place_total_ns = out.ring_and_stage_ns + out.in_place_staging_ns + 1.0;
  out.slot_reuse_total_ns = out.ring_and_stage_ns + out.slot_reuse_staging_ns;
  out.fsdp2_pack_ns = 2.0;  // 4 N sum_p R_p K_p bytes = 2 NS whatever the gradient dtype
  if (in.shard_bytes) out.ns_bytes = *in.shard_bytes * world;
  return out;
}

std::vector<BufferScalingRow> buffer_scaling(const std::vector<int>& node_counts, int gpus_per_node,
                                             int round_width, int wave_width, int grad_bytes) {
  std::vector<BufferScalingRow> rows;
  for (int m : node_counts) {
    require(wave_width >= 1 && wave_width <= gpus_per_node,
            "wave width " + std::to_string(wave_width) + " is outside 1..L");
    const MemorySchedule s = memory_schedule(m, gpus_per_node, round_width, wave_width);
    BufferScalingRow row;
    row.nodes = m;
    row.inbox_generations = s.inbox_generations;
    row.fsdp2_blocks = m * gpus_per_node;
    row.in_place_blocks =
        staging_blocks(gpus_per_node, 2, s.inbox_generations, s.in_place_outbox, grad_bytes, 1);
    row.slot_reuse_blocks =
        staging_blocks(gpus_per_node, 2, s.inbox_generations, s.slot_reuse_outbox, grad_bytes, 1);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace tide
