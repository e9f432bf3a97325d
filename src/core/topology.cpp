#include "tide/core/topology.hpp"

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

}  // namespace tide
