// One program's buffers on the NCCL fabric: NOTE [nccl program fabric] in
// include/tide/fabric/nccl_program_fabric.hpp.
#include "tide/fabric/nccl_program_fabric.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/version_gates.hpp"

namespace tide::fabric {

using program::Buffer;
using program::Space;

namespace {

constexpr std::int64_t kPage = 4096;

std::int64_t largest_arena(const program::Program& p) {
  std::int64_t largest = 0;
  for (const program::BufferSizes& b : p.buffers)
    largest = std::max(largest, b.arena_bytes);
  return (largest + kPage - 1) / kPage * kPage;
}

}  // namespace

struct NcclProgramFabric::State {
  NcclFabric* nccl = nullptr;
  const program::Program* program = nullptr;
  int rank = 0;
  NcclProgramOptions options;
  int lsa_size = 1;
  std::int64_t signal_offset = 0;
  std::vector<void*> tensors;
  std::vector<void*> outputs;
  std::int64_t malloc_bytes = 0;
  bool released = false;

  ~State() {
    if (released) return;
    for (auto* list : {&tensors, &outputs}) {
      for (void* p : *list) {
        if (p != nullptr) (void)cudaFree(p);
      }
    }
  }

  const program::BufferSizes& sizes() const {
    return program->buffers[static_cast<std::size_t>(rank)];
  }

  bool load_store(int from, int to) const {
    if (from / lsa_size != to / lsa_size) return false;
    const int l = options.gpus_per_node;
    return !options.messages_between_nodes || from / l == to / l;
  }

  // This process's address of rank `r`'s window base (nullptr: not load/store reachable).
  std::byte* window(int r) const {
    if (r != rank && !load_store(rank, r)) return nullptr;
    return static_cast<std::byte*>(r == rank ? nccl->arena() : nccl->peer_arena(r));
  }
};

std::int64_t NcclProgramFabric::required_window_bytes(const program::Program& program) {
  return largest_arena(program) + std::max<std::int64_t>(1, program.counters) *
                                      static_cast<std::int64_t>(sizeof(std::uint64_t));
}

NcclProgramFabric::NcclProgramFabric(NcclFabric& nccl, const program::Program& program,
                                     const NcclProgramOptions& options)
    : state_(std::make_unique<State>()) {
  if (options.messages_between_nodes &&
      (options.gpus_per_node < 1 || program.ranks % options.gpus_per_node != 0)) {
    throw InvalidArgument("NcclProgramFabric: messages_between_nodes needs the program's L (" +
                          std::to_string(options.gpus_per_node) + " does not divide " +
                          std::to_string(program.ranks) + " ranks)");
  }
  if (program.ranks != nccl.world() || static_cast<int>(program.buffers.size()) != program.ranks) {
    throw InvalidArgument("NcclProgramFabric: the program has " + std::to_string(program.ranks) +
                          " ranks, the NCCL fabric's world " + std::to_string(nccl.world()) +
                          "; build the program for the launched world");
  }
  const std::int64_t need = required_window_bytes(program);
  if (need > nccl.arena_bytes()) {
    throw InvalidArgument("NcclProgramFabric: the program needs " + std::to_string(need) +
                          " window bytes (arena and signal words), the fabric has " +
                          std::to_string(nccl.arena_bytes()) +
                          "; create the NCCL fabric with arena_bytes >= " + std::to_string(need));
  }
  State& s = *state_;
  s.nccl = &nccl;
  s.program = &program;
  s.rank = nccl.rank();
  s.signal_offset = largest_arena(program);
  s.options = options;
  s.lsa_size = std::max(1, nccl.view().lsa_size);
  TIDE_CUDA_CHECK(cudaSetDevice(nccl.device()));
  const program::BufferSizes& own = s.sizes();
  for (auto [list, bytes] :
       {std::pair{&s.tensors, &own.tensor_bytes}, std::pair{&s.outputs, &own.output_bytes}}) {
    list->assign(bytes->size(), nullptr);
    for (std::size_t i = 0; i < bytes->size(); ++i) {
      if ((*bytes)[i] == 0) continue;
      TIDE_CUDA_CHECK(cudaMalloc(&(*list)[i], static_cast<std::size_t>((*bytes)[i])));
      s.malloc_bytes += (*bytes)[i];
    }
  }
}

NcclProgramFabric::~NcclProgramFabric() = default;

int NcclProgramFabric::ranks() const {
  return state_->program->ranks;
}

bool NcclProgramFabric::local(int rank) const {
  return rank == state_->rank;
}

int NcclProgramFabric::device() const {
  return state_->nccl->device();
}

void* NcclProgramFabric::pointer(const Buffer& b) const {
  const State& s = *state_;
  if (b.rank < 0 || b.rank >= s.program->ranks) {
    throw InvalidArgument("NcclProgramFabric: buffer rank " + std::to_string(b.rank) +
                          " is outside [0, " + std::to_string(s.program->ranks) + ")");
  }
  switch (b.space) {
    case Space::kArena:
      if (b.index != 0) throw InvalidArgument("NcclProgramFabric: arena index must be 0");
      return s.window(b.rank);
    case Space::kTensor:
    case Space::kOutput: {
      if (b.rank != s.rank) return nullptr;
      const auto& list = b.space == Space::kTensor ? s.tensors : s.outputs;
      if (b.index < 0 || b.index >= static_cast<int>(list.size())) {
        throw InvalidArgument("NcclProgramFabric: rank " + std::to_string(b.rank) + ": " +
                              (b.space == Space::kTensor ? "tensor " : "output ") +
                              std::to_string(b.index) + " is outside [0, " +
                              std::to_string(list.size()) + ")");
      }
      return list[static_cast<std::size_t>(b.index)];
    }
  }
  throw InvalidArgument("NcclProgramFabric: unknown buffer space");
}

std::int64_t NcclProgramFabric::bytes(const Buffer& b) const {
  const State& s = *state_;
  if (pointer(b) == nullptr && b.space != Space::kArena) return 0;
  const program::BufferSizes& sizes = s.program->buffers[static_cast<std::size_t>(b.rank)];
  switch (b.space) {
    case Space::kArena:
      return sizes.arena_bytes;
    case Space::kTensor:
      return sizes.tensor_bytes[static_cast<std::size_t>(b.index)];
    case Space::kOutput:
      return sizes.output_bytes[static_cast<std::size_t>(b.index)];
  }
  return 0;
}

std::uint64_t* NcclProgramFabric::signals(int owner) const {
  if (owner < 0 || owner >= state_->program->ranks) return nullptr;
  std::byte* base = state_->window(owner);
  return base == nullptr ? nullptr : reinterpret_cast<std::uint64_t*>(base + state_->signal_offset);
}

std::int64_t NcclProgramFabric::signal_words() const {
  return state_->program->counters;
}

void NcclProgramFabric::release() noexcept {
  state_->released = true;
  state_->nccl->release();
}

bool NcclProgramFabric::load_store(int from, int to) const {
  return state_->load_store(from, to);
}

void NcclProgramFabric::send(const void* data, std::size_t bytes, int peer, cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = state_->options.message_comm ? state_->options.message_comm : f.main_comm();
  f.settle(ncclSend(data, bytes, ncclUint8, peer, comm, stream), "ncclSend (message)");
}

void NcclProgramFabric::recv(void* data, std::size_t bytes, int peer, cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = state_->options.message_comm ? state_->options.message_comm : f.main_comm();
  f.settle(ncclRecv(data, bytes, ncclUint8, peer, comm, stream), "ncclRecv (message)");
}

std::int64_t NcclProgramFabric::signal_offset() const {
  return state_->signal_offset;
}

std::int64_t NcclProgramFabric::tensor_bytes() const {
  return state_->malloc_bytes;
}

}  // namespace tide::fabric
