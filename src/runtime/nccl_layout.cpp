// The nccl backend's fabric layout (see nccl_layout.hpp).
#include "nccl_layout.hpp"

#include <cstddef>

namespace tide::runtime::detail {

NcclLayout nccl_layout(const std::vector<int>& hosts, int gpus_per_node, bool nodes_as_hosts) {
  NcclLayout l;
  const auto world = static_cast<int>(hosts.size());
  if (world < 1) {
    l.refusal = "no ranks";
    return l;
  }
  // Host-major, 0, 1, ..., with equal ranks per host (topology_of_hosts' rules).
  std::vector<int> sizes;
  for (int r = 0; r < world; ++r) {
    const int h = hosts[static_cast<std::size_t>(r)];
    if (h == static_cast<int>(sizes.size())) {
      sizes.push_back(0);
    } else if (h != static_cast<int>(sizes.size()) - 1) {
      l.refusal = "rank " + std::to_string(r) + "'s host index " + std::to_string(h) +
                  " is not host-major (the ranks of a host must be consecutive)";
      return l;
    }
    ++sizes.back();
  }
  for (std::size_t h = 1; h < sizes.size(); ++h) {
    if (sizes[h] != sizes[0]) {
      l.refusal = "the hosts hold different numbers of GPUs (" + std::to_string(sizes[0]) +
                  " on host 0, " + std::to_string(sizes[h]) + " on host " + std::to_string(h) +
                  "); the nccl backend's rail communicators need as many on every host";
      return l;
    }
  }
  const auto count = static_cast<int>(sizes.size());
  if (count == 1) {  // one host: every rank an LSA peer (NOTE [nccl window fabric])
    l.gpus_per_node = world;
    return l;
  }
  if (nodes_as_hosts && gpus_per_node != sizes[0]) {
    l.refusal = "emulated hosts of " + std::to_string(sizes[0]) + " ranks for gpus_per_node " +
                std::to_string(gpus_per_node) + " (each emulated host is one node)";
    return l;
  }
  l.nodes = count;
  l.gpus_per_node = sizes[0];
  l.virtual_nodes = nodes_as_hosts;
  l.message_lanes = 2;
  l.hosts = hosts;
  // Real hosts: ranks on other hosts are not LSA peers, and reach each other by messages
  // only (NOTE [abort relay]); emulated hosts of one machine are LSA peers all the same.
  l.one_host = false;
  return l;
}

}  // namespace tide::runtime::detail
