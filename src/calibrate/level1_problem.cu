// The Level 1 problem of level1_problem.hpp: buffers, the segment table, random inputs.
#include "tide/calibrate/level1_problem.hpp"
#include "tide/kernels/fill_random.hpp"

namespace tide::calibrate {
void fill_random(void* p, std::int64_t n, int esz, std::uint64_t seed, cudaStream_t stream) {
  kernels::launch_fill_random(p, n, esz, seed, stream);
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
