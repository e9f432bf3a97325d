// The nccl backend: the runtime's window is one NCCL symmetric window per rank (NOTE [nccl
// window fabric]), peers addressed through LSA pointers; everything else is the GPU backends'
// communicator (cuda_communicator.hpp). Built only with CUDA and NCCL (TIDE_RUNTIME_NCCL).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends.hpp"
#include "cuda_communicator.hpp"
#include "nccl_layout.hpp"
#include "tide/core/error.hpp"
#include "tide/fabric/nccl_fabric.hpp"
#include "tide/fabric/nccl_window_fabric.hpp"
#include "tide/transport/nccl_transports.hpp"

namespace tide::runtime::detail {
namespace {

// The window's options (NOTE [runtime] 9): the layout's hosts, one_host only for one host.
fabric::NcclWindowOptions window_options(const NcclLayout& layout) {
  fabric::NcclWindowOptions o;
  o.hosts = layout.hosts;
  o.one_host = layout.one_host;
  return o;
}

class NcclWindows final : public CudaWindows {
 public:
  NcclWindows(std::unique_ptr<fabric::NcclFabric> nccl, std::int64_t arena_bytes,
              std::int64_t signal_words, const NcclLayout& layout)
      : nccl_(std::move(nccl)),
        window_(std::make_unique<fabric::NcclWindowFabric>(*nccl_, arena_bytes, signal_words,
                                                           window_options(layout))) {}
  ~NcclWindows() override {
    window_.reset();  // before the communicators it views
    nccl_.reset();
  }
  fabric::Fabric& fabric() override { return *window_; }
  transport::MessageTransports transports(int lane) override {
    return transport::nccl_transports(*window_, lane);
  }
  std::byte* window() const override { return static_cast<std::byte*>(nccl_->arena()); }
  std::int64_t bytes() const override { return nccl_->arena_bytes(); }
  void abort() noexcept override { nccl_->abort(); }
  void release() noexcept override {
    window_->release();
    static_cast<void>(window_.release());
    static_cast<void>(nccl_.release());
  }

 private:
  std::unique_ptr<fabric::NcclFabric> nccl_;
  std::unique_ptr<fabric::NcclWindowFabric> window_;
};

class NcclCommunicator final : public CudaCommunicator {
 public:
  using CudaCommunicator::CudaCommunicator;

 private:
  // NOTE [runtime] 9: hosts, real or emulated (nodes_as_hosts), send their rail traffic as
  // ncclSend / ncclRecv on a communicator per lane (NOTE [nccl window fabric]); the abort state
  // of ranks on other hosts travels with those messages (NOTE [abort relay]). Refused only
  // where the layout cannot be formed (nccl_layout.hpp).
  std::string no_rail_messages(int /*hosts*/) const override { return layout().refusal; }

  NcclLayout layout() const {
    const std::vector<int> one(static_cast<std::size_t>(options_.world), 0);  // none gathered
    return nccl_layout(hosts().empty() ? one : hosts(), options_.gpus_per_node,
                       options_.emulation.nodes_as_hosts);
  }

  std::int64_t allocation_bytes(std::int64_t window_bytes) const override {
    return fabric::NcclFabric::rounded_arena_bytes(window_bytes);
  }

  std::unique_ptr<CudaWindows> open_windows(std::int64_t window_bytes, void* provided) override {
    // The unique id travels through the store, as torch's NCCL process groups do theirs.
    const std::string key = options_.key_prefix + "/nccl/unique_id";
    std::vector<std::byte> id;
    if (options_.rank == 0) {
      id = fabric::NcclFabric::make_unique_id();
      store().set(key, std::string(reinterpret_cast<const char*>(id.data()), id.size()));
    } else {
      const std::string bytes = store().get(key, options_.timeout);
      id.assign(reinterpret_cast<const std::byte*>(bytes.data()),
                reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size());
    }
    const NcclLayout layout = this->layout();
    if (!layout.refusal.empty()) throw InternalError("nccl backend: " + layout.refusal);
    fabric::NcclFabricOptions o;
    o.device = device_;
    o.nodes = layout.nodes;  // NOTE [runtime] 9: hosts x ranks per host
    o.gpus_per_node = layout.gpus_per_node;
    o.virtual_nodes = layout.virtual_nodes;
    o.message_lanes = layout.message_lanes;
    o.arena_bytes = window_bytes;
    o.external_arena = provided;  // nullptr: its own
    o.timeout = options_.timeout;
    return std::make_unique<NcclWindows>(
        std::make_unique<fabric::NcclFabric>(options_.rank, options_.world, id, o), arena_bytes_,
        signal_words_, layout);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const CommunicatorOptions& options) {
  return std::make_unique<NcclCommunicator>(options);
}

}  // namespace tide::runtime::detail
