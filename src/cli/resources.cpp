#include "resources.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

#include "tide/core/error.hpp"

namespace tide::cli {
namespace {

// The reference executor's state per op (the op itself, its schedule entry, vector clocks
// and timing record), measured on `tide simulate step` runs with data: about 1 KB.
constexpr double kBytesPerOp = 1024;
// Ops the reference executor completes in about ten minutes on one core (it runs about
// 0.2-0.5 M ops per second with data).
constexpr double kMaxOps = 1.2e8;

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 8e9;  // unknown: assume a small machine
  return static_cast<double>(pages) * static_cast<double>(page);
}

}  // namespace

double ResourceEstimate::bytes() const {
  return ops * kBytesPerOp + buffer_bytes + host_bytes;
}

ResourceEstimate& operator+=(ResourceEstimate& total, const ResourceEstimate& call) {
  total.ops += call.ops;
  total.buffer_bytes += call.buffer_bytes;
  total.host_bytes += call.host_bytes;
  return total;
}

// Upper estimates of the ops the builders emit (fitted to their counts on small topologies):
// TIDE-RS issues per rank, per destination node, pass and staging chunk, its pushes to the
// L - 1 owners and a sum, put and signals; TIDE-AG a few ops per round and per slot group;
// stock FSDP2's rings N - 1 steps per rank and channel (about 4 N^2 L ops per call).
ResourceEstimate estimate_reduce_scatter(const RsPlan& plan, bool data, bool baseline) {
  const GroupLayout& layout = plan.layout();
  const Topology& topo = layout.topology();
  const double world = topo.world();
  const double m = topo.nodes(), l = topo.gpus_per_node();
  double grad_elems = 0;
  for (const ParamLayout& pl : layout.params())
    grad_elems += static_cast<double>(pl.rows) * static_cast<double>(pl.cols);
  const double shard = static_cast<double>(layout.shard_elems());
  ResourceEstimate e;
  if (baseline) {
    e.ops = 4 * world * world * l + world * 16;
  } else {
    const double chunks = plan.chunk_elems() > 0
                              ? std::ceil(static_cast<double>(plan.pass_elems()) /
                                          static_cast<double>(plan.chunk_elems()))
                              : 1;
    e.ops = world * (m * plan.passes() * chunks * (3 * l + 8) + 32);
  }
  if (!data) return e;
  const double arena = baseline ? static_cast<double>(layout.pack_buffer_bytes())
                                : static_cast<double>(plan.memory().total());
  e.buffer_bytes =
      world *
      (arena + grad_elems * static_cast<double>(item_bytes(layout.grad_dtype())) + 4 * shard);
  e.host_bytes = world * (4 * grad_elems + 24 * shard);  // inputs, and two references
  return e;
}

ResourceEstimate estimate_all_gather(const AgPlan& plan, bool data, bool baseline) {
  const GroupLayout& layout = plan.layout();
  const Topology& topo = layout.topology();
  const double world = topo.world();
  const double l = topo.gpus_per_node();
  ResourceEstimate e;
  if (baseline) {
    e.ops = 4 * world * world * l + world * 16;
  } else {
    e.ops = world * (8 * static_cast<double>(plan.rounds().size()) +
                     (static_cast<double>(plan.slot_groups().size()) + 2) * (l + 4) + 16);
  }
  if (!data) return e;
  const double shard = static_cast<double>(layout.shard_bytes());
  const double unsharded = static_cast<double>(layout.unsharded_bytes());
  const double stage = static_cast<double>(plan.stage_bytes());
  e.buffer_bytes = world * (shard + stage + 2 * unsharded + 2 * shard);
  e.host_bytes = world * 4 * shard;  // shards, fp32 masters
  return e;
}

void require_fits(const ResourceEstimate& estimate, const std::string& what,
                  const std::string& instead) {
  const double budget = physical_memory_bytes() / 2;
  if (estimate.bytes() > budget) {
    throw Unsupported(fmt::format(
        "{} needs about {:.1f} GB of memory ({:.1f} M ops, {:.1f} GB of buffers), more than "
        "half of this machine's {:.1f} GB; {}",
        what, estimate.bytes() / 1e9, estimate.ops / 1e6,
        (estimate.buffer_bytes + estimate.host_bytes) / 1e9, 2 * budget / 1e9, instead));
  }
  if (estimate.ops > kMaxOps) {
    throw Unsupported(
        fmt::format("{} is about {:.0f} M ops, more than the {:.0f} M the simulator "
                    "runs in about ten minutes; {}",
                    what, estimate.ops / 1e6, kMaxOps / 1e6, instead));
  }
}

}  // namespace tide::cli
