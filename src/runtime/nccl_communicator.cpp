// The nccl backend's communicator: one process per GPU on one host. The arena is one NCCL
// symmetric window per rank (NOTE [nccl window fabric]); each group's all-gather and
// reduce-scatter sequences run on the CUDA sequence runner (NOTE [CUDA call sequences]),
// enqueued on the caller's stream with no host synchronisation.
// Built only with CUDA and NCCL (TIDE_RUNTIME_NCCL).
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "backends.hpp"
#include "communicator_base.hpp"
#include "tide/core/env.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/cuda_sequence.hpp"
#include "tide/fabric/device_capabilities.hpp"
#include "tide/fabric/nccl_fabric.hpp"
#include "tide/fabric/nccl_window_fabric.hpp"
#include "tide/kernels/cuda_check.hpp"

namespace tide::runtime::detail {
namespace {

class NcclCommunicator final : public CommunicatorBase {
 public:
  explicit NcclCommunicator(const CommunicatorOptions& options) : CommunicatorBase(options) {
    device_ = options.device;
    if (device_ < 0) TIDE_CUDA_CHECK(cudaGetDevice(&device_));
    TIDE_CUDA_CHECK(cudaSetDevice(device_));
    caps_ = fabric::device_capabilities(device_);
  }

  ~NcclCommunicator() override {
    // Runners first (their streams and events), then the window, then the communicators.
    if (committed()) (void)cudaDeviceSynchronize();
    runners_.clear();
    window_.reset();
    nccl_.reset();
  }

  void all_gather(int group, std::uintptr_t stream, std::span<const void* const> shards) override {
    Group& g = group_at(group);
    check_all_gather(g, shards.size());
    commit();
    check_alive();
    const auto caller = reinterpret_cast<cudaStream_t>(stream);
    std::vector<exec::CudaCallBindings> bindings(static_cast<std::size_t>(options_.world));
    exec::CudaCallBindings& mine = bindings[static_cast<std::size_t>(options_.rank)];
    if (g.spec.cast) {
      mine.tensors.assign(shards.begin(), shards.end());
    } else {
      for (std::size_t p = 0; p < shards.size(); ++p) {  // copy-in: a local copy of S bytes
        const ParamLayout& pl = g.layout.param(static_cast<int>(p));
        TIDE_CUDA_CHECK(cudaMemcpyAsync(g.info.resident + pl.offset, shards[p],
                                        static_cast<std::size_t>(pl.shard_bytes),
                                        cudaMemcpyDeviceToDevice, caller));
      }
    }
    runner(group, 0).enqueue(bindings, 1.0f, false, caller);
    ++g.stats.all_gathers;
    g.stats.copy_bytes_avoided += all_gather_copy_bytes(g.layout);
  }

  void reduce_scatter(int group, std::uintptr_t stream, std::span<const void* const> grads,
                      float* out, float alpha, bool accumulate) override {
    Group& g = group_at(group);
    check_reduce_scatter(g, grads.size(), out);
    commit();
    check_alive();
    std::vector<exec::CudaCallBindings> bindings(static_cast<std::size_t>(options_.world));
    exec::CudaCallBindings& mine = bindings[static_cast<std::size_t>(options_.rank)];
    mine.tensors.assign(grads.begin(), grads.end());
    mine.output = out;
    runner(group, 1).enqueue(bindings, alpha, accumulate, reinterpret_cast<cudaStream_t>(stream));
    ++g.stats.reduce_scatters;
    g.stats.copy_bytes_avoided += reduce_scatter_copy_bytes(g.layout);
  }

  std::int64_t arena_bytes() const override { return nccl_ ? nccl_->arena_bytes() : 0; }

  void abort(const std::string& reason) override { aborted_ = reason; }

 protected:
  RankCapabilities capabilities() const override { return caps_; }
  bool host_transport() const override { return false; }

  void commit() const override {
    if (committed()) return;
    TIDE_CUDA_CHECK(cudaSetDevice(device_));
    // The unique id travels through the store, as torch's NCCL process groups do theirs.
    const std::string key = options_.key_prefix + "/nccl/unique_id";
    std::vector<std::byte> id;
    if (options_.rank == 0) {
      id = fabric::NcclFabric::make_unique_id();
      options_.store->set(key, std::string(reinterpret_cast<const char*>(id.data()), id.size()));
    } else {
      const std::string bytes = options_.store->get(key, options_.timeout);
      id.assign(reinterpret_cast<const std::byte*>(bytes.data()),
                reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size());
    }
    fabric::NcclFabricOptions o;
    o.device = device_;
    o.nodes = 1;  // one host: every rank an LSA peer (NOTE [nccl window fabric])
    o.gpus_per_node = options_.world;
    o.arena_bytes = fabric::NcclWindowFabric::required_window_bytes(regions_bytes_, signal_words_);
    o.timeout = options_.timeout;
    nccl_ = std::make_unique<fabric::NcclFabric>(options_.rank, options_.world, id, o);
    window_ = std::make_unique<fabric::NcclWindowFabric>(*nccl_, regions_bytes_, signal_words_);
    exec::CudaSequenceOptions runner_options;
    runner_options.replay_graphs = !env::flag("TIDE_NO_GRAPH_REPLAY");
    for (auto& g : groups_) {
      runners_.push_back(std::make_unique<exec::CudaSequenceRunner>(
          g->all_gathers.sequence, *window_,
          exec::CudaSequencePlace{g->region_offset, g->all_gathers.first_counter}, runner_options));
      runners_.push_back(std::make_unique<exec::CudaSequenceRunner>(
          g->reduce_scatters.sequence, *window_,
          exec::CudaSequencePlace{g->region_offset, g->reduce_scatters.first_counter},
          runner_options));
      std::byte* region = static_cast<std::byte*>(nccl_->arena()) + g->region_offset;
      g->info.landing = region + g->ag_areas.landing;
      g->info.resident = g->spec.cast ? nullptr : region + g->ag_areas.resident;
    }
    // Every runner zeroed its rank's signal words; no rank may signal a peer before that.
    all_gather_values(*options_.store, options_.key_prefix + "/nccl/ready", options_.rank,
                      options_.world, "1", options_.timeout);
    mark_committed();
  }

 private:
  exec::CudaSequenceRunner& runner(int group, int collective) {
    return *runners_[static_cast<std::size_t>(2 * group + collective)];
  }
  void check_alive() const {
    if (!aborted_.empty()) {
      throw CommunicationError("rank " + std::to_string(options_.rank) +
                               ": communicator aborted: " + aborted_);
    }
  }

  int device_ = 0;
  RankCapabilities caps_;
  std::string aborted_;
  mutable std::unique_ptr<fabric::NcclFabric> nccl_;
  mutable std::unique_ptr<fabric::NcclWindowFabric> window_;
  mutable std::vector<std::unique_ptr<exec::CudaSequenceRunner>> runners_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const CommunicatorOptions& options) {
  return std::make_unique<NcclCommunicator>(options);
}

}  // namespace tide::runtime::detail
