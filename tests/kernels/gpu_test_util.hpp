// Helpers for TIDE's GPU kernel tests: skip without a GPU, device buffers, fresh random data
// with specials, and bitwise comparison against the reference arithmetic.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tide/core/arithmetic.hpp"
#include "tide/core/env.hpp"
#include "tide/cuda/check.hpp"

namespace tide::kernels::testing {

// Why GPU tests cannot run here, or "" when a device is present. Touches CUDA only when
// called (never at static-initialisation time, so gtest_discover_tests works without a GPU).
inline std::string gpu_absent_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(status) +
           ")";
  }
  if (count == 0) return "no CUDA device";
  return "";
}

#define TIDE_REQUIRE_GPU()                                                           \
  do {                                                                               \
    const std::string tide_reason_ = ::tide::kernels::testing::gpu_absent_reason();  \
    if (!tide_reason_.empty()) GTEST_SKIP() << "GPU test skipped: " << tide_reason_; \
  } while (0)

// TIDE_KERNEL_TEST_QUICK=1 (set by scripts/device/kernels.sh under compute-sanitizer) keeps
// the small cases only.
inline bool quick_mode() {
  return env::flag("TIDE_KERNEL_TEST_QUICK");
}

// A device allocation of `bytes` bytes (freed on destruction).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    TIDE_CUDA_CHECK(cudaMalloc(&ptr_, bytes == 0 ? 16 : bytes));
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T = unsigned char>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

  void upload(const void* host, std::size_t n) {
    TIDE_CUDA_CHECK(cudaMemcpy(ptr_, host, n, cudaMemcpyHostToDevice));
  }
  void upload_at(std::size_t offset, const void* host, std::size_t n) {
    TIDE_CUDA_CHECK(
        cudaMemcpy(static_cast<unsigned char*>(ptr_) + offset, host, n, cudaMemcpyHostToDevice));
  }
  void download(void* host, std::size_t n) const {
    TIDE_CUDA_CHECK(cudaMemcpy(host, ptr_, n, cudaMemcpyDeviceToHost));
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Random fp32 values: mostly standard normal, with NaNs (random payloads and signs), +-inf,
// +-0, subnormals and large values mixed in at rate `special_rate`.
inline float random_float(std::mt19937_64& rng, double special_rate = 0.01) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (u(rng) < special_rate) {
    switch (rng() % 8) {
      case 0:
        return std::bit_cast<float>(0x7F800001u | static_cast<std::uint32_t>(rng() & 0x7FFFFFu) |
                                    (rng() % 2 ? 0x80000000u : 0u));
      case 1:
        return std::bit_cast<float>(0x7F800000u);
      case 2:
        return std::bit_cast<float>(0xFF800000u);
      case 3:
        return std::bit_cast<float>(rng() % 2 ? 0x80000000u : 0u);
      case 4:
        return std::bit_cast<float>(static_cast<std::uint32_t>(rng() & 0x807FFFFFu));  // subnormal
      case 5:
        return std::bit_cast<float>(0x7F7FFFFFu) * (rng() % 2 ? 1.0f : -0.75f);
      case 6:
        return std::bit_cast<float>(0x00800000u) * static_cast<float>(1 + rng() % 7);
      default:
        return static_cast<float>(rng() % 17) - 8.0f;  // exact small integers
    }
  }
  std::normal_distribution<float> n(0.0f, 1.0f);
  return n(rng);
}

// Random bf16 bits: the bf16 of a random float, with bf16 NaNs of random payload.
inline std::uint16_t random_bf16(std::mt19937_64& rng, double special_rate = 0.01) {
  const float f = random_float(rng, special_rate);
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if (arith::is_nan_bits(bits)) {
    return static_cast<std::uint16_t>(0x7F80u | (rng() % 2 ? 0x8000u : 0u) | (1u + rng() % 0x7Fu));
  }
  return arith::float_to_bf16(f);
}

constexpr std::uint32_t kPoisonFp32 = 0x7FBADBADu;  // a NaN no kernel writes (they canonicalise)
constexpr std::uint16_t kPoisonBf16 = 0x7FBDu;

// Index of the first element whose bits differ, or -1.
inline std::int64_t first_bit_difference(const float* a, const float* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return i;
  }
  return -1;
}

inline std::string bits_hex(float f) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08X", std::bit_cast<std::uint32_t>(f));
  return buf;
}

}  // namespace tide::kernels::testing
