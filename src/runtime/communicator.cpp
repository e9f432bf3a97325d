// The runtime's communicator: registration with the capability agreement, the arena, and
// calls on the host backend (NOTE [runtime]).
#include "tide/runtime/communicator.hpp"

#include <unistd.h>

#include <cstring>
#include <functional>
#include <optional>

#include "group.hpp"
#include "tide/core/capability.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/host_executor.hpp"
#include "tide/fabric/host_fabric.hpp"

namespace tide::runtime {
namespace {

using detail::Group;

std::uint64_t host_id() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return std::hash<std::string>{}(name);
}

class HostCommunicator final : public Communicator {
 public:
  explicit HostCommunicator(const CommunicatorOptions& options)
      : options_(options),
        topology_(options.world / options.gpus_per_node, options.gpus_per_node) {}

  Registration register_group(const GroupSpec& spec) override {
    const int index = registrations_++;
    const std::string key = options_.key_prefix + "/group/" + std::to_string(index);
    RankDescription d;
    d.rank = options_.rank;
    d.world = options_.world;
    d.host_id = host_id();
    GroupSignature& g = d.group;
    g.name = spec.name;
    g.nodes = topology_.nodes();
    g.gpus_per_node = topology_.gpus_per_node();
    g.virtual_nodes = true;  // one host: every rank must share it
    g.params = spec.params;
    g.ag_dtype = spec.ag_dtype;
    g.grad_dtype = spec.grad_dtype;
    g.rs = rs_options_;
    g.rs.mode = spec.mode;
    g.ag.mixed_precision_cast = spec.cast;
    g.host_transport = true;
    Decision decision;
    try {
      const std::vector<std::string> blobs = all_gather_values(
          *options_.store, key, options_.rank, options_.world, serialize(d), options_.timeout);
      decision = agree_serialized(blobs);
    } catch (const InconsistentGroup& e) {
      return Registration{-1, e.what()};
    } catch (const InvalidArgument& e) {
      return Registration{-1, std::string("the group cannot be described: ") + e.what()};
    }
    if (decision.backend != Backend::kTide) return Registration{-1, decision.reason};
    if (fabric_) {
      return Registration{-1,
                          "registered after the communicator's first call; register every "
                          "group before the first all-gather or reduce-scatter"};
    }
    try {
      auto group = detail::make_group(spec, topology_, rs_options_, next_region_, next_counter_);
      next_region_ += group->region_bytes;
      next_counter_ += detail::sequence_counters(*group);
      groups_.push_back(std::move(group));
    } catch (const Unsupported& e) {
      return Registration{-1, e.what()};
    } catch (const InvalidArgument& e) {
      return Registration{-1, e.what()};
    }
    return Registration{static_cast<int>(groups_.size()) - 1, {}};
  }

  const GroupInfo& info(int group) const override {
    Group& g = group_at(group);
    commit();
    return g.info;
  }

  GroupStats stats(int group) const override { return group_at(group).stats; }

  void all_gather(int group, std::uintptr_t, std::span<const void* const> shards) override {
    Group& g = group_at(group);
    commit();
    exec::HostCallBindings bindings;
    const int params = g.layout.param_count();
    if (g.spec.cast) {
      if (static_cast<int>(shards.size()) != params) {
        throw InvalidArgument("all_gather of group '" + g.spec.name +
                              "': " + std::to_string(shards.size()) + " shard pointers for " +
                              std::to_string(params) +
                              " parameters (a cast group reads every fp32 master shard)");
      }
      for (const void* s : shards)
        bindings.tensors.push_back(static_cast<std::byte*>(const_cast<void*>(s)));
    } else if (!shards.empty()) {
      if (static_cast<int>(shards.size()) != params) {
        throw InvalidArgument("all_gather of group '" + g.spec.name +
                              "': " + std::to_string(shards.size()) + " shard pointers for " +
                              std::to_string(params) + " parameters (pass none or all)");
      }
      for (int p = 0; p < params; ++p) {
        const ParamLayout& pl = g.layout.param(p);
        std::memcpy(g.info.resident + pl.offset, shards[static_cast<std::size_t>(p)],
                    static_cast<std::size_t>(pl.shard_bytes));
      }
    }
    run(g, g.all_gathers, bindings, 0, "all_gather");
    ++g.stats.all_gathers;
    g.stats.copy_bytes_avoided += detail::all_gather_copy_bytes(g.layout);
  }

  void reduce_scatter(int group, std::uintptr_t, std::span<const void* const> grads, float* out,
                      float alpha, bool accumulate) override {
    Group& g = group_at(group);
    commit();
    const int params = g.layout.param_count();
    if (static_cast<int>(grads.size()) != params) {
      throw InvalidArgument("reduce_scatter of group '" + g.spec.name +
                            "': " + std::to_string(grads.size()) + " gradient pointers for " +
                            std::to_string(params) + " parameters");
    }
    if (out == nullptr) {
      throw InvalidArgument("reduce_scatter of group '" + g.spec.name + "': no output shard");
    }
    exec::HostCallBindings bindings;
    for (const void* p : grads)
      bindings.tensors.push_back(static_cast<std::byte*>(const_cast<void*>(p)));
    bindings.output = reinterpret_cast<std::byte*>(out);
    bindings.alpha = alpha;
    bindings.accumulate = accumulate;
    run(g, g.reduce_scatters, bindings, 1, "reduce_scatter");
    ++g.stats.reduce_scatters;
    g.stats.copy_bytes_avoided += detail::reduce_scatter_copy_bytes(g.layout);
  }

  std::int64_t arena_bytes() const override { return fabric_ ? fabric_->arena_bytes() : 0; }
  int rank() const override { return options_.rank; }
  int world() const override { return options_.world; }

  void abort(const std::string& reason) override {
    commit();
    fabric_->abort("rank " + std::to_string(options_.rank) + " aborted: " + reason);
  }

 private:
  Group& group_at(int group) const {
    if (group < 0 || group >= static_cast<int>(groups_.size())) {
      throw InvalidArgument("group id " + std::to_string(group) + " was not registered (" +
                            std::to_string(groups_.size()) + " groups)");
    }
    return *groups_[static_cast<std::size_t>(group)];
  }

  // NOTE [runtime] 3: the arena, once, at the first use; collective.
  void commit() const {
    if (fabric_) return;
    fabric::HostFabricOptions o;
    o.rank = options_.rank;
    o.world = options_.world;
    o.arena_bytes = next_region_;
    o.counters = next_counter_;
    o.key_prefix = options_.key_prefix;
    o.timeout = options_.timeout;
    fabric_ = std::make_unique<fabric::HostFabric>(*options_.store, o);
    for (auto& g : groups_) {
      g->info.landing = fabric_->arena(options_.rank) + g->region_offset + g->ag_areas.landing;
      g->info.resident =
          g->spec.cast ? nullptr
                       : fabric_->arena(options_.rank) + g->region_offset + g->ag_areas.resident;
    }
  }

  void run(Group& g, detail::SequenceState& s, const exec::HostCallBindings& bindings,
           int collective, const char* name) {
    exec::HostSequencePlace place;
    place.region_offset = g.region_offset;
    place.first_counter = s.first_counter;
    exec::HostCallTag tag;
    tag.index = calls_;
    tag.tag = (g.region_offset << 1) | collective;  // distinct per (group, collective)
    tag.what = std::string(name) + " of group '" + g.spec.name + "'";
    exec::run_host_call(s.next(), *fabric_, place, s.counter_base, bindings, tag,
                        options_.timeout);
    s.advance(options_.rank);
    ++calls_;
  }

  CommunicatorOptions options_;
  Topology topology_;
  RsOptions rs_options_;  // the library's defaults
  int registrations_ = 0;
  std::vector<std::unique_ptr<Group>> groups_;
  std::int64_t next_region_ = 0;
  int next_counter_ = 0;
  std::int64_t calls_ = 0;  // calls of every group so far
  mutable std::unique_ptr<fabric::HostFabric> fabric_;
};

}  // namespace

BackendKind parse_backend(std::string_view text) {
  if (text == "host") return BackendKind::kHost;
  if (text == "nccl") return BackendKind::kNccl;
  throw InvalidArgument("backend '" + std::string(text) + "' is not one of: host, nccl");
}

std::string_view backend_name(BackendKind backend) {
  return backend == BackendKind::kHost ? "host" : "nccl";
}

std::unique_ptr<Communicator> Communicator::create(const CommunicatorOptions& options) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    throw InvalidArgument("rank " + std::to_string(options.rank) + " outside a world of " +
                          std::to_string(options.world));
  }
  if (options.gpus_per_node < 1 || options.world % options.gpus_per_node != 0) {
    throw InvalidArgument("world " + std::to_string(options.world) +
                          " is not a multiple of gpus_per_node " +
                          std::to_string(options.gpus_per_node) + " (TIDE needs M x L ranks)");
  }
  if (!options.store) throw InvalidArgument("a communicator needs a bootstrap store");
  if (options.timeout.count() <= 0) throw InvalidArgument("the timeout must be positive");
  if (options.backend == BackendKind::kNccl) {
    throw Unsupported(
        "the runtime's nccl backend is not built in this version; use the host backend, or "
        "the tide-nccl tool for GPUs");
  }
  return std::make_unique<HostCommunicator>(options);
}

}  // namespace tide::runtime
