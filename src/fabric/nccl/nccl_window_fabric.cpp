// The one NCCL fabric for the executor: NOTE [nccl window fabric] in docs/nccl_fabric.md.
#include "tide/fabric/nccl_window_fabric.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "nccl_rma.hpp"
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

void NcclWindowFabric::send(const void* data, std::size_t bytes, int peer, cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = state_->options.message_comm ? state_->options.message_comm : f.main_comm();
  f.settle(comm, ncclSend(data, bytes, ncclUint8, peer, comm, stream), "ncclSend (message)");
}

void NcclWindowFabric::recv(void* data, std::size_t bytes, int peer, cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = state_->options.message_comm ? state_->options.message_comm : f.main_comm();
  f.settle(comm, ncclRecv(data, bytes, ncclUint8, peer, comm, stream), "ncclRecv (message)");
}

// NOTE [nccl fabric] 2b: world ranks are the lane communicator's ranks (color 0, key rank).
void NcclWindowFabric::send_on_lane(const void* data, std::size_t bytes, int peer, int lane,
                                    cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = f.message_comm(lane);
  if (comm == nullptr) return send(data, bytes, peer, stream);
  f.settle(comm, ncclSend(data, bytes, ncclUint8, peer, comm, stream), "ncclSend (message)");
}

void NcclWindowFabric::recv_on_lane(void* data, std::size_t bytes, int peer, int lane,
                                    cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = f.message_comm(lane);
  if (comm == nullptr) return recv(data, bytes, peer, stream);
  f.settle(comm, ncclRecv(data, bytes, ncclUint8, peer, comm, stream), "ncclRecv (message)");
}

bool NcclWindowFabric::one_sided() const {
  return state_->nccl->host_rma();
}

std::string NcclWindowFabric::one_sided_reason() const {
  return state_->nccl->host_rma_reason();
}

namespace {

// The lane's communicator with its one-sided windows (NOTE [nccl fabric] 5), or a throw.
ncclComm_t rma_comm(const NcclFabric& f, int lane) {
  ncclComm_t comm = f.message_comm(lane);
  if (!f.host_rma() || comm == nullptr || f.lane_window(lane) == nullptr) {
    throw Unsupported("NcclWindowFabric: no one-sided messages on lane " + std::to_string(lane) +
                      " (" + (f.host_rma() ? "the fabric has no such lane" : f.host_rma_reason()) +
                      "); carry them two-sided");
  }
  return comm;
}

// NOTE [nccl fabric] 5: a lane's token area holds world() receive rings (one per sender),
// then world() send rings (one per receiver), kTokenRing words each.
std::size_t token_offset(int sender, std::uint64_t number) {
  return (static_cast<std::size_t>(sender) * NcclFabric::kTokenRing +
          static_cast<std::size_t>(number % NcclFabric::kTokenRing)) *
         sizeof(std::uint64_t);
}
std::size_t send_token_offset(int world, int receiver, std::uint64_t number) {
  return token_offset(world + receiver, number);
}

}  // namespace

void NcclWindowFabric::put_signal(const void* data, std::size_t bytes, int peer,
                                  std::int64_t window_offset, int lane, cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = rma_comm(f, lane);
  if (window_offset < 0 || window_offset > f.arena_bytes() ||
      bytes > static_cast<std::size_t>(f.arena_bytes() - window_offset)) {
    throw InvalidArgument("NcclWindowFabric: a one-sided put of " + std::to_string(bytes) +
                          " bytes at offset " + std::to_string(window_offset) +
                          " leaves the window of " + std::to_string(f.arena_bytes()) + " bytes");
  }
  // NOTE [one-sided messages] (iv): NCCL puts only from a symmetric window, the arena here.
  const auto* arena = static_cast<const std::byte*>(f.arena());
  const auto* source = static_cast<const std::byte*>(data);
  if (source < arena || source > arena + f.arena_bytes() ||
      bytes > static_cast<std::size_t>(arena + f.arena_bytes() - source)) {
    throw InvalidArgument("NcclWindowFabric: a one-sided put of " + std::to_string(bytes) +
                          " bytes reads outside this rank's arena; ncclPutSignal puts only "
                          "from a registered window, so carry the message two-sided");
  }
  f.settle(comm,
           rma::put_signal(data, bytes, peer, f.lane_window(lane),
                           static_cast<std::size_t>(window_offset), 0, comm, stream),
           "ncclPutSignal (message)");
}

void NcclWindowFabric::put_token(const std::uint64_t* token, int peer, std::uint64_t number,
                                 int lane, cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = rma_comm(f, lane);
  if (token != token_source(peer, number, lane)) {
    throw InvalidArgument(
        "NcclWindowFabric: a token put from outside its send slot; write it "
        "at token_source(peer, number, lane), inside the token window");
  }
  f.settle(comm,
           rma::put_signal(token, sizeof(std::uint64_t), peer, f.lane_token_window(lane),
                           token_offset(state_->rank, number), 0, comm, stream),
           "ncclPutSignal (abort token)");
}

void NcclWindowFabric::signal(int peer, int lane, cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = rma_comm(f, lane);
  f.settle(comm, rma::signal(peer, 0, comm, stream), "ncclSignal (message)");
}

void NcclWindowFabric::wait_signals(int peer, int count, int lane, cudaStream_t stream) {
  NcclFabric& f = *state_->nccl;
  ncclComm_t comm = rma_comm(f, lane);
  const rma::SignalCount wait{peer, 0, count};
  f.settle(comm, rma::wait_signals({&wait, 1}, comm, stream), "ncclWaitSignal (message)");
}

std::uint64_t NcclWindowFabric::next_token_number(int peer, int lane, bool sending) {
  return state_->nccl->next_token_number(peer, lane, sending);
}

std::uint64_t* NcclWindowFabric::token_source(int peer, std::uint64_t number, int lane) {
  NcclFabric& f = *state_->nccl;
  (void)rma_comm(f, lane);
  return f.token_area(lane) + send_token_offset(f.world(), peer, number) / sizeof(std::uint64_t);
}

const std::uint64_t* NcclWindowFabric::token_slot(int peer, std::uint64_t number, int lane) const {
  const NcclFabric& f = *state_->nccl;
  (void)rma_comm(f, lane);
  return f.token_area(lane) + token_offset(peer, number) / sizeof(std::uint64_t);
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
