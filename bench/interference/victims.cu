// The victims of the interference benchmark (paper Sec. 2.2 and App. A Table 4): the one-wave
// 256 x 8192 x 8192 bf16 GEMM (cuBLASLt, fp32 accumulate), a memory-bound elementwise kernel
// of many waves, and the SM-id probe itself.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "interference.hpp"
#include "tide/cuda/check.hpp"

namespace tide::bench {
namespace {

#include "cublaslt_shapes.inc"

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed: cublasStatus " +
                             std::to_string(static_cast<int>(s)));
}

// Steps: none beyond y[i] = a * x[i] + y[i] for one float4 per thread. No synchronisation.
__global__ void axpy_kernel(float4* __restrict__ y, const float4* __restrict__ x, float a,
                            std::int64_t n) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float4 xv = x[i];
  float4 yv = y[i];
  yv.x += a * xv.x;
  yv.y += a * xv.y;
  yv.z += a * xv.z;
  yv.w += a * xv.w;
  y[i] = yv;
}

class GemmVictim final : public Victim {
 public:
  GemmVictim(int m, int n, int k) : m_(m), n_(n), k_(k) {
    check(cublasLtCreate(&lt_), "cublasLtCreate");
    TIDE_CUDA_CHECK(cudaMalloc(&a_, std::size_t{2} * m * k));
    TIDE_CUDA_CHECK(cudaMalloc(&b_, std::size_t{2} * k * n));
    TIDE_CUDA_CHECK(cudaMalloc(&d_, std::size_t{2} * m * n));
    TIDE_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspace));
    TIDE_CUDA_CHECK(cudaMemset(a_, 0x3c, std::size_t{2} * m * k));  // ~1.0 in bf16
    TIDE_CUDA_CHECK(cudaMemset(b_, 0x3a, std::size_t{2} * k * n));
    check(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    // Column-major D (m x n) = A (m x k) * B (k x n).
    check(cublasLtMatrixLayoutCreate(&la_, CUDA_R_16BF, m, k, m), "layout A");
    check(cublasLtMatrixLayoutCreate(&lb_, CUDA_R_16BF, k, n, k), "layout B");
    check(cublasLtMatrixLayoutCreate(&ld_, CUDA_R_16BF, m, n, m), "layout D");
    cublasLtMatmulPreference_t pref;
    check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    std::size_t ws = kWorkspace;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof(ws)),
          "preference workspace");
    int found = 0;
    check(
        cublasLtMatmulAlgoGetHeuristic(lt_, op_, la_, lb_, ld_, ld_, pref, 1, &heuristic_, &found),
        "AlgoGetHeuristic");
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) throw std::runtime_error("cuBLASLt found no algorithm for the GEMM victim");
    // Tile, split-k and stages ids are 32-bit; the cluster shape id is a uint16_t (cublasLt.h).
    auto attr = [&](cublasLtMatmulAlgoConfigAttributes_t which, std::size_t size) {
      std::uint32_t v32 = 0;
      std::uint16_t v16 = 0;
      void* dst = size == 2 ? static_cast<void*>(&v16) : static_cast<void*>(&v32);
      std::size_t written = 0;
      if (cublasLtMatmulAlgoConfigGetAttribute(&heuristic_.algo, which, dst, size, &written) !=
          CUBLAS_STATUS_SUCCESS)
        return -1;
      return size == 2 ? static_cast<int>(v16) : static_cast<int>(v32);
    };
    algo_[0] = attr(CUBLASLT_ALGO_CONFIG_ID, 4);
    algo_[1] = attr(CUBLASLT_ALGO_CONFIG_TILE_ID, 4);
    algo_[2] = attr(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4);
    algo_[3] = attr(CUBLASLT_ALGO_CONFIG_STAGES_ID, 4);
    algo_[4] = attr(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2);
    // Eq. 4's n_gemm from the picked algorithm (GemmGrid in interference.hpp).
    for (const auto& t : kTileShapes) {
      if (t[0] == algo_[1]) {
        grid_.tile_m = t[1];
        grid_.tile_n = t[2];
        grid_.tile_known = true;
      }
    }
    for (const auto& c : kClusterShapes) {
      if (c[0] == algo_[4]) {
        grid_.cluster_x = c[1];
        grid_.cluster_y = c[2] * c[3];
        grid_.cluster_known = true;
      }
    }
    grid_.splitk = algo_[2] > 1 ? algo_[2] : 1;
    if (grid_.tile_known)
      grid_.ctas = ((m + grid_.tile_m - 1) / grid_.tile_m) *
                   ((n + grid_.tile_n - 1) / grid_.tile_n) * grid_.splitk;
  }
  ~GemmVictim() override {
    cublasLtMatrixLayoutDestroy(la_);
    cublasLtMatrixLayoutDestroy(lb_);
    cublasLtMatrixLayoutDestroy(ld_);
    cublasLtMatmulDescDestroy(op_);
    cublasLtDestroy(lt_);
    cudaFree(a_);
    cudaFree(b_);
    cudaFree(d_);
    cudaFree(workspace_);
  }
  std::string name() const override { return "gemm"; }
  std::string describe() const override {
    return "cuBLASLt bf16 GEMM " + std::to_string(m_) + " x " + std::to_string(n_) + " x " +
           std::to_string(k_) + " (fp32 accumulate), heuristic 0: algo id " +
           std::to_string(algo_[0]) + ", tile id " + std::to_string(algo_[1]) + ", split-k " +
           std::to_string(algo_[2]) + ", stages id " + std::to_string(algo_[3]) +
           ", cluster shape id " + std::to_string(algo_[4]) + " (" +
           (grid_.tile_known
                ? "tile " + std::to_string(grid_.tile_m) + "x" + std::to_string(grid_.tile_n)
                : std::string("tile unknown")) +
           ", cluster " +
           (grid_.cluster_known
                ? std::to_string(grid_.cluster_x) + "x" + std::to_string(grid_.cluster_y)
                : std::string("auto/unknown, taken as 1")) +
           ", estimated " + std::to_string(grid_.ctas) + " CTAs)";
  }
  const GemmGrid* grid() const override { return &grid_; }
  void launch(int, cudaStream_t stream) override {
    const float alpha = 1.0f, beta = 0.0f;
    check(cublasLtMatmul(lt_, op_, &alpha, a_, la_, b_, lb_, &beta, d_, ld_, d_, ld_,
                         &heuristic_.algo, workspace_, kWorkspace, stream),
          "cublasLtMatmul");
  }

 private:
  static constexpr std::size_t kWorkspace = 32u << 20;
  int m_, n_, k_;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
  int algo_[5] = {};
  GemmGrid grid_;
  void *a_ = nullptr, *b_ = nullptr, *d_ = nullptr, *workspace_ = nullptr;
};

class ElementwiseVictim final : public Victim {
 public:
  explicit ElementwiseVictim(std::size_t bytes) : n_(static_cast<std::int64_t>(bytes / 16)) {
    TIDE_CUDA_CHECK(cudaMalloc(&x_, bytes));
    TIDE_CUDA_CHECK(cudaMalloc(&y_, bytes));
    TIDE_CUDA_CHECK(cudaMemset(x_, 0, bytes));
    TIDE_CUDA_CHECK(cudaMemset(y_, 0, bytes));
  }
  ~ElementwiseVictim() override {
    cudaFree(x_);
    cudaFree(y_);
  }
  std::string name() const override { return "elementwise"; }
  std::string describe() const override {
    return "y = a x + y, fp32, " + std::to_string(n_ * 16 >> 20) + " MiB per operand, " +
           std::to_string((n_ + 255) / 256) + " CTAs of 256 threads";
  }
  void launch(int, cudaStream_t stream) override {
    axpy_kernel<<<static_cast<unsigned>((n_ + 255) / 256), 256, 0, stream>>>(y_, x_, 0.5f, n_);
    TIDE_CUDA_CHECK_LAUNCH();
  }

 private:
  std::int64_t n_;
  float4 *x_ = nullptr, *y_ = nullptr;
};

class ProbeVictim final : public Victim {
 public:
  explicit ProbeVictim(Probe& probe) : probe_(probe) {}
  std::string name() const override { return "probe"; }
  std::string describe() const override {
    const ProbeShape& s = probe_.shape();
    return "SM-id probe: " + std::to_string(s.clusters) + " clusters of " +
           std::to_string(s.cluster_size) + " CTAs, " + std::to_string(probe_.smem_bytes()) +
           " B shared memory each (a whole SM), " + std::to_string(s.work_us) + " us per CTA";
  }
  void launch(int rep, cudaStream_t stream) override { probe_.launch(rep, stream); }

 private:
  Probe& probe_;
};

}  // namespace

std::unique_ptr<Victim> make_gemm_victim(int m, int n, int k) {
  return std::make_unique<GemmVictim>(m, n, k);
}
std::unique_ptr<Victim> make_elementwise_victim(std::size_t bytes) {
  return std::make_unique<ElementwiseVictim>(bytes);
}
std::unique_ptr<Victim> make_probe_victim(Probe& probe) {
  return std::make_unique<ProbeVictim>(probe);
}

}  // namespace tide::bench
