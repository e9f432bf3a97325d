// The virtual fabric (architecture: fabric/virtual): N ranks of one process on one GPU (or the
// host's GPUs in consecutive blocks, device_of), for tests and kernel measurements; no modelled
// delays. Contract (layout: NOTE [virtual fabric memory] in docs/executor.md): symmetric arenas
// carved from one VMM range (arena(r) = base + r x stride), every peer addressable; tensors and
// outputs are cudaMalloc buffers; contents uninitialised. The destructor frees everything (so
// waits for work still using it); release() leaks on purpose instead.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/program/program.hpp"

namespace tide::fabric {

struct VirtualFabricOptions {
  int device = -1;  // the CUDA device; -1: the current one
  // Several GPUs of one host (blocks of ranks, sizes within one; peer access); empty: `device`.
  std::vector<int> devices;
  // Lower bound on the arena stride's alignment (a power of two; or the driver's, if larger).
  std::int64_t arena_alignment = std::int64_t{2} << 20;
  // Signal words per rank; VirtualFabric(program) takes at least the program's counters.
  std::int64_t signal_words = 0;
};

class VirtualFabric final : public Fabric {
 public:
  // One rank per entry of `sizes` (1..4096). InvalidArgument before touching the GPU, then
  // CudaError (driver, memory) or Unsupported (no VMM).
  explicit VirtualFabric(const std::vector<program::BufferSizes>& sizes,
                         const VirtualFabricOptions& options = {});
  // Sized from a program's Program::buffers (ranks = program.ranks).
  explicit VirtualFabric(const program::Program& program, const VirtualFabricOptions& options = {});
  ~VirtualFabric() override;
  VirtualFabric(const VirtualFabric&) = delete;
  VirtualFabric& operator=(const VirtualFabric&) = delete;

  // Validates sizes as the constructor does (no GPU needed); throws tide::InvalidArgument.
  static void check_sizes(const std::vector<program::BufferSizes>& sizes);

  int ranks() const override;
  bool local(int rank) const override;  // every rank runs in this process
  int device() const override;          // the first device
  int device_of(int rank) const override;
  int device_count() const;

  // Device pointers: rank r's arena, and peer p's arena as rank r sees it.
  void* arena(int rank) const;
  void* peer_arena(int rank, int peer) const;
  // Any buffer of a program (nullptr for a zero-byte tensor or output).
  void* pointer(const program::Buffer& buffer) const override;
  // The size the program asked for (for the arena: that rank's arena_bytes).
  std::int64_t bytes(const program::Buffer& buffer) const override;
  std::uint64_t* signals(int owner) const override;
  std::int64_t signal_words() const override;

  std::int64_t arena_stride() const;  // bytes between consecutive ranks' arenas
  std::int64_t vmm_bytes() const;     // the VMM allocation: ranks x stride
  // cudaMalloc'ed bytes of tensors and outputs, all ranks.
  std::int64_t buffer_bytes() const;

  // Gives up every allocation unfreed (undrained device work); the fabric is unusable after.
  void release() noexcept override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::fabric
