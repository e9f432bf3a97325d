// The nccl backend's fabric layout from the ranks' hosts (NOTE [runtime] 9): how the NCCL
// fabric is split (M x L of NcclFabricOptions, message lanes) and which ranks the window
// treats as one host. Plain C++ (no NCCL), so that the acceptance and refusal logic is tested
// on the CPU (tests/runtime/nccl_layout_test.cpp).
#pragma once

#include <string>
#include <vector>

namespace tide::runtime::detail {

struct NcclLayout {
  int nodes = 1;               // NcclFabricOptions::nodes: one per host (real or emulated)
  int gpus_per_node = 1;       // NcclFabricOptions::gpus_per_node: the ranks of a host
  bool virtual_nodes = false;  // NcclFabricOptions::virtual_nodes: emulated hosts of one machine
  int message_lanes = 0;       // 2 where messages cross hosts (NOTE [nccl fabric] 2b), else 0
  // NcclWindowOptions::hosts: rank r's host index where there are several hosts, else empty.
  std::vector<int> hosts;
  // NcclWindowOptions::one_host: refuse ranks that are not LSA peers (one host only).
  bool one_host = true;
  std::string refusal;  // why the backend cannot serve these hosts (empty: it can)
};

// `hosts[r]`: rank r's host index as the registration gathered it (0, 1, ... in rank order,
// CommunicatorBase::hosts()); `gpus_per_node` the communicator's L, `nodes_as_hosts` whether
// the hosts are emulated nodes of one machine. One host: every rank an LSA peer. Several:
// the fabric's M x L is hosts x ranks per host (the rail communicators join the ranks of one
// local index), two message lanes carry the rail traffic, and the window takes the host
// indices. Refused, with the reason: a host index list that is not host-major with equal
// ranks per host (the registration refuses it first; checked again here).
NcclLayout nccl_layout(const std::vector<int>& hosts, int gpus_per_node, bool nodes_as_hosts);

}  // namespace tide::runtime::detail
