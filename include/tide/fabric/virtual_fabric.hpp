// The virtual fabric (architecture: fabric/virtual): N virtual ranks of one
// process on one GPU, for tests and kernel-level measurements. It is not a transport: there
// are no modelled delays, and timings between its ranks are not NVLink timings.
//
// Contract (the memory layout: NOTE [virtual fabric memory] in docs/executor.md):
// - Every rank's arena is symmetric, carved from one VMM range (arena(r) = base + r x stride),
//   and every rank addresses every peer's arena and signal words (load_store is always true).
// - With VirtualFabricOptions::devices the ranks spread over the host's GPUs in consecutive
//   blocks; device_of(rank) says where a rank's streams, kernels and buffers live.
// - Tensors and outputs are cudaMalloc buffers outside the arena. Contents are not
//   initialised.
// - The destructor frees everything and so waits for work still using it; a caller that could
//   not drain its streams calls release() instead, which leaks on purpose.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tide/fabric/fabric.hpp"
#include "tide/program/program.hpp"

namespace tide::fabric {

struct VirtualFabricOptions {
  int device = -1;  // the CUDA device; -1: the current one
  // Several GPUs of one host: the ranks in consecutive blocks, one block per device (sizes
  // differ by at most one). Every pair needs peer access (NVLink or PCIe); empty: `device`.
  std::vector<int> devices;
  // Lower bound on the arena stride's alignment (bytes, a power of two; the driver's
  // recommended granularity is used when larger).
  std::int64_t arena_alignment = std::int64_t{2} << 20;
  // Signal words per rank (the executor's counters); VirtualFabric(program) takes the
  // program's counter count when this is smaller.
  std::int64_t signal_words = 0;
};

class VirtualFabric final : public Fabric {
 public:
  // One rank per entry of `sizes` (1..4096 ranks). Validates every size before touching the
  // GPU (throws tide::InvalidArgument), then allocates (tide::CudaError on a driver or memory
  // failure, tide::Unsupported where the device has no VMM support).
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

  // Gives up ownership of every allocation without freeing it (for a caller whose device
  // work could not be drained: freeing would wait for it forever). The fabric is unusable after.
  void release() noexcept override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tide::fabric
