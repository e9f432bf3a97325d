// Where `tide check-runtime` keeps a call's inputs and outputs: host memory for the host
// backend, device memory and one stream for the nccl backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tide::cli {

class CallMemory {
 public:
  virtual ~CallMemory() = default;
  virtual std::byte* allocate(std::size_t bytes) = 0;
  virtual void release(std::byte* p) = 0;
  virtual void write(std::byte* dst, const void* src, std::size_t bytes) = 0;  // stream-ordered
  virtual void read(void* dst, const std::byte* src, std::size_t bytes) = 0;   // after finish()
  virtual void fill(std::byte* dst, int value, std::size_t bytes) = 0;         // stream-ordered
  virtual void finish() = 0;  // waits for every call enqueued on stream()
  virtual std::uintptr_t stream() const = 0;
};

std::unique_ptr<CallMemory> host_call_memory();
// Throws tide::Unsupported in a build without CUDA.
std::unique_ptr<CallMemory> device_call_memory(int device);
int visible_devices();  // 0 in a build without CUDA or on a machine without a GPU

}  // namespace tide::cli
