// The concurrent loads of the interference benchmark (paper Sec. 2.2, Fig. 4).
//
// NOTE [load residency]
// Resident loads model SM-based communication kernels that poll peer progress for the whole
// transfer (NCCL's ring and symmetric-memory kernels): their CTAs hold SMs (and, clustered,
// cluster slots) while idle. TIDE's Level 1 sum CTAs (driven from interference_bench.cu) exist
// only while they sum a chunk; the waits between chunks are stream memory operations, which
// take no SM (Sec. 3.2, 4.1). In this benchmark the host paces those launches (see
// interference_bench.cu), so no stream waits on a flag.
#include <cuda_runtime_api.h>

#include "device_util.cuh"
#include "interference.hpp"
#include "tide/cuda/check.hpp"

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
// 1. record the SM id and entry time; add 1 to *started; thread 0 sets *t0 to its entry time
//    if no CTA has yet (atomicCAS) and reads the winner: the transfer's start;
// 2. for chunk k: thread 0 waits on %globaltimer until t0 + k * gap_ns (the chunk's arrival;
//    bounded by kSpinBoundNs), then __syncthreads; every thread sums the 8 bf16 inputs of its
//    elements of the chunk in fp32 (elements strided over the grid) and stores fp32;
//    __syncthreads;
// 3. record the exit time.
// Synchronisation: none with the host or another stream: the rounds arrive by the device
// clock, so the kernel ends within chunks * gap_ns of its first CTA (plus the sums) whatever
// else runs. The CTAs stay resident between chunks, as a kernel that polls peer progress does.
__global__ void __launch_bounds__(512)
    persistent_reduce_kernel(ReduceArgs a, LoadFlags flags, CtaRecord* records) {
  __shared__ unsigned long long t0;
  CtaRecord r{sm_id(), 0, global_ns(), 0};
  if (threadIdx.x == 0) {
    atomicAdd(flags.started, 1u);
    const unsigned long long prev = atomicCAS(flags.t0, 0ull, r.start_ns);
    t0 = prev == 0 ? r.start_ns : prev;
  }
  __syncthreads();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (int k = 0; k < a.chunks; ++k) {
    if (threadIdx.x == 0) {
      const std::uint64_t due = t0 + static_cast<std::uint64_t>(k) * a.gap_ns;
      const std::uint64_t entered = global_ns();
      while (global_ns() < due && global_ns() - entered < kSpinBoundNs)
        __nanosleep(200);
    }
    __syncthreads();
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

// Steps (the gate, one CTA): thread 0 polls *counter >= target, bounded by kSpinBoundNs; if
// the bound passes it sets *gate_timeout and leaves anyway. Waits only for a kernel launched
// earlier on another stream, and never longer than the bound.
__global__ void gate_kernel(const std::uint32_t* counter, std::uint32_t target, LoadFlags flags) {
  if (threadIdx.x != 0) return;
  const bool ok = poll(
      counter, [target](std::uint32_t v) { return v >= target; }, kSpinBoundNs);
  if (!ok) atomicExch(flags.gate_timeout, 1u);
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

void launch_gate(const std::uint32_t* counter, std::uint32_t target, LoadFlags flags,
                 cudaStream_t stream) {
  gate_kernel<<<1, 32, 0, stream>>>(counter, target, flags);
  TIDE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tide::bench
