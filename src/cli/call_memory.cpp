// Host memory for `tide check-runtime` (call_memory.hpp); the device kind is in
// call_memory_cuda.cpp where CUDA is built.
#include "call_memory.hpp"

#include <cstdlib>
#include <cstring>

#include "tide/core/error.hpp"

namespace tide::cli {
namespace {

class HostCallMemory final : public CallMemory {
 public:
  std::byte* allocate(std::size_t bytes) override {
    return static_cast<std::byte*>(std::malloc(bytes == 0 ? 1 : bytes));
  }
  void release(std::byte* p) override { std::free(p); }
  void write(std::byte* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void read(void* dst, const std::byte* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void fill(std::byte* dst, int value, std::size_t bytes) override {
    std::memset(dst, value, bytes);
  }
  void finish() override {}
  std::uintptr_t stream() const override { return 0; }
};

}  // namespace

std::unique_ptr<CallMemory> host_call_memory() {
  return std::make_unique<HostCallMemory>();
}

#ifndef TIDE_CLI_CUDA
std::unique_ptr<CallMemory> device_call_memory(int) {
  throw Unsupported("this tide was built without CUDA: the nccl backend needs GPUs");
}
int visible_devices() {
  return 0;
}
#endif

}  // namespace tide::cli
