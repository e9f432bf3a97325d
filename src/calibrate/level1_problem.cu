// The Level 1 problem of level1_problem.hpp: buffers, the segment table, random inputs.
#include "level1_problem.hpp"

namespace tide::calibrate {
namespace {

__device__ std::uint32_t mix32(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

// Steps: each thread writes elements i, i + stride, ...: a value in [-2, 2) from a hash of
// (i, seed), as bf16 (the high half of the fp32) or fp32. No synchronisation.
__global__ void fill_random_kernel(void* p, std::int64_t n, int esz, std::uint64_t seed) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const std::uint32_t h = mix32(static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ull + seed);
    const float f = static_cast<float>(h >> 8) * (4.0f / 16777216.0f) - 2.0f;
    if (esz == 2) {
      static_cast<std::uint16_t*>(p)[i] = static_cast<std::uint16_t>(__float_as_uint(f) >> 16);
    } else {
      static_cast<float*>(p)[i] = f;
    }
  }
}

}  // namespace

void fill_random(void* p, std::int64_t n, int esz, std::uint64_t seed, cudaStream_t stream) {
  fill_random_kernel<<<1024, 256, 0, stream>>>(p, n, esz, seed);
  TIDE_CUDA_CHECK_LAUNCH();
}

Level1Problem::Level1Problem(std::int64_t width, int sets) : width_(width) {
  // Row r's columns come from kParams runs; parameter p's run for row r starts at r * run
  // (16-byte aligned), as the dim-0 shards of 16 FSDP2 parameters would.
  const std::int64_t run = width / kParams;
  std::vector<kernels::Level1RunSpec> specs;
  for (int r = 0; r < kRows; ++r) {
    for (int p = 0; p < kParams; ++p) {
      const std::int64_t len = p == kParams - 1 ? width - p * run : run;
      specs.push_back({r, p * run, len, p, r * run});
    }
  }
  per_param_ = kRows * run + (width - kParams * run) + 64;
  table_ = std::make_unique<kernels::Level1SegmentTable>(kRows, width, specs);
  for (int s = 0; s < sets; ++s) {
    Set set;
    const std::int64_t staged = std::int64_t{kStaged} * kRows * width;
    set.staged = DeviceBuffer(static_cast<std::size_t>(staged * 2));
    set.grads = DeviceBuffer(static_cast<std::size_t>(kParams * per_param_ * 2));
    set.out = DeviceBuffer(static_cast<std::size_t>(kRows * width * 4));
    fill_random(set.staged.get(), staged, 2, 1000 + static_cast<std::uint64_t>(s), nullptr);
    fill_random(set.grads.get(), kParams * per_param_, 2, 2000 + static_cast<std::uint64_t>(s),
                nullptr);
    for (int p = 0; p < kParams; ++p)
      set.grad_ptrs.push_back(set.grads.as() + p * per_param_ * 2);
    sets_.push_back(std::move(set));
  }
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
}

kernels::Level1SumArgs Level1Problem::args(int set, int ctas) const {
  const Set& s = sets_[static_cast<std::size_t>(set % sets())];
  kernels::Level1SumArgs a;
  a.out = s.out.as<float>();
  a.out_pitch = width_;
  a.dtype = DType::kBf16;
  a.staged = s.staged.get();
  a.num_staged = kStaged;
  a.staged_pitch = width_;
  a.staged_stride = kRows * width_;
  a.gradients = s.grad_ptrs.data();
  a.num_gradients = kParams;
  a.table = table_->view();
  a.alpha = 0.125f;
  a.ctas = ctas;
  return a;
}

}  // namespace tide::calibrate
