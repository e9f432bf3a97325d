// The reference executor's cost model: how long each op of a Program takes
// on one H200 of the paper's evaluation platform, from named bandwidths and fixed costs.
//
// Every parameter is one field below with its default, unit and source; a JSON file may
// override any subset (load_cost_model; unknown names are errors). How the fields make an op's
// duration, and how shared links queue: NOTE [cost model] in docs/reference_executor.md.
#pragma once

#include <iosfwd>
#include <string>

#include "tide/core/machine_rates.hpp"
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
  // Rail NIC rate per GPU: App. G calibration BW_NIC (core/machine_rates.hpp).
  double nic_gbps = kDefaultMachineRates.bw_nic_gbps;
  // Level 1 sum rate per CTA in logical bytes: App. G BW_sum.
  double sum_cta_gbps = kDefaultMachineRates.bw_sum_gbps;
  // Landing rate per CTA in fp32 output bytes, and its fabric ceiling: App. G BW_land in
  // situ, BW_cap.
  double land_cta_gbps = kDefaultMachineRates.bw_land_gbps;
  double land_cap_gbps = kDefaultMachineRates.bw_cap_gbps;
  // fp32 -> bf16 cast rate per CTA (read + write bytes). Assumed equal to BW_sum: an
  // elementwise streaming kernel like the Level 1 sum. Not calibrated.
  double cast_cta_gbps = kDefaultMachineRates.bw_sum_gbps;
  // Zero fill rate (cudaMemsetAsync): assumed the same-GPU copy rate. Not calibrated.
  double memset_gbps = 2000.0;
  // Per network round wait overhead: App. G t_rnd.
  double round_wait_us = kDefaultMachineRates.t_round_ms * 1000.0;
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
  // SM copy kernels on one GPU (kCopy with ctas > 0, same rank), GB/s of bytes read +
  // written. bench/results/fsdp2 (PyTorch 2.11, one H200, Llama-3.1-70B layer, N = 8):
  // split_with_sizes_copy (the all-gather copy-out, 2-D) 0.870 ms for 3.42 GB = 3932 GB/s.
  // 1-D (FSDP2's bf16 copy-in): not measured (fsdp2_copies' copy-in is the mixed-precision
  // cast); taken equal to the copy-out's rate.
  double sm_copy_2d_gbps = 3932.0;
  double sm_copy_gbps = 3932.0;
  // Ceiling of an SM streaming kernel (sum, local fold, cast) in its logical bytes: a full
  // grid is HBM-bound. bench/results/fsdp2: _chunk_cat (bf16 -> fp32 pack, 132 SMs) 2.455 ms
  // for 5.13 GB read + written = 2091 GB/s (the reference bf16 -> fp32 copy: 2166 GB/s).
  double sm_stream_cap_gbps = 2091.0;
  // NCCL's ring between GPUs of one node: its hops (kCopy with ctas > 0 across ranks), per GPU
  // and direction; the start of a collective's kernel; and the exposed part of a ring
  // reduction step, GB/s of fp32 output per channel. One fit, least squares in relative
  // error, to the 8 NCCL-alone times on 2 x H200 (bench/results/nccl/run-2026-11-29-x2-final,
  // all-gather and reduce-scatter of flat32m / flat128m / Llama / Qwen layers, 1 x 2):
  // all-gather = launch + S / link, reduce-scatter = launch + S_fp32 / link + (S_fp32 / 2) /
  // fold, every time within 10%.
  double nccl_link_gbps = 279.0;
  double nccl_launch_us = 60.0;
  double nccl_fold_gbps = 724.0;
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
// without the host enqueue (NOTE [cost model] in docs/reference_executor.md). Waits include
// the round wait when `network_round_wait` is set.
double op_duration_us(const CostModel& model, const program::Op& op,
                      bool network_round_wait = false);

}  // namespace tide::exec
