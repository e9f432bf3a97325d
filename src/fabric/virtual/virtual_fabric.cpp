// The virtual fabric: N ranks' arenas carved from one VMM allocation, per-rank tensors and
// outputs as cudaMalloc buffers. See NOTE [virtual fabric memory] in docs/executor.md.
#include "tide/fabric/virtual_fabric.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "cuda_driver.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

namespace tide::fabric {

using detail::check_driver;
using detail::driver;
using detail::DriverApi;
using program::Buffer;
using program::Space;

namespace {

constexpr int kMaxRanks = 4096;

std::string where(int rank) {
  return "VirtualFabric: rank " + std::to_string(rank) + ": ";
}

}  // namespace

struct VirtualFabric::State {
  std::vector<int> devices;  // one block of consecutive ranks per device
  std::vector<program::BufferSizes> sizes;
  // VMM arena: one reserved range, one physical allocation per device block mapped into it.
  struct Block {
    int device = 0;
    int first = 0;  // ranks [first, first + count)
    int count = 0;
    CUmemGenericAllocationHandle handle = 0;
    bool created = false;
    bool mapped = false;
    std::uint64_t* signals = nullptr;  // count x signal_words (cudaMalloc on the device)
  };
  std::vector<Block> blocks;
  CUdeviceptr base = 0;
  bool reserved = false;
  std::int64_t stride = 0;
  std::int64_t total = 0;
  // cudaMalloc buffers, [rank][index].
  std::vector<std::vector<void*>> tensors;
  std::vector<std::vector<void*>> outputs;
  std::int64_t malloc_bytes = 0;
  std::int64_t signal_words = 0;
  bool released = false;

  ~State() {
    if (released) return;
    // Teardown continues past failures: a destructor must not throw, and what can be freed is.
    for (auto* list : {&tensors, &outputs}) {
      for (auto& rank : *list) {
        for (void* p : rank) {
          if (p != nullptr) (void)cudaFree(p);
        }
      }
    }
    for (Block& b : blocks) {
      if (b.signals != nullptr) (void)cudaFree(b.signals);
      if (b.mapped) {
        (void)driver().mem_unmap(base + static_cast<CUdeviceptr>(b.first * stride),
                                 static_cast<std::size_t>(b.count * stride));
      }
      if (b.created) (void)driver().mem_release(b.handle);
    }
    if (reserved) (void)driver().mem_address_free(base, static_cast<std::size_t>(total));
  }

  int ranks() const { return static_cast<int>(sizes.size()); }

  const Block& block_of(int rank) const {
    for (const Block& b : blocks) {
      if (rank >= b.first && rank < b.first + b.count) return b;
    }
    throw InvalidArgument("VirtualFabric: rank " + std::to_string(rank) + " is outside [0, " +
                          std::to_string(ranks()) + ")");
  }

  void* buffer(const Buffer& b) const {
    if (b.rank < 0 || b.rank >= static_cast<int>(sizes.size())) {
      throw InvalidArgument("VirtualFabric: buffer rank " + std::to_string(b.rank) +
                            " is outside [0, " + std::to_string(sizes.size()) + ")");
    }
    const auto r = static_cast<std::size_t>(b.rank);
    switch (b.space) {
      case Space::kArena:
        if (b.index != 0) throw InvalidArgument(where(b.rank) + "arena index must be 0");
        return reinterpret_cast<void*>(base + static_cast<CUdeviceptr>(b.rank * stride));
      case Space::kTensor:
        if (b.index < 0 || b.index >= static_cast<int>(tensors[r].size())) {
          throw InvalidArgument(where(b.rank) + "tensor " + std::to_string(b.index) +
                                " is outside [0, " + std::to_string(tensors[r].size()) + ")");
        }
        return tensors[r][static_cast<std::size_t>(b.index)];
      case Space::kOutput:
        if (b.index < 0 || b.index >= static_cast<int>(outputs[r].size())) {
          throw InvalidArgument(where(b.rank) + "output " + std::to_string(b.index) +
                                " is outside [0, " + std::to_string(outputs[r].size()) + ")");
        }
        return outputs[r][static_cast<std::size_t>(b.index)];
    }
    throw InvalidArgument(where(b.rank) + "unknown buffer space");
  }
};

void VirtualFabric::check_sizes(const std::vector<program::BufferSizes>& sizes) {
  if (sizes.empty() || sizes.size() > static_cast<std::size_t>(kMaxRanks)) {
    throw InvalidArgument("VirtualFabric: " + std::to_string(sizes.size()) +
                          " ranks is outside [1, " + std::to_string(kMaxRanks) +
                          "]; give one BufferSizes per rank");
  }
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    const program::BufferSizes& s = sizes[r];
    const int rank = static_cast<int>(r);
    if (s.arena_bytes < 0) {
      throw InvalidArgument(where(rank) + "arena_bytes = " + std::to_string(s.arena_bytes) +
                            " is negative");
    }
    for (std::size_t i = 0; i < s.tensor_bytes.size(); ++i) {
      if (s.tensor_bytes[i] < 0) {
        throw InvalidArgument(where(rank) + "tensor " + std::to_string(i) + " has " +
                              std::to_string(s.tensor_bytes[i]) + " bytes");
      }
    }
    for (std::size_t i = 0; i < s.output_bytes.size(); ++i) {
      if (s.output_bytes[i] < 0) {
        throw InvalidArgument(where(rank) + "output " + std::to_string(i) + " has " +
                              std::to_string(s.output_bytes[i]) + " bytes");
      }
    }
  }
}

VirtualFabric::VirtualFabric(const program::Program& program, const VirtualFabricOptions& options)
    : VirtualFabric(
          [&program]() -> const std::vector<program::BufferSizes>& {
            if (program.ranks < 1 || static_cast<int>(program.buffers.size()) != program.ranks) {
              throw InvalidArgument("VirtualFabric: the program has " +
                                    std::to_string(program.ranks) + " ranks but " +
                                    std::to_string(program.buffers.size()) +
                                    " BufferSizes; build it with a program builder");
            }
            return program.buffers;
          }(),
          [&program, &options] {
            VirtualFabricOptions o = options;
            o.signal_words = std::max<std::int64_t>(o.signal_words, program.counters);
            return o;
          }()) {}

VirtualFabric::VirtualFabric(const std::vector<program::BufferSizes>& sizes,
                             const VirtualFabricOptions& options)
    : state_(std::make_unique<State>()) {
  check_sizes(sizes);
  const std::int64_t align = options.arena_alignment;
  if (align < 1 || (align & (align - 1)) != 0) {
    throw InvalidArgument("VirtualFabric: arena_alignment = " + std::to_string(align) +
                          " is not a power of two");
  }
  if (options.signal_words < 0) {
    throw InvalidArgument("VirtualFabric: signal_words = " + std::to_string(options.signal_words) +
                          " is negative");
  }
  State& s = *state_;
  s.sizes = sizes;
  s.devices = options.devices;
  if (s.devices.empty()) {
    int current = 0;
    if (options.device >= 0) {
      current = options.device;
    } else {
      TIDE_CUDA_CHECK(cudaGetDevice(&current));
    }
    s.devices = {current};
  }
  const int ranks = s.ranks();
  const auto device_count = static_cast<int>(s.devices.size());
  if (device_count > ranks) {
    throw InvalidArgument("VirtualFabric: " + std::to_string(device_count) + " devices for " +
                          std::to_string(ranks) + " ranks; give at most one device per rank");
  }
  const DriverApi& d = driver();
  for (int dev : s.devices) {
    TIDE_CUDA_CHECK(cudaSetDevice(dev));
    TIDE_CUDA_CHECK(cudaFree(nullptr));  // create the primary context before driver calls
    int vmm = 0;
    check_driver(
        d.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev),
        "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
    if (vmm == 0) {
      throw Unsupported("VirtualFabric: device " + std::to_string(dev) +
                        " does not support CUDA virtual memory management (cuMemCreate); the "
                        "virtual fabric needs it (any Hopper or later GPU with a recent driver)");
    }
    for (int peer : s.devices) {
      if (peer == dev) continue;
      int can = 0;
      TIDE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, dev, peer));
      if (can == 0) {
        throw Unsupported("VirtualFabric: device " + std::to_string(dev) +
                          " cannot access device " + std::to_string(peer) +
                          " (no peer-to-peer path): spread the ranks only over GPUs that "
                          "NVLink or PCIe peer access connects");
      }
      const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else {
        TIDE_CUDA_CHECK(e);
      }
    }
  }
  // Consecutive ranks per device (a node's GPUs stay together when L divides the block).
  for (int k = 0; k < device_count; ++k) {
    State::Block b;
    b.device = s.devices[static_cast<std::size_t>(k)];
    b.first = k * ranks / device_count;
    b.count = (k + 1) * ranks / device_count - b.first;
    s.blocks.push_back(b);
  }

  std::int64_t grain = options.arena_alignment;
  for (const State::Block& b : s.blocks) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = b.device;
    std::size_t granularity = 0;
    check_driver(
        d.mem_get_allocation_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "cuMemGetAllocationGranularity");
    grain = std::max<std::int64_t>(static_cast<std::int64_t>(granularity), grain);
  }
  std::int64_t largest = 1;  // a rank with an empty arena still gets a symmetric granule
  for (const program::BufferSizes& b : sizes)
    largest = std::max(largest, b.arena_bytes);
  s.stride = (largest + grain - 1) / grain * grain;
  s.total = s.stride * static_cast<std::int64_t>(ranks);

  const std::string what = "VirtualFabric (" + std::to_string(ranks) + " ranks x " +
                           std::to_string(s.stride) + " bytes): ";
  check_driver(d.mem_address_reserve(&s.base, static_cast<std::size_t>(s.total),
                                     static_cast<std::size_t>(grain), 0, 0),
               what + "cuMemAddressReserve");
  s.reserved = true;
  std::vector<CUmemAccessDesc> access;
  for (State::Block& b : s.blocks) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = b.device;
    const auto bytes = static_cast<std::size_t>(b.count * s.stride);
    check_driver(d.mem_create(&b.handle, bytes, &prop, 0), what + "cuMemCreate");
    b.created = true;
    check_driver(
        d.mem_map(s.base + static_cast<CUdeviceptr>(b.first * s.stride), bytes, 0, b.handle, 0),
        what + "cuMemMap");
    b.mapped = true;
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = b.device;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(a);
  }
  // Every device reads and writes every rank's arena (peer arenas, as LSA pointers would).
  check_driver(
      d.mem_set_access(s.base, static_cast<std::size_t>(s.total), access.data(), access.size()),
      what + "cuMemSetAccess");

  s.signal_words = options.signal_words;
  s.tensors.resize(sizes.size());
  s.outputs.resize(sizes.size());
  for (State::Block& b : s.blocks) {
    TIDE_CUDA_CHECK(cudaSetDevice(b.device));
    const std::size_t signal_bytes =
        sizeof(std::uint64_t) *
        static_cast<std::size_t>(std::max<std::int64_t>(1, s.signal_words)) *
        static_cast<std::size_t>(b.count);
    TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&b.signals), signal_bytes));
    for (int r = b.first; r < b.first + b.count; ++r) {
      const auto k = static_cast<std::size_t>(r);
      for (auto [list, bytes] : {std::pair{&s.tensors[k], &sizes[k].tensor_bytes},
                                 std::pair{&s.outputs[k], &sizes[k].output_bytes}}) {
        list->assign(bytes->size(), nullptr);
        for (std::size_t i = 0; i < bytes->size(); ++i) {
          if ((*bytes)[i] == 0) continue;
          TIDE_CUDA_CHECK(cudaMalloc(&(*list)[i], static_cast<std::size_t>((*bytes)[i])));
          s.malloc_bytes += (*bytes)[i];
        }
      }
    }
  }
  TIDE_CUDA_CHECK(cudaSetDevice(s.devices.front()));
}

VirtualFabric::~VirtualFabric() = default;

int VirtualFabric::ranks() const {
  return static_cast<int>(state_->sizes.size());
}
bool VirtualFabric::local(int rank) const {
  return rank >= 0 && rank < ranks();
}

std::uint64_t* VirtualFabric::signals(int owner) const {
  if (!local(owner)) return nullptr;
  const State::Block& b = state_->block_of(owner);
  return b.signals + static_cast<std::size_t>(owner - b.first) *
                         static_cast<std::size_t>(std::max<std::int64_t>(1, state_->signal_words));
}

std::int64_t VirtualFabric::signal_words() const {
  return state_->signal_words;
}

int VirtualFabric::device() const {
  return state_->devices.front();
}

int VirtualFabric::device_of(int rank) const {
  return state_->block_of(rank).device;
}

int VirtualFabric::device_count() const {
  return static_cast<int>(state_->devices.size());
}

void* VirtualFabric::arena(int rank) const {
  return state_->buffer(Buffer{rank, Space::kArena, 0});
}

void* VirtualFabric::peer_arena(int rank, int peer) const {
  if (rank < 0 || rank >= ranks()) {
    throw InvalidArgument("VirtualFabric: rank " + std::to_string(rank) + " is outside [0, " +
                          std::to_string(ranks()) + ")");
  }
  return arena(peer);
}

void* VirtualFabric::pointer(const program::Buffer& buffer) const {
  return state_->buffer(buffer);
}

std::int64_t VirtualFabric::bytes(const program::Buffer& b) const {
  (void)state_->buffer(b);  // validates
  const program::BufferSizes& s = state_->sizes[static_cast<std::size_t>(b.rank)];
  switch (b.space) {
    case Space::kArena:
      return s.arena_bytes;
    case Space::kTensor:
      return s.tensor_bytes[static_cast<std::size_t>(b.index)];
    case Space::kOutput:
      return s.output_bytes[static_cast<std::size_t>(b.index)];
  }
  return 0;
}

std::int64_t VirtualFabric::arena_stride() const {
  return state_->stride;
}
std::int64_t VirtualFabric::vmm_bytes() const {
  return state_->total;
}
std::int64_t VirtualFabric::buffer_bytes() const {
  return state_->malloc_bytes;
}

void VirtualFabric::release() noexcept {
  if (state_) state_->released = true;
}

}  // namespace tide::fabric
