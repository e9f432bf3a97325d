// The SM-id probe (paper Sec. 2.2, App. A Table 5): a kernel with the one-wave GEMM's cluster
// shape whose CTAs each fill an SM (the largest dynamic shared memory a CTA may opt into, so no
// other CTA fits beside it, as the paper's 213 KB, 255-register GEMM CTAs) and record their SM
// id and entry and exit %globaltimer. A window's first wave is every CTA that started before
// the first CTA finished; the rest were displaced into a second wave.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>

#include "device_util.cuh"
#include "interference.hpp"
#include "tide/cuda/check.hpp"

namespace tide::bench {
namespace {

// Steps: 1. thread 0 records the SM id, the cluster index and the entry time; 2. it spins on
// %globaltimer for work_ns (the CTA keeps its SM and its shared memory); 3. it records the
// exit time into records[blockIdx.x]. No synchronisation between CTAs.
__global__ void probe_kernel(CtaRecord* records, std::uint64_t work_ns, int cluster_size) {
  extern __shared__ unsigned char smem[];
  if (threadIdx.x != 0) return;
  CtaRecord r{sm_id(), blockIdx.x / static_cast<unsigned>(cluster_size), global_ns(), 0};
  smem[0] = 1;  // touch the allocation
  while (global_ns() - r.start_ns < work_ns) {
  }
  r.end_ns = global_ns();
  records[blockIdx.x] = r;
}

cudaLaunchConfig_t config_for(const ProbeShape& s, int smem, cudaStream_t stream,
                              cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(s.clusters * s.cluster_size));
  config.blockDim = dim3(static_cast<unsigned>(s.threads));
  config.dynamicSmemBytes = static_cast<std::size_t>(smem);
  config.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(s.cluster_size);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

}  // namespace

Probe::Probe(const ProbeShape& shape, int max_windows) : shape_(shape), max_windows_(max_windows) {
  int device = 0;
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  TIDE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  smem_ = static_cast<int>(prop.sharedMemPerBlockOptin);
  TIDE_CUDA_CHECK(
      cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_));
  const std::size_t n = static_cast<std::size_t>(max_windows) * shape.clusters * shape.cluster_size;
  TIDE_CUDA_CHECK(cudaMalloc(&records_, n * sizeof(CtaRecord)));
  TIDE_CUDA_CHECK(cudaMemset(records_, 0, n * sizeof(CtaRecord)));
  // cudaMemset runs on the legacy stream, which does not order against the benchmark's
  // non-blocking streams: without this sync the zeroing could land after the first launch's
  // records (the H200 run's n_slot = 0 for the GEMM's 2-CTA probe).
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
}

void Probe::clear() {
  const std::size_t n =
      static_cast<std::size_t>(max_windows_) * shape_.clusters * shape_.cluster_size;
  TIDE_CUDA_CHECK(cudaMemset(records_, 0, n * sizeof(CtaRecord)));
}

Probe::~Probe() {
  cudaFree(records_);
}

void Probe::launch(int window, cudaStream_t stream) {
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t config = config_for(shape_, smem_, stream, &attr);
  CtaRecord* rec = records_ + static_cast<std::size_t>(window % max_windows_) * shape_.clusters *
                                  shape_.cluster_size;
  TIDE_CUDA_CHECK(cudaLaunchKernelEx(&config, probe_kernel, rec,
                                     static_cast<std::uint64_t>(shape_.work_us * 1e3),
                                     shape_.cluster_size));
}

int Probe::predicted_slots() const {
  cudaLaunchAttribute attr{};
  cudaLaunchConfig_t config = config_for(shape_, smem_, nullptr, &attr);
  int clusters = 0;
  TIDE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, probe_kernel, &config));
  return clusters;
}

std::vector<CtaRecord> Probe::records(int window) const {
  const std::size_t n = static_cast<std::size_t>(shape_.clusters) * shape_.cluster_size;
  std::vector<CtaRecord> out(n);
  TIDE_CUDA_CHECK(cudaMemcpy(out.data(), records_ + static_cast<std::size_t>(window) * n,
                             n * sizeof(CtaRecord), cudaMemcpyDeviceToHost));
  return out;
}

std::vector<ProbeWindow> Probe::read(int windows) const {
  std::vector<ProbeWindow> out;
  for (int w = 0; w < std::min(windows, max_windows_); ++w) {
    const std::vector<CtaRecord> rec = records(w);
    ProbeWindow pw;
    pw.ctas = static_cast<int>(rec.size());
    // A CTA that never wrote its record (end 0) counts as displaced, never as first wave.
    std::uint64_t first_end = ~0ull, first_start = ~0ull, last_end = 0;
    for (const CtaRecord& r : rec) {
      if (r.end_ns == 0) continue;
      first_end = std::min(first_end, r.end_ns);
      first_start = std::min(first_start, r.start_ns);
      last_end = std::max(last_end, r.end_ns);
    }
    std::map<std::uint32_t, int> early_per_cluster;
    for (const CtaRecord& r : rec) {
      if (r.end_ns != 0 && r.start_ns < first_end) {
        ++pw.first_wave_ctas;
        ++early_per_cluster[r.cluster];
      }
    }
    for (const auto& [cluster, n] : early_per_cluster)
      pw.first_wave_clusters += n == shape_.cluster_size ? 1 : 0;
    pw.displaced = pw.ctas - pw.first_wave_ctas;
    pw.span_us = static_cast<double>(last_end - first_start) * 1e-3;
    out.push_back(pw);
  }
  return out;
}

}  // namespace tide::bench
