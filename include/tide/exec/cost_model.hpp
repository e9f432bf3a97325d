// The reference executor's cost model: how long each op of a Program takes
// on one H200 of the paper's evaluation platform, from named bandwidths and fixed costs.
//
// NOTE [cost model]
// Every parameter is one field below with its default, unit and source; a JSON file may
// override any subset (load_cost_model; unknown names are errors). Durations:
//   copy      copy_launch_us + sum over descriptors of bytes / rate, rate =
//               ce_copy_gbps     same-GPU 1-D (rows = 1 or pitch = width)
//               ce_copy_2d_gbps  same-GPU strided 2-D
//               nvlink_gbps      peer GPU 1-D; min(nvlink_gbps, ce_copy_2d_gbps) for 2-D
//   rail put  rail_latency_us + bytes / nic_gbps
//   sum       kernel_launch_us + logical bytes / (ctas * sum_cta_gbps), logical bytes =
//             elements in segments * (staged + 1) * in_dtype bytes + dst bytes (App. G: "L
//             bf16 reads + 1 fp32 write per element")
//   land      kernel_launch_us + dst bytes / min(ctas * land_cta_gbps, land_cap_gbps) when it
//             pulls from peers; dst bytes / (ctas * sum_cta_gbps) for a fold of local buffers
//   cast      kernel_launch_us + (source + dst bytes) / (ctas * cast_cta_gbps)
//   zero      kernel_launch_us + bytes / memset_gbps
//   signal    memop_us;  wait: memop_us after its condition holds, plus round_wait_us when
//             the builder marked it Op::network_round (it closes a network round, App. G t_rnd)
//   event record / wait: event_us;  release: 0 (a host-side free)
// A CTA count of 0 is taken as 1. Host enqueue: each rank's host thread issues its ops in
// Program::ops order, host_enqueue_us apart (ops marked Op::inside_kernel, the steps of one
// NCCL kernel, take no host time); no op starts before it is issued.
// Shared links: with share_links, the copies of one GPU queue on its copy-engine (same-GPU)
// or NVLink (peer) resource and its rail puts on its NIC, first come first served, so
// concurrent transfers of one GPU add up to the per-GPU rate instead of each getting it.
// SM ops (sum, land, cast, zero) run concurrently: TIDE's CTA budgets are far below 132 SMs.
#pragma once

#include <iosfwd>
#include <string>

#include "tide/program/program.hpp"

namespace tide::exec {

struct CostModel {
  // Same-GPU device-to-device copy-engine rate, GB/s (1e9 B/s), one direction.
  // architecture.md "Seen on the lent H200": cudaMemcpyAsync 1.6-2.1 TB/s.
  double ce_copy_gbps = 2000.0;
  // Same-GPU strided 2-D copy rate: architecture.md, 2-D copies with 8 KiB rows ~0.8 TB/s.
  double ce_copy_2d_gbps = 800.0;
  // Peer (NVLink) copy rate per GPU, one direction: H200 NVLink 4 is 900 GB/s bidirectional,
  // 450 GB/s per direction (NVIDIA H200 datasheet). Not calibrated on our machines.
  double nvlink_gbps = 450.0;
  // Rail NIC rate per GPU: App. G calibration BW_NIC = 47.5 GB/s.
  double nic_gbps = 47.5;
  // Level 1 sum rate per CTA in logical bytes: App. G BW_sum = 99 GB/s/CTA.
  double sum_cta_gbps = 99.0;
  // Landing rate per CTA in fp32 output bytes, and its fabric ceiling: App. G BW_land =
  // 21 GB/s/CTA in situ, BW_cap = 90 GB/s.
  double land_cta_gbps = 21.0;
  double land_cap_gbps = 90.0;
  // fp32 -> bf16 cast rate per CTA (read + write bytes). Assumed equal to BW_sum: an
  // elementwise streaming kernel like the Level 1 sum. Not calibrated.
  double cast_cta_gbps = 99.0;
  // Zero fill rate (cudaMemsetAsync): assumed the same-GPU copy rate. Not calibrated.
  double memset_gbps = 2000.0;
  // Per network round wait overhead: App. G t_rnd = 1.3 ms.
  double round_wait_us = 1300.0;
  // GPU-side start latency of a kernel (sum, land, cast, zero). Assumed typical CUDA value.
  double kernel_launch_us = 4.0;
  // GPU-side start latency of a copy-engine copy (batched or not). Assumed.
  double copy_launch_us = 2.0;
  // Rail put latency before the first byte arrives (RDMA write + signal). Assumed.
  double rail_latency_us = 5.0;
  // Stream memory operation (cuStreamWriteValue / WaitValue) latency. Assumed.
  double memop_us = 1.0;
  // cudaEventRecord / cudaStreamWaitEvent latency on the GPU. Assumed.
  double event_us = 0.0;
  // Host time to issue one op (a launch, a copy, a memop call). Assumed.
  double host_enqueue_us = 2.0;
  // Whether concurrent transfers of one GPU share its per-GPU rates (see the NOTE).
  bool share_links = true;
};

// The defaults above, with the fields named in `json_text` (a JSON object, names as above)
// replaced. Throws InvalidArgument on malformed JSON, an unknown name, a wrong type or a
// non-positive rate.
CostModel parse_cost_model(const std::string& json_text);
// Reads `path` and parses it as above; throws InvalidArgument if it cannot be read.
CostModel load_cost_model(const std::string& path);
// Every parameter as a JSON object (what load_cost_model reads back).
std::string cost_model_json(const CostModel& model);

// The modeled duration of one op in microseconds, without queueing on shared links and
// without the host enqueue: see NOTE [cost model]. Waits include the round wait when
// `network_round_wait` is set.
double op_duration_us(const CostModel& model, const program::Op& op,
                      bool network_round_wait = false);

}  // namespace tide::exec
