// The nccl backend: the runtime's window is one NCCL symmetric window per rank (NOTE [nccl
// window fabric]), peers addressed through LSA pointers; everything else is the GPU backends'
// communicator (cuda_communicator.hpp). Built only with CUDA and NCCL (TIDE_RUNTIME_NCCL).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends.hpp"
#include "cuda_communicator.hpp"
#include "tide/fabric/nccl_fabric.hpp"
#include "tide/fabric/nccl_window_fabric.hpp"

namespace tide::runtime::detail {
namespace {

// The window's options: one machine (every rank an LSA peer), `hosts` its emulated hosts.
fabric::NcclWindowOptions window_options(std::vector<int> hosts) {
  fabric::NcclWindowOptions o;
  o.hosts = std::move(hosts);
  return o;
}

class NcclWindows final : public CudaWindows {
 public:
  NcclWindows(std::unique_ptr<fabric::NcclFabric> nccl, std::int64_t arena_bytes,
              std::int64_t signal_words, std::vector<int> hosts)
      : nccl_(std::move(nccl)),
        window_(std::make_unique<fabric::NcclWindowFabric>(*nccl_, arena_bytes, signal_words,
                                                           window_options(std::move(hosts)))) {}
  ~NcclWindows() override {
    window_.reset();  // before the communicators it views
    nccl_.reset();
  }
  fabric::Fabric& fabric() override { return *window_; }
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
  // NOTE [runtime] 9: emulated hosts on one machine (nodes_as_hosts) send their rail traffic as
  // ncclSend / ncclRecv on a communicator per lane (NOTE [nccl window fabric]); real hosts are
  // refused: the runner needs every rank's abort word load/store reachable (NOTE [CUDA call
  // sequences] 5), which ranks on other hosts are not.
  std::string no_rail_messages(int hosts) const override {
    if (options_.emulation.nodes_as_hosts) return {};
    return "the ranks are on " + std::to_string(hosts) +
           " hosts, and the nccl backend serves the ranks of one host (the sequence runner "
           "cannot read the abort words of ranks on other hosts yet)";
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
    fabric::NcclFabricOptions o;
    o.device = device_;
    o.nodes = 1;  // one host: every rank an LSA peer (NOTE [nccl window fabric])
    o.gpus_per_node = options_.world;
    std::vector<int> emulated;  // NOTE [runtime] 9: nodes as hosts, messages on lanes
    if (options_.emulation.nodes_as_hosts && options_.world > options_.gpus_per_node) {
      o.message_lanes = 2;
      for (int r = 0; r < options_.world; ++r)
        emulated.push_back(r / options_.gpus_per_node);
    }
    o.arena_bytes = window_bytes;
    o.external_arena = provided;  // nullptr: its own
    o.timeout = options_.timeout;
    return std::make_unique<NcclWindows>(
        std::make_unique<fabric::NcclFabric>(options_.rank, options_.world, id, o), arena_bytes_,
        signal_words_, std::move(emulated));
  }
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const CommunicatorOptions& options) {
  return std::make_unique<NcclCommunicator>(options);
}

}  // namespace tide::runtime::detail
