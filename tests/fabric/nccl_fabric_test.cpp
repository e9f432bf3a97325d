// The NCCL fabric (NOTE [nccl fabric]). Argument checks run anywhere; the 1-rank communicator
// tests need one GPU and skip with a reason without one. Multi-rank runs: docs/nccl_fabric.md.
#include "tide/fabric/nccl_fabric.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <vector>

#include "nccl_rma.hpp"
#include "tide/core/error.hpp"
#include "tide/fabric/nccl_window_fabric.hpp"
#include "tide/transport/nccl_transports.hpp"
#include "tide/version_gates.hpp"

namespace tide::fabric {
namespace {

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: the 1-rank NCCL fabric test needs one"

std::vector<std::byte> fake_id() {
  return std::vector<std::byte>(NcclFabric::kUniqueIdBytes);
}

TEST(NcclFabricArguments, RejectsBadDeclarationsBeforeTouchingTheGpu) {
  NcclFabricOptions o;
  o.nodes = 2;
  o.gpus_per_node = 4;
  EXPECT_NO_THROW(NcclFabric::check_arguments(5, 8, fake_id(), o));
  EXPECT_THROW(NcclFabric::check_arguments(0, 4, fake_id(), o), InvalidArgument);  // 2 x 4 != 4
  EXPECT_THROW(NcclFabric::check_arguments(8, 8, fake_id(), o), InvalidArgument);
  EXPECT_THROW(NcclFabric::check_arguments(-1, 8, fake_id(), o), InvalidArgument);
  EXPECT_THROW(NcclFabric::check_arguments(0, 8, std::vector<std::byte>(3), o), InvalidArgument);
  NcclFabricOptions wide = o;
  wide.gpus_per_node = 16;
  wide.nodes = 1;
  EXPECT_THROW(NcclFabric::check_arguments(0, 16, fake_id(), wide), InvalidArgument);
  NcclFabricOptions arena = o;
  arena.arena_bytes = 0;
  EXPECT_THROW(NcclFabric::check_arguments(0, 8, fake_id(), arena), InvalidArgument);
  NcclFabricOptions ctas = o;
  ctas.max_ctas = -1;
  EXPECT_THROW(NcclFabric::check_arguments(0, 8, fake_id(), ctas), InvalidArgument);
}

TEST(NcclFabricArguments, RefusesNvlinkMulticastUnlessOptedIn) {
  NcclFabricOptions o;
  ASSERT_EQ(setenv("NCCL_NVLS_ENABLE", "1", 1), 0);
  EXPECT_THROW(NcclFabric::check_arguments(0, 1, fake_id(), o), InvalidArgument);
  o.allow_multicast = true;  // accepted as an argument; never set on the lent machines
  EXPECT_NO_THROW(NcclFabric::check_arguments(0, 1, fake_id(), o));
  ASSERT_EQ(setenv("NCCL_NVLS_ENABLE", "0", 1), 0);
  o.allow_multicast = false;
  EXPECT_NO_THROW(NcclFabric::check_arguments(0, 1, fake_id(), o));
  ASSERT_EQ(unsetenv("NCCL_NVLS_ENABLE"), 0);
}

TEST(NcclFabricArguments, TimeoutKnob) {
  NcclFabricOptions o;
  ASSERT_EQ(setenv("TIDE_FABRIC_TIMEOUT_S", "abc", 1), 0);
  EXPECT_THROW(NcclFabric::check_arguments(0, 1, fake_id(), o), InvalidArgument);
  ASSERT_EQ(setenv("TIDE_FABRIC_TIMEOUT_S", "2.5", 1), 0);
  EXPECT_NO_THROW(NcclFabric::check_arguments(0, 1, fake_id(), o));
  ASSERT_EQ(unsetenv("TIDE_FABRIC_TIMEOUT_S"), 0);
}

TEST(NcclFabricOneRank, CommunicatorsArenaAndPeerTables) {
  SKIP_WITHOUT_GPU();
  NcclFabricOptions o;
  o.arena_bytes = (std::int64_t{4} << 20) + 1;  // rounded up to the window alignment
  o.timeout = std::chrono::seconds(60);
  NcclFabric fab(0, 1, NcclFabric::make_unique_id(), o);
  EXPECT_NE(fab.main_comm(), nullptr);
  EXPECT_NE(fab.rail_comm(), nullptr);
  EXPECT_EQ(fab.arena_bytes() % 4096, 0);
  EXPECT_GE(fab.arena_bytes(), o.arena_bytes);
  int n = 0;
  ASSERT_EQ(ncclCommCount(fab.rail_comm(), &n), ncclSuccess);
  EXPECT_EQ(n, 1);
  const NcclFabricView v = fab.view();
  EXPECT_EQ(v.lsa_size, 1);
  EXPECT_EQ(v.lsa_rank, 0);
  EXPECT_EQ(v.rail_lsa_size, 1);
  EXPECT_NE(v.lsa_peers, nullptr);
  ASSERT_NE(fab.peer_arena(0), nullptr);
  ASSERT_NE(fab.rail_peer_arena(0), nullptr);
  EXPECT_EQ(fab.peer_arena(1), nullptr);
  EXPECT_EQ(fab.rail_peer_arena(1), nullptr);

  // Bytes written through the arena read back through both LSA mappings.
  std::vector<unsigned char> pattern(1 << 16);
  for (std::size_t i = 0; i < pattern.size(); ++i)
    pattern[i] = static_cast<unsigned char>(i * 7);
  ASSERT_EQ(cudaMemcpy(fab.arena(), pattern.data(), pattern.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  for (void* mapped : {fab.peer_arena(0), fab.rail_peer_arena(0)}) {
    std::vector<unsigned char> back(pattern.size());
    ASSERT_EQ(cudaMemcpy(back.data(), mapped, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back, pattern);
  }
  // A stock collective still runs on the capped main communicator (the fallback path).
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  float* buf = static_cast<float*>(fab.arena());
  ASSERT_EQ(ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, fab.main_comm(), stream), ncclSuccess);
  fab.wait(stream, "1-rank all-reduce");
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(NcclFabricOneRank, BoundedWaitNamesWhatItWaitedFor) {
  SKIP_WITHOUT_GPU();
  NcclFabricOptions o;
  o.timeout = std::chrono::milliseconds(50);
  NcclFabric fab(0, 1, NcclFabric::make_unique_id(), o);
  fab.wait_until([] { return true; }, "nothing");
  try {
    fab.wait_until([] { return false; }, "credit from rank 3 (injected stall)");
    FAIL() << "expected FabricTimeout";
  } catch (const FabricTimeout& e) {
    EXPECT_EQ(e.waited_for(), "credit from rank 3 (injected stall)");
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fab.aborted());
}

// NOTE [nccl fabric] 5: without TIDE_HAS_NCCL_HOST_RMA the one-sided calls refuse, naming the
// version built against and the one needed; no GPU, no communicator.
TEST(NcclRma, NamesTheVersionsWhereItCannot) {
  const std::string reason = rma::unavailable_reason();
#if TIDE_HAS_NCCL_HOST_RMA
  GTEST_SKIP() << "built against NCCL >= 2.29 (" << (reason.empty() ? "loaded too" : reason)
               << "): the refusals are not compiled";
#else
  EXPECT_NE(reason.find("< 2.29"), std::string::npos) << reason;
  EXPECT_EQ(reason.rfind("NCCL 2.", 0), 0u) << reason;
  try {
    (void)rma::put_signal(nullptr, 8, 1, nullptr, 0, 0, nullptr, nullptr);
    FAIL() << "expected tide::Unsupported";
  } catch (const Unsupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NCCL >= 2.29"), std::string::npos) << what;
    EXPECT_NE(what.find("built against NCCL 2."), std::string::npos) << what;
  }
  const rma::SignalCount wait{1, 0, 1};
  EXPECT_THROW((void)rma::wait_signals({&wait, 1}, nullptr, nullptr), Unsupported);
  EXPECT_THROW((void)rma::signal(1, 0, nullptr, nullptr), Unsupported);
#endif
}

// The agreement runs on every fabric (asked or not) and reports why one-sided is off.
TEST(NcclFabricOneRank, HostRmaAgreement) {
  SKIP_WITHOUT_GPU();
  ASSERT_EQ(unsetenv("TIDE_NCCL_HOST_RMA"), 0);
  NcclFabricOptions o;
  o.timeout = std::chrono::seconds(60);
  o.message_lanes = 1;
  {
    NcclFabric fab(0, 1, NcclFabric::make_unique_id(), o);
    EXPECT_FALSE(fab.host_rma());
    EXPECT_EQ(fab.host_rma_reason().rfind("not requested", 0), 0u) << fab.host_rma_reason();
    EXPECT_EQ(fab.lane_window(0), nullptr);
    NcclWindowFabric window(fab, 4096, 8);
    const transport::MessageTransports t = transport::nccl_transports(window, 0);
    EXPECT_EQ(t.one_sided, nullptr);
    EXPECT_THROW(transport::NcclOneSidedTransport(fab, 0).wait_signals(0, 0, 1, nullptr),
                 Unsupported);
  }
  o.host_rma = true;
  NcclFabric fab(0, 1, NcclFabric::make_unique_id(), o);
  const std::string reason = rma::unavailable_reason();
  EXPECT_EQ(fab.host_rma(), reason.empty()) << fab.host_rma_reason();
  if (fab.host_rma()) {
    EXPECT_NE(fab.lane_window(0), nullptr);
    EXPECT_NE(fab.lane_token_window(0), nullptr);
    EXPECT_NE(fab.token_area(0), nullptr);
    EXPECT_EQ(fab.lane_window(1), nullptr);  // one lane
  } else {
    EXPECT_EQ(fab.host_rma_reason(), reason);
  }
}

}  // namespace
}  // namespace tide::fabric
