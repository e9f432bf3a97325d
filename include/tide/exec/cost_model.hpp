// The reference executor's cost model: each op's time on one H200 of the paper's platform,
// from named bandwidths and fixed costs, one field each; a JSON file overrides any subset.
// Durations and link sharing: NOTE [cost model] in docs/reference_executor.md.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>

#include "tide/core/machine_rates.hpp"
#include "tide/exec/virtual_fabric_machine.hpp"
#include "tide/program/program.hpp"

namespace tide::exec {

// Rates in GB/s (1e9 B/s), times in us; each default's source: docs/reference_executor.md.
struct CostModel {
  double ce_copy_gbps = 2000.0;    // same-GPU copy-engine copy, 1-D, one direction
  double ce_copy_2d_gbps = 800.0;  // same-GPU copy-engine copy, strided 2-D
  double nvlink_gbps = 450.0;      // peer (NVLink) copy per GPU, one direction
  double nic_gbps = kDefaultMachineRates.bw_nic_gbps;        // rail NIC per GPU: BW_NIC
  double sum_cta_gbps = kDefaultMachineRates.bw_sum_gbps;    // Level 1 sum per CTA: BW_sum
  double land_cta_gbps = kDefaultMachineRates.bw_land_gbps;  // landing per CTA: BW_land
  double land_cap_gbps = kDefaultMachineRates.bw_cap_gbps;   // landing's fabric ceiling: BW_cap
  double cast_cta_gbps = kDefaultMachineRates.bw_sum_gbps;   // fp32 -> bf16 cast per CTA
  double memset_gbps = 2000.0;                               // zero fill
  double round_wait_us = kDefaultMachineRates.t_round_ms * 1000.0;  // per network round: t_rnd
  double kernel_launch_us = 4.0;  // GPU-side start of a kernel (sum, land, cast, zero)
  double copy_launch_us = 2.0;    // GPU-side start of a copy-engine copy
  double rail_latency_us = 5.0;   // rail put, before its first byte arrives
  double memop_us = 1.0;          // stream memory operation
  double event_us = 0.0;          // event record / wait on the GPU
  double host_enqueue_us = 2.0;   // host time to issue one op
  // SM copy kernels on one GPU (kCopy with ctas > 0), bytes read + written.
  double sm_copy_2d_gbps = 3932.0;
  double sm_copy_gbps = 3932.0;
  double sm_stream_cap_gbps = 2091.0;  // ceiling of a full-grid SM streaming kernel
  // NCCL's ring in a node: link per GPU and direction, kernel start, exposed fold rate.
  double nccl_link_gbps = 279.0;
  double nccl_launch_us = 60.0;
  double nccl_fold_gbps = 724.0;
  // Concurrent transfers of one GPU share its per-GPU rates (NOTE [cost model]).
  bool share_links = true;
  // Set: every rank shares this one GPU (NOTE [virtual-fabric machine]); the rates above give
  // only the fixed costs (launches, memops, events, host enqueue).
  std::shared_ptr<const VirtualFabricMachine> virtual_fabric;
};

// The defaults with the fields `json_text` (a JSON object) names replaced. InvalidArgument on
// malformed JSON, an unknown name, a wrong type or a non-positive rate. A virtual-fabric
// machine file ("machine": "virtual-fabric") is read whole: its "cost_model" object replaces
// the defaults' fixed costs, and the rest sets CostModel::virtual_fabric.
CostModel parse_cost_model(const std::string& json_text);
// Reads `path` and parses it as above; throws InvalidArgument if it cannot be read.
CostModel load_cost_model(const std::string& path);
// Every parameter as a JSON object (what load_cost_model reads back).
std::string cost_model_json(const CostModel& model);

// One op's modeled microseconds, without link queueing or host enqueue (NOTE [cost model]);
// waits add the round wait with `network_round_wait`.
double op_duration_us(const CostModel& model, const program::Op& op,
                      bool network_round_wait = false);

}  // namespace tide::exec
