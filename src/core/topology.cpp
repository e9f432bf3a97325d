#include "tide/core/topology.hpp"

#include <algorithm>
#include <string>

#include "tide/core/error.hpp"

namespace tide {

Topology::Topology(int nodes, int gpus_per_node) : nodes_(nodes), gpus_per_node_(gpus_per_node) {
  if (gpus_per_node < 1 || gpus_per_node > kMaxGpusPerNode) {
    throw InvalidArgument("GPUs per node L = " + std::to_string(gpus_per_node) + " is outside 1.." +
                          std::to_string(kMaxGpusPerNode) +
                          " (one NVSwitch domain holds at most 8 GPUs)");
  }
  if (nodes < 1 || nodes > kMaxNodes) {
    throw InvalidArgument("node count M = " + std::to_string(nodes) + " is outside 1.." +
                          std::to_string(kMaxNodes));
  }
}

HostTopology topology_of_hosts(std::span<const std::string> ids, int gpus_per_node) {
  HostTopology t;
  if (ids.empty()) {
    t.refusal = "no ranks";
    return t;
  }
  t.hosts.assign(ids.size(), 0);
  std::vector<int> sizes{1};
  for (std::size_t r = 1; r < ids.size(); ++r) {
    if (ids[r] == ids[r - 1]) {
      t.hosts[r] = t.hosts[r - 1];
      ++sizes.back();
      continue;
    }
    for (std::size_t q = 0; q + 1 < r; ++q) {
      if (ids[q] == ids[r]) {
        t.refusal = "the ranks of a host are not consecutive (ranks " + std::to_string(q) +
                    " and " + std::to_string(r) + " share a host that rank " +
                    std::to_string(r - 1) +
                    " is not on); TIDE needs host-major ranks, as torchrun numbers them";
        return t;
      }
    }
    t.hosts[r] = t.hosts[r - 1] + 1;
    sizes.push_back(1);
  }
  const int per_host = sizes.front();
  for (std::size_t h = 1; h < sizes.size(); ++h) {
    if (sizes[h] != per_host) {
      t.refusal = "the hosts hold different numbers of ranks (" + std::to_string(per_host) +
                  " on host 0, " + std::to_string(sizes[h]) + " on host " + std::to_string(h) +
                  "); TIDE needs M nodes of L ranks each";
      return t;
    }
  }
  const int l = std::min(std::max(gpus_per_node, 1), per_host);
  if (per_host % l != 0) {
    t.refusal = "gpus_per_node " + std::to_string(gpus_per_node) + " does not divide the " +
                std::to_string(per_host) + " ranks of each host (nodes must tile a host)";
    return t;
  }
  try {
    t.topology.emplace(static_cast<int>(ids.size()) / l, l);
  } catch (const InvalidArgument& e) {
    t.refusal = std::string("topology: ") + e.what();
  }
  return t;
}

}  // namespace tide
