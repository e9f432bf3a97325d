// Cluster topology (Sec. 2.1): M nodes, each an NVSwitch domain of L GPUs, N = M * L ranks
// in node-major order r = n * L + l. Local GPU l of every node shares rail l.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tide {

inline constexpr int kMaxGpusPerNode = 8;  // GPUs per NVSwitch domain (Sec. 2.5)
inline constexpr int kMaxNodes = 1 << 16;  // far beyond any deployment; keeps N in int

class Topology {
 public:
  // Throws InvalidArgument when M < 1, M > kMaxNodes or L is outside 1..8.
  Topology(int nodes, int gpus_per_node);

  int nodes() const { return nodes_; }                   // M
  int gpus_per_node() const { return gpus_per_node_; }   // L
  int world() const { return nodes_ * gpus_per_node_; }  // N

  int rank(int node, int local) const { return node * gpus_per_node_ + local; }
  int node_of(int rank) const { return rank / gpus_per_node_; }
  int local_of(int rank) const { return rank % gpus_per_node_; }

  bool operator==(const Topology&) const = default;

 private:
  int nodes_;
  int gpus_per_node_;
};

// M x L from the ranks' host ids (NOTE [runtime] 9 in include/tide/runtime/communicator.hpp).
struct HostTopology {
  std::vector<int> hosts;            // rank r's host: 0, 1, ... in rank order
  std::optional<Topology> topology;  // M x L, where it can be formed
  std::string refusal;               // why not (one line), when topology is empty
};
// `ids[r]`: rank r's host. Hosts hold consecutive ranks, C each; L = gpus_per_node where it
// divides C (emulated nodes), C where gpus_per_node is larger; M = ranks / L.
HostTopology topology_of_hosts(std::span<const std::string> ids, int gpus_per_node);

// Non-negative remainder: mod(-1, 5) == 4.
constexpr int mod(std::int64_t a, std::int64_t m) {
  return static_cast<int>(((a % m) + m) % m);
}

}  // namespace tide
