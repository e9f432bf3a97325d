// NOTE [ipc fabric]: the runtime's windows of the processes of one host, mapped through CUDA IPC.
#include "tide/fabric/ipc_fabric.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "../../cuda_driver/cuda_driver.hpp"
#include "pidfd.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/fabric/runtime_window.hpp"

namespace tide::fabric {
namespace {

using detail::check_driver;
using detail::driver;

std::string hex(const void* data, std::size_t bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) {
    const auto b = static_cast<const unsigned char*>(data)[i];
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

void unhex(const std::string& text, void* data, std::size_t bytes) {
  if (text.size() != 2 * bytes) throw InvalidArgument("a cudaIpc handle of the wrong length");
  for (std::size_t i = 0; i < bytes; ++i) {
    static_cast<unsigned char*>(data)[i] =
        static_cast<unsigned char>(std::stoi(text.substr(2 * i, 2), nullptr, 16));
  }
}

// Closes an exported descriptor when construction ends, after every peer took it.
struct ExportedDescriptor {
  int fd = -1;
  ~ExportedDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

std::int64_t granularity_of(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  std::size_t g = 0;
  check_driver(driver().mem_get_allocation_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
               "cuMemGetAllocationGranularity");
  return static_cast<std::int64_t>(g);
}

bool several_hosts(const std::vector<int>& hosts) {
  for (const int h : hosts)
    if (h != hosts.front()) return true;
  return false;
}

}  // namespace

std::int64_t ipc_window_bytes(const IpcFabricOptions& o, int world) {
  if (!several_hosts(o.hosts)) return fabric::window_bytes(o.arena_bytes, o.signal_words);
  return window_message_offset(o.arena_bytes, o.signal_words) + fabric::message_area_bytes(world);
}

IpcFabric::IpcFabric(int rank, int world, const IpcFabricOptions& o, const IpcExchange& exchange)
    : rank_(rank), world_(world), arena_bytes_(o.arena_bytes), signal_words_(o.signal_words) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw InvalidArgument("IpcFabric: rank " + std::to_string(rank) + " outside a world of " +
                          std::to_string(world));
  }
  if (o.arena_bytes < 1 || o.signal_words < 1) {
    throw InvalidArgument("IpcFabric: arena_bytes and signal_words must be positive");
  }
  if (!exchange) throw InvalidArgument("IpcFabric: needs an exchange (the bootstrap store)");
  if (!o.hosts.empty() && static_cast<int>(o.hosts.size()) != world) {
    throw InvalidArgument("IpcFabric: " + std::to_string(o.hosts.size()) +
                          " host indices for a world of " + std::to_string(world) +
                          " (give one per rank, or none)");
  }
  if (several_hosts(o.hosts)) {
    hosts_ = o.hosts;
    message_bytes_ = fabric::message_area_bytes(world);
  }
  device_ = o.device;
  if (device_ < 0) TIDE_CUDA_CHECK(cudaGetDevice(&device_));
  TIDE_CUDA_CHECK(cudaSetDevice(device_));
  const std::int64_t needed = ipc_window_bytes(o, world);

  // 1. The window, and the allocation it lies in.
  void* window = o.window;
  if (window == nullptr) {
    owned_ = ipc_allocate(needed, device_);
    window = owned_;
  }
  const std::optional<IpcAllocation> a = find_ipc_allocation(window, needed);
  if (!a) {
    throw InvalidArgument("IpcFabric: the window of " + std::to_string(needed) +
                          " bytes is not memory from ipc_allocate (tide_ipc_mem_alloc)");
  }
  if (a->device != device_) {
    throw InvalidArgument("IpcFabric: the window is on device " + std::to_string(a->device) +
                          ", the fabric on device " + std::to_string(device_));
  }
  handles_ = a->handles;
  const std::int64_t offset = static_cast<std::byte*>(window) - a->base;
  if (message_bytes_ > 0) {
    // NOTE [ipc rendezvous transport]: the channels' words start at 0 before any peer can map
    // them (the exchanges below come after), on a private stream (no device-wide wait).
    cudaStream_t zero = nullptr;
    TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&zero, cudaStreamNonBlocking));
    const cudaError_t set = cudaMemsetAsync(
        static_cast<std::byte*>(window) + window_message_offset(o.arena_bytes, o.signal_words), 0,
        static_cast<std::size_t>(message_bytes_), zero);
    const cudaError_t done = set == cudaSuccess ? cudaStreamSynchronize(zero) : set;
    (void)cudaStreamDestroy(zero);
    TIDE_CUDA_CHECK(done);
  }

  // 2. "handles": this rank's allocation, published.
  ExportedDescriptor exported;
  std::ostringstream mine;
  mine << ipc_handles_name(handles_) << ' ' << a->bytes << ' ' << offset << ' ';
  if (handles_ == IpcHandles::kPosixFd) {
    check_driver(driver().mem_export_to_shareable_handle(
                     &exported.fd, static_cast<CUmemGenericAllocationHandle>(a->vmm_handle),
                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                 "cuMemExportToShareableHandle(POSIX fd)");
    mine << ::getpid() << ' ' << exported.fd;
  } else {
    cudaIpcMemHandle_t h{};
    TIDE_CUDA_CHECK(cudaIpcGetMemHandle(&h, a->base));
    mine << hex(&h, sizeof(h));
  }
  const std::vector<std::string> published = exchange("handles", mine.str());
  for (int r = 0; r < world; ++r) {
    const std::string kind = published[static_cast<std::size_t>(r)].substr(
        0, published[static_cast<std::size_t>(r)].find(' '));
    if (kind != ipc_handles_name(handles_)) {
      throw Unsupported("IpcFabric: rank " + std::to_string(r) + " shares its arena with '" + kind +
                        "' handles, rank " + std::to_string(rank) + " with '" +
                        std::string(ipc_handles_name(handles_)) +
                        "' (set TIDE_IPC_HANDLES alike on every rank)");
    }
  }

  // 3. "mapped": every peer's window here, or the reason it could not be.
  windows_.assign(static_cast<std::size_t>(world), nullptr);
  windows_[static_cast<std::size_t>(rank)] = static_cast<std::byte*>(window);
  std::string error;
  for (int r = 0; r < world && error.empty(); ++r) {
    if (r == rank) continue;
    try {
      const std::string& p = published[static_cast<std::size_t>(r)];
      mappings_.push_back(map_peer(p));
      std::istringstream in(p);
      std::string kind;
      std::int64_t bytes = 0;
      std::int64_t peer_offset = 0;
      in >> kind >> bytes >> peer_offset;
      windows_[static_cast<std::size_t>(r)] = mappings_.back().base + peer_offset;
    } catch (const std::exception& e) {
      error = "rank " + std::to_string(rank) + " could not map rank " + std::to_string(r) +
              "'s arena: " + e.what();
    }
  }
  const std::vector<std::string> mapped = exchange("mapped", error.empty() ? "ok" : error);
  for (const std::string& m : mapped) {
    if (m != "ok") {
      for (const Mapping& peer : mappings_)
        unmap(peer);
      mappings_.clear();
      if (owned_ != nullptr) ipc_free(owned_);
      owned_ = nullptr;
      throw Unsupported("IpcFabric: " + m);
    }
  }
}

IpcFabric::Mapping IpcFabric::map_peer(const std::string& published) const {
  std::istringstream in(published);
  std::string kind;
  Mapping m;
  std::int64_t offset = 0;
  in >> kind >> m.bytes >> offset;
  m.handles = handles_;
  if (handles_ == IpcHandles::kCudaIpc) {
    std::string text;
    in >> text;
    cudaIpcMemHandle_t h{};
    unhex(text, &h, sizeof(h));
    void* p = nullptr;
    TIDE_CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    m.base = static_cast<std::byte*>(p);
    return m;
  }
  pid_t pid = 0;
  int fd = -1;
  in >> pid >> fd;
  const detail::DriverApi& d = driver();
  ExportedDescriptor taken{detail::take_descriptor(pid, fd)};
  CUmemGenericAllocationHandle handle = 0;
  check_driver(d.mem_import_from_shareable_handle(
                   &handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(taken.fd)),
                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               "cuMemImportFromShareableHandle");
  CUdeviceptr va = 0;
  const auto size = static_cast<std::size_t>(m.bytes);
  CUresult r =
      d.mem_address_reserve(&va, size, static_cast<std::size_t>(granularity_of(device_)), 0, 0);
  if (r == CUDA_SUCCESS) r = d.mem_map(va, size, 0, handle, 0);
  (void)d.mem_release(handle);  // the mapping holds the allocation from here
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d.mem_set_access(va, size, &access, 1);
  }
  if (r != CUDA_SUCCESS) {
    if (va != 0) {
      (void)d.mem_unmap(va, size);
      (void)d.mem_address_free(va, size);
    }
    check_driver(r, "mapping a peer's arena of " + std::to_string(m.bytes) + " bytes");
  }
  m.base = reinterpret_cast<std::byte*>(va);
  return m;
}

void IpcFabric::unmap(const Mapping& m) const {
  if (m.handles == IpcHandles::kCudaIpc) {
    (void)cudaIpcCloseMemHandle(m.base);
    return;
  }
  const auto va = reinterpret_cast<CUdeviceptr>(m.base);
  (void)driver().mem_unmap(va, static_cast<std::size_t>(m.bytes));
  (void)driver().mem_address_free(va, static_cast<std::size_t>(m.bytes));
}

IpcFabric::~IpcFabric() {
  (void)cudaSetDevice(device_);
  for (const Mapping& m : mappings_)
    unmap(m);
  if (owned_ != nullptr) {
    try {
      ipc_free(owned_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tide: freeing the ipc window failed: %s\n", e.what());
    }
  }
}

void IpcFabric::release() noexcept {
  mappings_.clear();
  owned_ = nullptr;
}

std::int64_t IpcFabric::window_bytes() const {
  if (message_bytes_ == 0) return fabric::window_bytes(arena_bytes_, signal_words_);
  return window_message_offset(arena_bytes_, signal_words_) + message_bytes_;
}

bool IpcFabric::load_store(int from, int to) const {
  if (hosts_.empty()) return true;
  if (from < 0 || from >= world_ || to < 0 || to >= world_) return false;
  return hosts_[static_cast<std::size_t>(from)] == hosts_[static_cast<std::size_t>(to)];
}

std::byte* IpcFabric::message_area(int owner) const {
  if (message_bytes_ == 0 || owner < 0 || owner >= world_) return nullptr;
  return windows_[static_cast<std::size_t>(owner)] +
         window_message_offset(arena_bytes_, signal_words_);
}

void* IpcFabric::pointer(const program::Buffer& buffer) const {
  if (buffer.space != program::Space::kArena || buffer.index != 0) return nullptr;
  if (buffer.rank < 0 || buffer.rank >= world_) return nullptr;
  return windows_[static_cast<std::size_t>(buffer.rank)];
}

std::int64_t IpcFabric::bytes(const program::Buffer& buffer) const {
  return pointer(buffer) != nullptr ? arena_bytes_ : 0;
}

std::uint64_t* IpcFabric::signals(int owner) const {
  if (owner < 0 || owner >= world_) return nullptr;
  return reinterpret_cast<std::uint64_t*>(windows_[static_cast<std::size_t>(owner)] +
                                          window_signal_offset(arena_bytes_));
}

}  // namespace tide::fabric
