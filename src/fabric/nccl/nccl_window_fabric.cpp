// The one NCCL fabric for the executor: NOTE [nccl window fabric] in docs/nccl_fabric.md.
#include "tide/fabric/nccl_window_fabric.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/fabric/runtime_window.hpp"

namespace tide::fabric {

using program::Buffer;
using program::Space;

namespace {

std::int64_t largest_arena(const program::Program& p) {
  std::int64_t largest = 0;
  for (const program::BufferSizes& b : p.buffers)
    largest = std::max(largest, b.arena_bytes);
  return largest;
}

}  // namespace

struct NcclWindowFabric::State {
  NcclFabric* nccl = nullptr;
  NcclWindowOptions options;
  int rank = 0;
  int lsa_size = 1;
  std::int64_t arena_bytes = 0;
  std::int64_t signal_offset = 0;
  std::int64_t signal_words = 0;
  const program::Program* program = nullptr;  // one program's buffers, else null
  std::vector<void*> tensors, outputs;        // this rank's (one program)
  std::int64_t malloc_bytes = 0;
  bool released = false;

  ~State() {
    if (released) return;
    for (auto* list : {&tensors, &outputs})
      for (void* p : *list)
        if (p != nullptr) (void)cudaFree(p);
  }

  bool lsa_peers(int a, int b) const { return a / lsa_size == b / lsa_size; }

  // Rank r's host, real or emulated (NcclWindowOptions::hosts, messages_between_nodes).
  int host_of(int r) const {
    if (!options.hosts.empty()) return options.hosts[static_cast<std::size_t>(r)];
    return options.messages_between_nodes ? r / options.gpus_per_node : 0;
  }

  bool load_store(int from, int to) const {
    if (from == to) return true;
    const int world = nccl->world();
    if (from < 0 || to < 0 || from >= world || to >= world) return false;
    return lsa_peers(from, to) && host_of(from) == host_of(to);
  }

  // This process's address of rank `r`'s window base (nullptr: not an LSA peer).
  std::byte* window(int r) const {
    if (r != rank && !lsa_peers(rank, r)) return nullptr;
    return static_cast<std::byte*>(r == rank ? nccl->arena() : nccl->peer_arena(r));
  }

  void set_up(NcclFabric& f, std::int64_t arena, std::int64_t words, const NcclWindowOptions& o) {
    if (o.messages_between_nodes && (o.gpus_per_node < 1 || f.world() % o.gpus_per_node != 0)) {
      throw InvalidArgument("NcclWindowFabric: messages_between_nodes needs the split's L (" +
                            std::to_string(o.gpus_per_node) + " does not divide " +
                            std::to_string(f.world()) + " ranks)");
    }
    if (!o.hosts.empty() && static_cast<int>(o.hosts.size()) != f.world()) {
      throw InvalidArgument("NcclWindowFabric: " + std::to_string(o.hosts.size()) +
                            " host indices for a world of " + std::to_string(f.world()));
    }
    if (!o.hosts.empty() && f.message_comm(0) == nullptr) {
      throw InvalidArgument(
          "NcclWindowFabric: several hosts (real or emulated) need the NCCL fabric's message "
          "lanes (build it with NcclFabricOptions::message_lanes = 2)");
    }
    const std::int64_t need = required_window_bytes(arena, words);
    if (f.arena_bytes() < need) {
      throw InvalidArgument("NcclWindowFabric: the window holds " +
                            std::to_string(f.arena_bytes()) + " bytes, " + std::to_string(need) +
                            " are needed (arena and signal words); create the NCCL fabric with "
                            "arena_bytes >= " +
                            std::to_string(need));
    }
    nccl = &f;
    options = o;
    rank = f.rank();
    lsa_size = std::max(1, f.view().lsa_size);
    arena_bytes = arena;
    signal_offset = window_signal_offset(arena);
    signal_words = words;
    if (!o.one_host) return;
    for (int r = 0; r < f.world(); ++r) {
      if (window(r) == nullptr) {
        throw Unsupported("rank " + std::to_string(r) + " is not load/store reachable from rank " +
                          std::to_string(rank) +
                          " (another host): the runtime's nccl backend runs the ranks of one "
                          "host for now");
      }
    }
  }
};

std::int64_t NcclWindowFabric::required_window_bytes(std::int64_t arena_bytes,
                                                     std::int64_t signal_words) {
  return window_bytes(arena_bytes, signal_words);
}

std::int64_t NcclWindowFabric::required_window_bytes(const program::Program& program) {
  return window_bytes(largest_arena(program), program.counters);
}

NcclWindowFabric::NcclWindowFabric(NcclFabric& nccl, std::int64_t arena_bytes,
                                   std::int64_t signal_words, const NcclWindowOptions& options)
    : state_(std::make_unique<State>()) {
  state_->set_up(nccl, arena_bytes, signal_words, options);
}

NcclWindowFabric::NcclWindowFabric(NcclFabric& nccl, const program::Program& program,
                                   const NcclWindowOptions& options)
    : state_(std::make_unique<State>()) {
  if (program.ranks != nccl.world() || static_cast<int>(program.buffers.size()) != program.ranks) {
    throw InvalidArgument("NcclWindowFabric: the program has " + std::to_string(program.ranks) +
                          " ranks, the NCCL fabric's world " + std::to_string(nccl.world()) +
                          "; build the program for the launched world");
  }
  State& s = *state_;
  s.set_up(nccl, largest_arena(program), program.counters, options);
  s.program = &program;
  TIDE_CUDA_CHECK(cudaSetDevice(nccl.device()));
  const program::BufferSizes& own = program.buffers[static_cast<std::size_t>(s.rank)];
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

NcclWindowFabric::~NcclWindowFabric() = default;

int NcclWindowFabric::ranks() const {
  return state_->nccl->world();
}

bool NcclWindowFabric::local(int rank) const {
  return rank == state_->rank;
}

int NcclWindowFabric::device() const {
  return state_->nccl->device();
}

void* NcclWindowFabric::pointer(const Buffer& b) const {
  const State& s = *state_;
  if (b.rank < 0 || b.rank >= ranks()) {
    throw InvalidArgument("NcclWindowFabric: buffer rank " + std::to_string(b.rank) +
                          " is outside [0, " + std::to_string(ranks()) + ")");
  }
  if (b.space == Space::kArena) {
    if (b.index != 0) throw InvalidArgument("NcclWindowFabric: arena index must be 0");
    return s.window(b.rank);
  }
  if (s.program == nullptr || b.rank != s.rank) return nullptr;  // the caller's, or a peer's
  const auto& list = b.space == Space::kTensor ? s.tensors : s.outputs;
  if (b.index < 0 || b.index >= static_cast<int>(list.size())) {
    throw InvalidArgument("NcclWindowFabric: rank " + std::to_string(b.rank) + ": " +
                          (b.space == Space::kTensor ? "tensor " : "output ") +
                          std::to_string(b.index) + " is outside [0, " +
                          std::to_string(list.size()) + ")");
  }
  return list[static_cast<std::size_t>(b.index)];
}

std::int64_t NcclWindowFabric::bytes(const Buffer& b) const {
  const State& s = *state_;
  if (s.program == nullptr) return b.space == Space::kArena && pointer(b) ? s.arena_bytes : 0;
  if (b.space != Space::kArena && pointer(b) == nullptr) return 0;
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

std::uint64_t* NcclWindowFabric::signals(int owner) const {
  if (owner < 0 || owner >= ranks()) return nullptr;
  std::byte* base = state_->window(owner);
  return base == nullptr ? nullptr : reinterpret_cast<std::uint64_t*>(base + state_->signal_offset);
}

std::int64_t NcclWindowFabric::signal_words() const {
  return state_->signal_words;
}

bool NcclWindowFabric::load_store(int from, int to) const {
  return state_->load_store(from, to);
}

NcclFabric& NcclWindowFabric::nccl() const {
  return *state_->nccl;
}

ncclComm_t NcclWindowFabric::message_comm() const {
  return state_->options.message_comm ? state_->options.message_comm : state_->nccl->main_comm();
}

void NcclWindowFabric::release() noexcept {
  state_->released = true;
  state_->nccl->release();
}

std::int64_t NcclWindowFabric::signal_offset() const {
  return state_->signal_offset;
}

std::int64_t NcclWindowFabric::tensor_bytes() const {
  return state_->malloc_bytes;
}

}  // namespace tide::fabric
