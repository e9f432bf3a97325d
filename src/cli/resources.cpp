#include "resources.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <iostream>

#include "tide/core/error.hpp"

namespace tide::cli {
namespace {

// The reference executor's state per op (the op itself, its schedule entry, timing record
// and, with data, vector clocks and shadow state), measured as peak RSS over ops on
// `tide simulate` runs at 16 x 8: 410-530 bytes timing only, about 1 KB with data.
double bytes_per_op(bool data) {
  return data ? 1100 : 550;
}
// The longest run accepted. An op costs about (20 + 0.1 N) us with data (vector clocks grow
// with the N ranks) and (3 + 0.025 N) us timing only, measured on `tide simulate` runs at
// N = 128 and 256 (e.g. 310 K ops of TIDE-RS at 32 x 8 with data in 13 s on an idle core).
constexpr double kMaxSeconds = 20 * 60;

double seconds_per_op(double world, bool data) {
  return (data ? 20 + 0.1 * world : 3 + 0.025 * world) * 1e-6;
}

// Drawing the inputs, copying them in and checking the outputs: about 20 ns per byte of
// buffers and references (16 Mi-element bf16 gradients on 2 ranks, 0.8 GB: 16 s).
constexpr double kSecondsPerDataByte = 20e-9;

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 8e9;  // unknown: assume a small machine
  return static_cast<double>(pages) * static_cast<double>(page);
}

}  // namespace

ResourceEstimate& operator+=(ResourceEstimate& total, const ResourceEstimate& call) {
  total.ops += call.ops;
  total.op_bytes += call.op_bytes;
  total.buffer_bytes += call.buffer_bytes;
  total.host_bytes += call.host_bytes;
  total.seconds += call.seconds;
  return total;
}

// Upper estimates of the ops the builders emit (fitted to their counts on small topologies):
// TIDE-RS issues per rank, per destination node, pass and staging chunk, its pushes to the
// L - 1 owners and a sum, put and signals; TIDE-AG a few ops per round and per slot group;
// stock FSDP2's rings N - 1 steps per rank and channel (about 6 N^2 L ops per reduce-scatter
// and 3 N^2 L per all-gather at 16 x 8).
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
    e.ops = 6 * world * world * l + world * 16;
  } else {
    const double chunks = plan.chunk_elems() > 0
                              ? std::ceil(static_cast<double>(plan.pass_elems()) /
                                          static_cast<double>(plan.chunk_elems()))
                              : 1;
    e.ops = world * (m * plan.passes() * chunks * (4 * l + 8) + 48);
  }
  e.seconds = e.ops * seconds_per_op(world, data);
  e.op_bytes = e.ops * bytes_per_op(data);
  if (!data) return e;
  const double arena = baseline ? static_cast<double>(layout.pack_buffer_bytes())
                                : static_cast<double>(plan.memory().total());
  e.buffer_bytes =
      world *
      (arena + grad_elems * static_cast<double>(item_bytes(layout.grad_dtype())) + 4 * shard);
  e.host_bytes = world * (4 * grad_elems + 24 * shard);  // inputs, and two references
  e.seconds += (e.buffer_bytes + e.host_bytes) * kSecondsPerDataByte;
  return e;
}

ResourceEstimate estimate_all_gather(const AgPlan& plan, bool data, bool baseline) {
  const GroupLayout& layout = plan.layout();
  const Topology& topo = layout.topology();
  const double world = topo.world();
  const double l = topo.gpus_per_node();
  ResourceEstimate e;
  if (baseline) {
    e.ops = 3 * world * world * l + world * 16;
  } else {
    e.ops = world * (8 * static_cast<double>(plan.rounds().size()) +
                     (static_cast<double>(plan.slot_groups().size()) + 2) * (l + 4) + 16);
  }
  e.seconds = e.ops * seconds_per_op(world, data);
  e.op_bytes = e.ops * bytes_per_op(data);
  if (!data) return e;
  const double shard = static_cast<double>(layout.shard_bytes());
  const double unsharded = static_cast<double>(layout.unsharded_bytes());
  const double stage = static_cast<double>(plan.stage_bytes());
  e.buffer_bytes = world * (shard + stage + 2 * unsharded + 2 * shard);
  e.host_bytes = world * 4 * shard;  // shards, fp32 masters
  e.seconds += (e.buffer_bytes + e.host_bytes) * kSecondsPerDataByte;
  return e;
}

void require_fits(const ResourceEstimate& estimate, const std::string& what,
                  const std::string& instead) {
  const double budget = physical_memory_bytes() / 2;
  if (estimate.bytes() > budget) {
    throw Unsupported(fmt::format(
        "{} needs about {:.1f} GB of memory ({:.3g} M ops, {:.1f} GB of buffers), more than "
        "half of this machine's {:.1f} GB; {}",
        what, estimate.bytes() / 1e9, estimate.ops / 1e6,
        (estimate.buffer_bytes + estimate.host_bytes) / 1e9, 2 * budget / 1e9, instead));
  }
  if (estimate.seconds > kMaxSeconds) {
    throw Unsupported(
        fmt::format("{} would run about {:.0f} minutes ({:.3g} M ops), more than "
                    "the {:.0f} minutes this simulator accepts; {}",
                    what, estimate.seconds / 60, estimate.ops / 1e6, kMaxSeconds / 60, instead));
  }
}

void announce_long_run(const ResourceEstimate& estimate, const std::string& what) {
  if (estimate.seconds < 5) return;
  std::cerr << fmt::format(
      "tide: estimate for {}: {:.3g} M ops, {:.0f} s, {:.1f} GB; building the program\n", what,
      estimate.ops / 1e6, estimate.seconds, estimate.bytes() / 1e9);
}

}  // namespace tide::cli
