// The ipc backend: the runtime's window of each rank is memory the other processes of the host
// map through CUDA IPC (NOTE [ipc fabric]); ranks may share a GPU, and no NCCL is needed.
// Everything else is the GPU backends' communicator (cuda_communicator.hpp). Built with CUDA
// (TIDE_RUNTIME_CUDA).
#include <memory>
#include <string>
#include <vector>

#include "backends.hpp"
#include "cuda_communicator.hpp"
#include "tide/fabric/ipc_fabric.hpp"
#include "tide/fabric/ipc_memory.hpp"
#include "tide/transport/ipc_rendezvous.hpp"

namespace tide::runtime::detail {
namespace {

class IpcWindows final : public CudaWindows {
 public:
  explicit IpcWindows(std::unique_ptr<fabric::IpcFabric> ipc) : ipc_(std::move(ipc)) {}
  fabric::Fabric& fabric() override { return *ipc_; }
  transport::MessageTransports transports(int lane) override {
    return transport::ipc_transports(*ipc_, lane);
  }
  std::byte* window() const override { return ipc_->window(); }
  std::int64_t bytes() const override { return ipc_->window_bytes(); }
  void release() noexcept override {
    ipc_->release();
    static_cast<void>(ipc_.release());
  }

 private:
  std::unique_ptr<fabric::IpcFabric> ipc_;
};

class IpcCommunicator final : public CudaCommunicator {
 public:
  using CudaCommunicator::CudaCommunicator;

 private:
  // NOTE [runtime] 9: the ranks' windows are mapped through CUDA IPC, so every rank is on one
  // machine; emulated hosts (nodes_as_hosts) reach each other by messages through the ipc
  // rendezvous transport (NOTE [ipc fabric]), real ones cannot map each other.
  std::string no_rail_messages(int hosts) const override {
    if (options_.emulation.nodes_as_hosts) return {};
    return "the ranks are on " + std::to_string(hosts) +
           " hosts, and the ipc backend maps the windows of the processes of one host (use the "
           "nccl backend across hosts)";
  }

  // The fabric's options; over emulated hosts each node is a host of its own (the same
  // indices as the gathered host ids give, NOTE [runtime] 9), so the window gets a message
  // area whatever the order of registration and arena_request().
  fabric::IpcFabricOptions fabric_options() const {
    fabric::IpcFabricOptions o;
    o.device = device_;
    o.arena_bytes = arena_bytes_;
    o.signal_words = signal_words_;
    if (options_.emulation.nodes_as_hosts) {
      for (int r = 0; r < options_.world; ++r)
        o.hosts.push_back(r / options_.gpus_per_node);
    }
    return o;
  }

  std::int64_t allocation_bytes(std::int64_t window_bytes) const override {
    (void)window_bytes;  // the fabric's window (NOTE [runtime window]), message area included
    return fabric::ipc_allocation_bytes(fabric::ipc_window_bytes(fabric_options(), options_.world),
                                        device_);
  }

  std::unique_ptr<CudaWindows> open_windows(std::int64_t window_bytes, void* provided) override {
    (void)window_bytes;  // the fabric lays out the same window (NOTE [runtime window])
    fabric::IpcFabricOptions o = fabric_options();
    o.window = provided;  // nullptr: its own
    const auto exchange = [this](const std::string& step, const std::string& mine) {
      return all_gather_values(store(), options_.key_prefix + "/ipc/" + step, options_.rank,
                               options_.world, mine, options_.timeout);
    };
    return std::make_unique<IpcWindows>(
        std::make_unique<fabric::IpcFabric>(options_.rank, options_.world, o, exchange));
  }
};

}  // namespace

std::unique_ptr<Communicator> make_ipc_communicator(const CommunicatorOptions& options) {
  return std::make_unique<IpcCommunicator>(options);
}

}  // namespace tide::runtime::detail
