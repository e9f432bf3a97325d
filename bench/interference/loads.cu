// The concurrent loads of the interference benchmark (paper Sec. 2.2, Fig. 4).
//
// NOTE [load residency]
// Resident loads model SM-based communication kernels that poll peer progress for the whole
// transfer (NCCL's ring and symmetric-memory kernels): their CTAs hold SMs (and, clustered,
// cluster slots) while idle. TIDE's Level 1 sum CTAs (driven from interference_bench.cu) exist
// only while they sum a chunk; the waits between chunks are stream memory operations, which
// take no SM (Sec. 3.2, 4.1).
#include <cuda_runtime_api.h>

#include "device_util.cuh"
#include "interference.hpp"
#include "tide/kernels/cuda_check.hpp"

namespace tide::bench {
namespace {

// Steps (one spin CTA, Fig. 4's gray lines):
// 1. thread 0 records the SM id and entry time and adds 1 to *started (a stream that waits
//    for started >= ctas then knows every load CTA is resident);
// 2. thread 0 polls *stop (device memory, written by a stream memop) until it is nonzero,
//    bounded by kSpinBoundNs; the other threads have left, the CTA's slot stays held;
// 3. thread 0 records its exit time.
__global__ void spin_kernel(LoadFlags flags, CtaRecord* records) {
  if (threadIdx.x != 0) return;
  CtaRecord r{sm_id(), 0, global_ns(), 0};
  atomicAdd(flags.started, 1u);
  __threadfence();
  poll(
      flags.stop, [](std::uint32_t v) { return v != 0; }, kSpinBoundNs);
  r.end_ns = global_ns();
  records[blockIdx.x] = r;
}

// Steps (one CTA of the NCCL-style persistent reduction):
// 1. record the SM id and entry time; add 1 to *started;
// 2. for chunk k: thread 0 polls *tick > k (the rail has delivered chunk k; bounded), then
//    __syncthreads; every thread sums the 8 bf16 inputs of its elements of the chunk in fp32
//    (elements strided over the grid) and stores fp32; __syncthreads;
// 3. record the exit time.
// Synchronisation: *tick is advanced by stream memops from the host's rail emulator; the CTAs
// stay resident between chunks, as a kernel that polls peer progress does.
__global__ void __launch_bounds__(512)
    persistent_reduce_kernel(ReduceArgs a, LoadFlags flags, CtaRecord* records) {
  __shared__ int ok;
  CtaRecord r{sm_id(), 0, global_ns(), 0};
  if (threadIdx.x == 0) atomicAdd(flags.started, 1u);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (int k = 0; k < a.chunks; ++k) {
    if (threadIdx.x == 0) {
      const std::uint32_t want = static_cast<std::uint32_t>(k);
      ok = poll(
          flags.tick, [want](std::uint32_t v) { return v > want; }, kSpinBoundNs);
    }
    __syncthreads();
    if (!ok) break;
    const std::int64_t base = static_cast<std::int64_t>(k) * a.chunk_elems;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
         i < a.chunk_elems; i += stride) {
      float s = 0.0f;
#pragma unroll
      for (int w = 0; w < 8; ++w)
        s += __uint_as_float(static_cast<std::uint32_t>(a.in[w * a.stride + base + i]) << 16);
      a.out[base + i] = s;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    r.end_ns = global_ns();
    records[blockIdx.x] = r;
  }
}

template <typename Kernel, typename... Args>
void launch_clustered(Kernel kernel, int ctas, int threads, int cluster, cudaStream_t stream,
                      Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(ctas));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(cluster);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  TIDE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

}  // namespace

void launch_spin(int ctas, int cluster, LoadFlags flags, CtaRecord* records, cudaStream_t stream) {
  launch_clustered(spin_kernel, ctas, 128, cluster, stream, flags, records);
}

void launch_persistent_reduce(int ctas, int cluster, const ReduceArgs& args, LoadFlags flags,
                              CtaRecord* records, cudaStream_t stream) {
  launch_clustered(persistent_reduce_kernel, ctas, 512, cluster, stream, args, flags, records);
}

}  // namespace tide::bench
