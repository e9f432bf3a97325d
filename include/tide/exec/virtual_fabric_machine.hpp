// The virtual fabric as a machine for the reference executor: N ranks sharing ONE GPU's copy
// engines, HBM, SMs and hardware queues, as tide_onenode_bench, the executor bench and
// `tide check-runtime --backend ipc` run on one lent GPU. Rates come from a machine file whose
// values each name their source. Timing rules: NOTE [virtual-fabric machine] in
// docs/reference_executor.md.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tide::exec {

// One GPU shared by every rank of a program.
struct VirtualFabricMachine {
  std::string gpu;     // the GPU the rates were measured on
  std::string source;  // where the file's values come from, in one line
  // Per value name: its source (the file's "sources" object; informational).
  std::map<std::string, std::string> sources;
  // HBM bytes read + written per second, GB/s, over every concurrent transfer and kernel.
  double hbm_gbps = 0;
  // Aggregate copy-engine rate, one direction, GB/s, by concurrent copies (streams); the
  // rate at k streams interpolates linearly between entries and holds past the last.
  std::vector<std::pair<int, double>> copy_gbps_by_streams;
  // Level 1 sum per CTA, in output elements per second (1e9 a second), by L (contributions,
  // staged + own) and accumulate; L between entries interpolates the time per element.
  struct SumRate {
    int l = 0;
    bool accumulate = false;
    double gelems = 0;
  };
  std::vector<SumRate> sum_cta;
  double land_cta_gbps = 0;  // landing per CTA, fp32 output bytes (local partials)
  double cast_cta_gbps = 0;  // fp32 -> bf16 cast per CTA, bytes read + written
  int sms = 0;               // CTAs beyond this run at sms / total of their rate
  // Hardware queues (CUDA_DEVICE_MAX_CONNECTIONS): streams take them round-robin in the
  // order the executor creates them, and each queue starts its ops in submission order.
  // 0: every stream its own queue (no aliasing).
  int hw_queues = 8;

  // Aggregate copy-engine GB/s (one direction) with `streams` >= 1 concurrent copies.
  double copy_gbps(int streams) const;
  // One CTA's Level 1 sum rate, output elements per microsecond.
  double sum_elems_per_us(int l, bool accumulate) const;
};

// Parses a machine file (JSON, docs/reference_executor.md "Virtual-fabric machine file").
// InvalidArgument naming the problem: malformed JSON, a missing or unknown field, a wrong type,
// a non-positive rate, or a "machine" other than "virtual-fabric".
VirtualFabricMachine parse_virtual_fabric_machine(const std::string& json_text);
// Reads `path` and parses it as above; InvalidArgument if it cannot be read.
VirtualFabricMachine load_virtual_fabric_machine(const std::string& path);

}  // namespace tide::exec
