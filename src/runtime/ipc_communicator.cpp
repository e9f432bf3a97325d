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

namespace tide::runtime::detail {
namespace {

class IpcWindows final : public CudaWindows {
 public:
  explicit IpcWindows(std::unique_ptr<fabric::IpcFabric> ipc) : ipc_(std::move(ipc)) {}
  fabric::Fabric& fabric() override { return *ipc_; }
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
  std::int64_t allocation_bytes(std::int64_t window_bytes) const override {
    return fabric::ipc_allocation_bytes(window_bytes, device_);
  }

  std::unique_ptr<CudaWindows> open_windows(std::int64_t window_bytes, void* provided) override {
    (void)window_bytes;  // the fabric lays out the same window (NOTE [runtime window])
    fabric::IpcFabricOptions o;
    o.device = device_;
    o.arena_bytes = arena_bytes_;
    o.signal_words = signal_words_;
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
