// Device memory and one stream for `tide check-runtime --backend nccl` (call_memory.hpp).
#include <cuda_runtime_api.h>

#include "call_memory.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

namespace tide::cli {
namespace {

class DeviceCallMemory final : public CallMemory {
 public:
  explicit DeviceCallMemory(int device) {
    TIDE_CUDA_CHECK(cudaSetDevice(device));
    TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~DeviceCallMemory() override { (void)cudaStreamDestroy(stream_); }
  std::byte* allocate(std::size_t bytes) override {
    void* p = nullptr;
    TIDE_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
    return static_cast<std::byte*>(p);
  }
  void release(std::byte* p) override { TIDE_CUDA_CHECK(cudaFree(p)); }
  void write(std::byte* dst, const void* src, std::size_t bytes) override {
    TIDE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host source may change next
  }
  void read(void* dst, const std::byte* src, std::size_t bytes) override {
    TIDE_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  }
  void fill(std::byte* dst, int value, std::size_t bytes) override {
    TIDE_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_));
  }
  void finish() override { TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  std::uintptr_t stream() const override { return reinterpret_cast<std::uintptr_t>(stream_); }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<CallMemory> device_call_memory(int device) {
  return std::make_unique<DeviceCallMemory>(device);
}

int visible_devices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // namespace tide::cli
