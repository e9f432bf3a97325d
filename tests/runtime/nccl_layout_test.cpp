// The nccl backend's fabric layout from the ranks' hosts (src/runtime/nccl_layout.hpp): which
// host lists it serves, how it splits the NCCL fabric, and what it refuses with which reason.
#include "nccl_layout.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_seed.hpp"

namespace tide::runtime::detail {
namespace {

std::vector<int> host_major(int hosts, int per_host) {
  std::vector<int> out;
  for (int h = 0; h < hosts; ++h)
    out.insert(out.end(), static_cast<std::size_t>(per_host), h);
  return out;
}

TEST(NcclLayout, OneHostIsOneNodeOfEveryRank) {
  const NcclLayout l = nccl_layout(std::vector<int>(8, 0), 8, false);
  EXPECT_TRUE(l.refusal.empty()) << l.refusal;
  EXPECT_EQ(l.nodes, 1);
  EXPECT_EQ(l.gpus_per_node, 8);
  EXPECT_EQ(l.message_lanes, 0);
  EXPECT_TRUE(l.hosts.empty());
  EXPECT_TRUE(l.one_host);
}

// Real hosts (the FSDP2 job over 16 GPUs on 2 hosts) and random M x C: M nodes of C, lanes,
// the host indices for the window, no one-host refusal.
TEST(NcclLayout, RealHostsAreAccepted) {
  const tide::testing::TestSeed seed;  // printed with every failure
  std::mt19937_64 rng = seed.engine();
  std::vector<std::pair<int, int>> cases{{2, 8}, {2, 1}, {4, 2}, {8, 8}};
  for (int i = 0; i < 8; ++i)
    cases.emplace_back(2 + static_cast<int>(rng() % 15), 1 + static_cast<int>(rng() % 8));
  for (const auto& [m, c] : cases) {
    SCOPED_TRACE(std::to_string(m) + " hosts of " + std::to_string(c));
    const std::vector<int> hosts = host_major(m, c);
    for (const int l_option : {c, 1}) {  // gpus_per_node as given, or smaller (nodes in a host)
      const NcclLayout l = nccl_layout(hosts, l_option, false);
      EXPECT_TRUE(l.refusal.empty()) << l.refusal;
      EXPECT_EQ(l.nodes, m);
      EXPECT_EQ(l.gpus_per_node, c);
      EXPECT_EQ(l.message_lanes, 2);
      EXPECT_EQ(l.hosts, hosts);
      EXPECT_FALSE(l.one_host);
      EXPECT_FALSE(l.virtual_nodes);
    }
  }
}

TEST(NcclLayout, EmulatedHostsKeepTheirSplit) {
  const std::vector<int> hosts = host_major(2, 2);
  const NcclLayout l = nccl_layout(hosts, 2, true);
  EXPECT_TRUE(l.refusal.empty()) << l.refusal;
  EXPECT_EQ(l.nodes, 2);
  EXPECT_EQ(l.gpus_per_node, 2);
  EXPECT_EQ(l.message_lanes, 2);
  EXPECT_EQ(l.hosts, hosts);
  EXPECT_TRUE(l.virtual_nodes);
  const NcclLayout bad = nccl_layout(hosts, 1, true);
  EXPECT_NE(bad.refusal.find("each emulated host is one node"), std::string::npos) << bad.refusal;
}

TEST(NcclLayout, RefusesWhatItCannotServe) {
  const auto refusal = [](std::vector<int> hosts) {
    const NcclLayout l = nccl_layout(hosts, 1, false);
    EXPECT_FALSE(l.refusal.empty());
    return l.refusal;
  };
  EXPECT_NE(refusal({0, 0, 0, 1}).find("different numbers of GPUs (3 on host 0, 1 on host 1)"),
            std::string::npos);
  EXPECT_NE(refusal({0, 1, 0, 1}).find("not host-major"), std::string::npos);
  EXPECT_NE(refusal({0, 2}).find("not host-major"), std::string::npos);
  EXPECT_NE(refusal({}).find("no ranks"), std::string::npos);
}

}  // namespace
}  // namespace tide::runtime::detail
