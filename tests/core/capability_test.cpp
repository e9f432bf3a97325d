// Capability agreement (Sec. 6.3): agreement, every fallback reason, every inconsistency,
// determinism across ranks, and the serialised form.
#include "tide/core/capability.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tide/core/error.hpp"

namespace tide {
namespace {

RankCapabilities h200_caps() {
  RankCapabilities c;
  c.cuda_runtime_version = 13000;
  c.nccl_version = 22809;
  c.compute_capability = 90;
  c.vmm = true;
  c.stream_memops = true;
  c.copy_engine_batch = true;
  c.symmetric_windows = true;
  c.nccl_device_api = true;
  c.nccl_host_rma = false;
  c.multicast_capable = true;  // capable, but never used without the opt-in
  c.shared_memory_per_block = 227 * 1024;
  return c;
}

GroupSignature llama_like_group(int nodes, int gpus) {
  GroupSignature g;
  g.name = "model.layers.3";
  g.nodes = nodes;
  g.gpus_per_node = gpus;
  g.params = {{"attn.qkv", 10240, 8192}, {"attn.o", 8192, 8192}, {"norm", 8192, 1}};
  g.ag_dtype = DType::kBf16;
  g.grad_dtype = DType::kBf16;
  g.rs.round_width = 4;
  g.rs.mode = RsMode::kSlotReuse;
  g.ag_stages = 2;
  return g;
}

// One description per rank of an M x L cluster, one host per node.
std::vector<RankDescription> cluster(int nodes, int gpus) {
  std::vector<RankDescription> ds;
  for (int r = 0; r < nodes * gpus; ++r) {
    RankDescription d;
    d.rank = r;
    d.world = nodes * gpus;
    d.host_id = 1000 + static_cast<std::uint64_t>(r / gpus);
    d.group = llama_like_group(nodes, gpus);
    d.caps = h200_caps();
    ds.push_back(d);
  }
  return ds;
}

// Plans the validator rejects (App. D) fall back with the collision named, on every path that
// agrees on a group, before any program is built.
TEST(Capability, RejectedPlanFallsBack) {
  auto ds = cluster(9, 8);
  for (RankDescription& d : ds)
    d.group.rs.wave_width = 3;  // the App. D colliding plan
  const Decision d = agree(ds);
  EXPECT_EQ(d.backend, Backend::kStock);
  EXPECT_EQ(d.reason_code, FallbackReason::kPlanOptions);
  EXPECT_NE(d.reason.find("plan validator"), std::string::npos) << d.reason;
}

// The host transport needs no GPU feature: a CPU-only world runs TIDE; a GPU world's
// capabilities are still required without it.
TEST(Capability, HostTransportNeedsNoDevice) {
  auto ds = cluster(1, 4);
  for (RankDescription& d : ds) {
    d.caps = RankCapabilities{};
    d.group.host_transport = true;
  }
  EXPECT_EQ(agree(ds).backend, Backend::kTide);
  for (RankDescription& d : ds)
    d.group.host_transport = false;
  EXPECT_EQ(agree(ds).reason_code, FallbackReason::kComputeCapability);
}

// The ipc transport (NOTE [ipc fabric]) needs the GPU's features but none of NCCL's: a world
// without NCCL windows (or NCCL at all) runs TIDE over it, and still falls back without the GPU
// features.
TEST(Capability, IpcTransportNeedsNoNccl) {
  auto ds = cluster(1, 4);
  for (RankDescription& d : ds) {
    d.caps.nccl_version = 0;
    d.caps.symmetric_windows = false;
    d.caps.nccl_device_api = false;
    d.caps.vmm = false;  // cudaIpc handles need no VMM
    d.group.ipc_transport = true;
  }
  EXPECT_EQ(agree(ds).backend, Backend::kTide) << agree(ds).reason;
  ds[2].caps.stream_memops = false;
  const Decision no_memops = agree(ds);
  EXPECT_EQ(no_memops.reason_code, FallbackReason::kDeviceFeatures);
  EXPECT_NE(no_memops.reason.find("rank 2"), std::string::npos) << no_memops.reason;
  for (RankDescription& d : ds) {
    d.caps.stream_memops = true;
    d.group.ipc_transport = false;
  }
  EXPECT_EQ(agree(ds).reason_code, FallbackReason::kNccl);
}

TEST(Capability, AgreementSelectsTide) {
  std::vector<std::string> logged;
  const Decision d = agree(cluster(2, 4), [&](std::string_view s) { logged.emplace_back(s); });
  EXPECT_EQ(d.backend, Backend::kTide);
  EXPECT_EQ(d.reason_code, FallbackReason::kNone);
  EXPECT_TRUE(d.reason.empty());
  EXPECT_EQ(d.group.nodes, 2);
  EXPECT_EQ(d.group.gpus_per_node, 4);
  ASSERT_EQ(d.group.params.size(), 3u);
  EXPECT_EQ(d.group.params[0].rows, 10240);
  EXPECT_EQ(d.group.rs.mode, RsMode::kSlotReuse);
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("TIDE"), std::string::npos) << logged[0];
  EXPECT_EQ(logged[0].find('\n'), std::string::npos);
  // The plan inputs build the plans.
  const GroupLayout layout(Topology(d.group.nodes, d.group.gpus_per_node), d.group.params,
                           d.group.ag_dtype, d.group.grad_dtype);
  EXPECT_NO_THROW(RsPlan(layout, d.group.rs));
}

TEST(Capability, MulticastOnlyWhenOptedInAndCapableEverywhere) {
  auto ds = cluster(1, 8);
  EXPECT_FALSE(agree(ds).use_multicast);  // capable, not opted in: off
  for (auto& d : ds)
    d.group.multicast_opt_in = true;
  EXPECT_TRUE(agree(ds).use_multicast);
  ds[5].caps.multicast_capable = false;  // one rank incapable: off, still TIDE
  const Decision d = agree(ds);
  EXPECT_EQ(d.backend, Backend::kTide);
  EXPECT_FALSE(d.use_multicast);
  EXPECT_FALSE(d.caps.multicast_capable);
}

TEST(Capability, ReducedCapabilitiesAreMinAndAnd) {
  auto ds = cluster(2, 2);
  ds[3].caps.compute_capability = 100;
  ds[1].caps.copy_engine_batch = false;
  ds[2].caps.shared_memory_per_block = 210 * 1024;
  const Decision d = agree(ds);
  EXPECT_EQ(d.backend, Backend::kTide);
  EXPECT_EQ(d.caps.compute_capability, 90);
  EXPECT_FALSE(d.caps.copy_engine_batch);
  EXPECT_EQ(d.caps.shared_memory_per_block, 210 * 1024);
}

TEST(Capability, VirtualNodesOnOneHost) {
  for (const auto& [m, l] : {std::pair{2, 4}, {4, 2}, {8, 1}, {1, 8}}) {
    auto ds = cluster(m, l);
    for (auto& d : ds) {
      d.host_id = 7;
      d.group.virtual_nodes = true;
    }
    EXPECT_EQ(agree(ds).backend, Backend::kTide) << m << " x " << l;
  }
}

// --- Fallbacks: consistent groups TIDE does not run ------------------------------------------

void expect_fallback(const std::vector<RankDescription>& ds, FallbackReason code,
                     const std::string& fragment) {
  std::vector<std::string> logged;
  const Decision d = agree(ds, [&](std::string_view s) { logged.emplace_back(s); });
  EXPECT_EQ(d.backend, Backend::kStock);
  EXPECT_EQ(d.reason_code, code) << d.reason;
  EXPECT_NE(d.reason.find(fragment), std::string::npos) << d.reason;
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("stock collectives"), std::string::npos) << logged[0];
  EXPECT_NE(logged[0].find(fallback_reason_name(code)), std::string::npos) << logged[0];
  EXPECT_EQ(logged[0].find('\n'), std::string::npos) << logged[0];
  EXPECT_FALSE(d.use_multicast);
}

TEST(CapabilityFallback, TooManyParams) {
  auto ds = cluster(1, 2);
  for (auto& d : ds) {
    d.group.params.assign(257, ParamShape{"w", 64, 64});
  }
  expect_fallback(ds, FallbackReason::kTooManyParams, "257 parameters");
}

TEST(CapabilityFallback, TopologyTideRefuses) {
  // 16 GPUs per NVSwitch domain: outside L = 1..8 (Sec. 2.5).
  auto ds = cluster(1, 16);
  expect_fallback(ds, FallbackReason::kTopology, "topology");
}

TEST(CapabilityFallback, DeclarationDoesNotMatchWorld) {
  auto ds = cluster(2, 4);
  for (auto& d : ds)
    d.group.nodes = 4;  // 4 x 4 declared, 8 ranks launched
  expect_fallback(ds, FallbackReason::kWorldMismatch, "4 x 4 = 16 ranks");
}

TEST(CapabilityFallback, NodeSpansHosts) {
  auto ds = cluster(2, 4);
  ds[6].host_id = 99;
  expect_fallback(ds, FallbackReason::kNodeSpansHosts, "node 1 spans hosts: ranks 4 and 6");
  auto vs = cluster(2, 4);  // virtual nodes must all share one host
  for (auto& d : vs)
    d.group.virtual_nodes = true;
  expect_fallback(vs, FallbackReason::kNodeSpansHosts, "ranks 0 and 4");
}

TEST(CapabilityFallback, Layout) {
  auto ds = cluster(1, 2);
  for (auto& d : ds)
    d.group.params[1].rows = 0;
  expect_fallback(ds, FallbackReason::kLayout, "layout");
  auto empty = cluster(1, 2);
  for (auto& d : empty)
    d.group.params.clear();
  expect_fallback(empty, FallbackReason::kLayout, "at least one parameter");
}

TEST(CapabilityFallback, PlanOptions) {
  auto ds = cluster(2, 2);
  for (auto& d : ds)
    d.group.rs.round_width = 0;
  expect_fallback(ds, FallbackReason::kPlanOptions, "plan options");
  auto stages = cluster(2, 2);
  for (auto& d : stages)
    d.group.ag_stages = 3;
  expect_fallback(stages, FallbackReason::kPlanOptions, "ag_stages");
}

TEST(CapabilityFallback, ComputeCapability) {
  auto ds = cluster(1, 4);
  ds[2].caps.compute_capability = 80;
  expect_fallback(ds, FallbackReason::kComputeCapability, "rank 2 has compute capability 8.0");
  auto smem = cluster(1, 4);
  smem[3].caps.shared_memory_per_block = 164 * 1024;
  expect_fallback(smem, FallbackReason::kComputeCapability, "rank 3 has 167936 bytes");
}

TEST(CapabilityFallback, Nccl) {
  auto old = cluster(1, 2);
  for (auto& d : old)
    d.caps.nccl_version = 22703;
  expect_fallback(old, FallbackReason::kNccl, "NCCL 2.27.3");
  auto none = cluster(1, 2);
  for (auto& d : none)
    d.caps.nccl_version = 0;
  expect_fallback(none, FallbackReason::kNccl, "NCCL none");
  auto windows = cluster(1, 2);
  windows[1].caps.symmetric_windows = false;
  expect_fallback(windows, FallbackReason::kNccl, "rank 1 cannot register");
  auto api = cluster(1, 2);
  api[0].caps.nccl_device_api = false;
  expect_fallback(api, FallbackReason::kNccl, "rank 0 has no NCCL device API");
}

TEST(CapabilityFallback, DeviceFeatures) {
  auto vmm = cluster(2, 1);
  vmm[1].caps.vmm = false;
  expect_fallback(vmm, FallbackReason::kDeviceFeatures, "rank 1 has no CUDA virtual memory");
  auto memops = cluster(2, 1);
  memops[0].caps.stream_memops = false;
  expect_fallback(memops, FallbackReason::kDeviceFeatures, "stream memory operations");
}

// --- Inconsistencies: every rank aborts with the same message ---------------------------------

void expect_inconsistent(const std::vector<RankDescription>& ds, const std::string& field,
                         const std::vector<int>& ranks, const std::string& fragment = "") {
  try {
    agree(ds);
    FAIL() << "expected InconsistentGroup on " << field;
  } catch (const InconsistentGroup& e) {
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_EQ(e.ranks(), ranks) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + field + "'"), std::string::npos) << what;
    if (!fragment.empty()) {
      EXPECT_NE(what.find(fragment), std::string::npos) << what;
    }
  }
}

TEST(CapabilityInconsistent, World) {
  auto ds = cluster(1, 4);
  ds[3].world = 8;
  expect_inconsistent(ds, "world", {3}, "rank 3 has 8");
}

TEST(CapabilityInconsistent, RankOrder) {
  auto ds = cluster(1, 4);
  std::swap(ds[1], ds[2]);
  expect_inconsistent(ds, "rank", {1, 2}, "position 1 says rank 2");
}

TEST(CapabilityInconsistent, EachAgreedField) {
  struct Case {
    std::string field;
    void (*mutate)(RankDescription&);
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"format_version", [](RankDescription& d) { d.format_version = 5; }, "rank 0 has 4"},
      {"group.name", [](RankDescription& d) { d.group.name = "other"; }, "'other'"},
      {"group.nodes", [](RankDescription& d) { d.group.nodes = 4; }, ""},
      {"group.gpus_per_node", [](RankDescription& d) { d.group.gpus_per_node = 2; }, ""},
      {"group.virtual_nodes", [](RankDescription& d) { d.group.virtual_nodes = true; }, "true"},
      {"group.params.count", [](RankDescription& d) { d.group.params.pop_back(); }, "rank 0 has 3"},
      {"group.params[1].name", [](RankDescription& d) { d.group.params[1].name = "x"; }, "'x'"},
      {"group.params[2].rows", [](RankDescription& d) { d.group.params[2].rows = 4096; },
       "rank 0 has 8192"},
      {"group.params[0].cols", [](RankDescription& d) { d.group.params[0].cols = 1; }, ""},
      {"group.ag_dtype", [](RankDescription& d) { d.group.ag_dtype = DType::kFp32; }, "fp32"},
      {"group.grad_dtype", [](RankDescription& d) { d.group.grad_dtype = DType::kFp32; }, ""},
      {"group.rs.wave_width", [](RankDescription& d) { d.group.rs.wave_width = 2; }, ""},
      {"group.rs.round_width", [](RankDescription& d) { d.group.rs.round_width = 2; },
       "rank 0 has 4"},
      {"group.rs.mode", [](RankDescription& d) { d.group.rs.mode = RsMode::kInPlace; }, "in-place"},
      {"group.rs.sub_slices",
       [](RankDescription& d) {
         d.group.rs.sub_slices = d.group.rs.sub_slices == RsSubSlices::kPerRank
                                     ? RsSubSlices::kAcrossRanks
                                     : RsSubSlices::kPerRank;
       },
       ""},
      {"group.rs.passes", [](RankDescription& d) { d.group.rs.passes = 2; }, ""},
      {"group.rs.staging_slots", [](RankDescription& d) { d.group.rs.staging_slots = 3; }, ""},
      {"group.rs.staging_chunk_elems",
       [](RankDescription& d) { d.group.rs.staging_chunk_elems = 1024; }, ""},
      {"group.rs.vector_elems", [](RankDescription& d) { d.group.rs.vector_elems = 8; }, ""},
      {"group.ag.mixed_precision_cast",
       [](RankDescription& d) { d.group.ag.mixed_precision_cast = true; }, ""},
      {"group.ag.staged_shards", [](RankDescription& d) { d.group.ag.staged_shards = true; }, ""},
      {"group.landing_slot", [](RankDescription& d) { d.group.landing_slot = 1; }, "rank 0 has -1"},
      {"group.ag.min_strided_run", [](RankDescription& d) { d.group.ag.min_strided_run = 2; }, ""},
      {"group.ag.max_last_round_groups",
       [](RankDescription& d) { d.group.ag.max_last_round_groups = 1; }, ""},
      {"group.ag.head_bytes", [](RankDescription& d) { d.group.ag.head_bytes = 1; }, ""},
      {"group.ag_stages", [](RankDescription& d) { d.group.ag_stages = 1; }, ""},
      {"group.multicast_opt_in", [](RankDescription& d) { d.group.multicast_opt_in = true; }, ""},
      {"group.host_transport", [](RankDescription& d) { d.group.host_transport = true; }, ""},
      {"group.ipc_transport", [](RankDescription& d) { d.group.ipc_transport = true; }, ""},
      {"group.rs.rounds_in_flight", [](RankDescription& d) { d.group.rs.rounds_in_flight = 2; },
       ""},
      {"caps.cuda_runtime_version", [](RankDescription& d) { d.caps.cuda_runtime_version = 12090; },
       "12090"},
      {"caps.nccl_version", [](RankDescription& d) { d.caps.nccl_version = 22903; },
       "rank 0 has 2.28.9; rank 5 has 2.29.3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    auto ds = cluster(2, 4);
    c.mutate(ds[5]);
    expect_inconsistent(ds, c.field, {5}, c.fragment);
  }
}

TEST(CapabilityInconsistent, FirstFieldWinsAndNamesEveryDifferingRank) {
  auto ds = cluster(2, 4);
  ds[6].group.rs.passes = 2;       // a later field
  ds[3].group.params[0].rows = 1;  // an earlier field, on two ranks
  ds[7].group.params[0].rows = 2;
  expect_inconsistent(ds, "group.params[0].rows", {3, 7}, "rank 3 has 1, rank 7 has 2");
}

TEST(CapabilityInconsistent, ReducedCapabilitiesAreNotInconsistencies) {
  auto ds = cluster(2, 4);
  ds[1].caps.multicast_capable = false;
  ds[2].caps.nccl_host_rma = true;
  EXPECT_NO_THROW(agree(ds));
}

TEST(CapabilityInconsistent, ManyRanksAreSummarised) {
  auto ds = cluster(4, 8);
  for (int r = 1; r < 32; ++r)
    ds[static_cast<std::size_t>(r)].caps.nccl_version = 22903;
  try {
    agree(ds);
    FAIL();
  } catch (const InconsistentGroup& e) {
    EXPECT_EQ(e.ranks().size(), 31u);
    EXPECT_NE(std::string(e.what()).find("and 23 more"), std::string::npos) << e.what();
  }
}

// --- Determinism and serialisation ------------------------------------------------------------

TEST(Capability, EveryRankDecidesTheSame) {
  // Each rank deserialises the gathered blobs itself and decides; the decisions and the
  // messages must be identical, for TIDE, a fallback and an inconsistency alike.
  const auto decide_on_every_rank = [](const std::vector<RankDescription>& ds) {
    std::vector<std::string> blobs;
    for (const auto& d : ds)
      blobs.push_back(serialize(d));
    std::vector<std::string> outcomes;
    for (std::size_t rank = 0; rank < ds.size(); ++rank) {
      const std::vector<std::string> received = blobs;  // this rank's copy of the all-gather
      try {
        const Decision d = agree_serialized(received);
        EXPECT_TRUE(d == agree(ds));
        outcomes.push_back(d.log_line());
      } catch (const InconsistentGroup& e) {
        outcomes.push_back(std::string("abort: ") + e.what());
      }
    }
    for (const auto& o : outcomes)
      EXPECT_EQ(o, outcomes.front());
    return outcomes.front();
  };
  EXPECT_NE(decide_on_every_rank(cluster(2, 4)).find("TIDE"), std::string::npos);
  auto fallback = cluster(2, 4);
  fallback[4].caps.compute_capability = 80;
  EXPECT_NE(decide_on_every_rank(fallback).find("stock"), std::string::npos);
  auto bad = cluster(2, 4);
  bad[2].group.rs.passes = 3;
  EXPECT_NE(decide_on_every_rank(bad).find("abort"), std::string::npos);
}

TEST(Capability, SerialisationRoundTrip) {
  RankDescription d = cluster(2, 4)[5];
  d.host_id = 0xfedcba9876543210ull;
  d.group.name = "layers.7.mlp \xe2\x9c\x93";
  d.group.virtual_nodes = true;
  d.group.ag_dtype = DType::kFp32;
  d.group.rs.staging_chunk_elems = std::int64_t{1} << 40;
  d.group.ag.head_bytes = -1;
  d.group.multicast_opt_in = true;
  d.caps.nccl_host_rma = true;
  d.caps.copy_engine_batch = false;
  const std::string blob = serialize(d);
  const RankDescription e = deserialize(blob);
  EXPECT_EQ(serialize(e), blob);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.host_id, d.host_id);
  EXPECT_EQ(e.group.name, d.group.name);
  EXPECT_EQ(e.group.rs.staging_chunk_elems, d.group.rs.staging_chunk_elems);
  EXPECT_EQ(e.group.ag.head_bytes, -1);
  EXPECT_TRUE(e.caps.nccl_host_rma);
  EXPECT_FALSE(e.caps.copy_engine_batch);
  EXPECT_EQ(agreed_fields(e), agreed_fields(d));
  // Compact: a 3-parameter description stays well under a kilobyte.
  EXPECT_LT(blob.size(), 512u);
}

// NOTE [1-byte all-gather items]: fp8 and u8 all-gather dtypes travel in the description, are
// agreed like any dtype, and a 1-byte gradient dtype falls back with the layout's reason. The
// codes of bf16 and fp32 are unchanged (older descriptions read the same), and a code past
// the last dtype is malformed.
TEST(Capability, OneByteAllGatherDtypesRoundTripAndAgree) {
  for (const DType ag : {DType::kFp8, DType::kU8}) {
    RankDescription d = cluster(2, 4)[3];
    d.group.ag_dtype = ag;
    d.group.grad_dtype = DType::kFp32;
    const std::string blob = serialize(d);
    const RankDescription e = deserialize(blob);
    EXPECT_EQ(e.group.ag_dtype, ag);
    EXPECT_EQ(e.group.grad_dtype, DType::kFp32);
    EXPECT_EQ(serialize(e), blob);
    EXPECT_EQ(agreed_fields(e), agreed_fields(d));
    // The dtype's byte is the only difference from a bf16 description: its code is the enum's.
    RankDescription as_bf16 = d;
    as_bf16.group.ag_dtype = DType::kBf16;
    const std::string other = serialize(as_bf16);
    ASSERT_EQ(other.size(), blob.size());
    std::vector<std::size_t> differ;
    for (std::size_t i = 0; i < blob.size(); ++i) {
      if (blob[i] != other[i]) differ.push_back(i);
    }
    ASSERT_EQ(differ.size(), 1u);
    EXPECT_EQ(static_cast<int>(static_cast<unsigned char>(blob[differ[0]])), static_cast<int>(ag));
    EXPECT_EQ(static_cast<int>(static_cast<unsigned char>(other[differ[0]])), 0);
    std::string unknown = blob;
    unknown[differ[0]] = static_cast<char>(static_cast<int>(kLastDType) + 1);
    try {
      deserialize(unknown);
      FAIL();
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("group.ag_dtype has unknown code 4"),
                std::string::npos)
          << error.what();
    }
  }
  auto fp8 = cluster(2, 4);
  for (auto& d : fp8)
    d.group.ag_dtype = DType::kFp8;
  const Decision agreed = agree(fp8);
  EXPECT_EQ(agreed.backend, Backend::kTide) << agreed.reason;
  EXPECT_EQ(agreed.group.ag_dtype, DType::kFp8);
  auto mixed = cluster(2, 4);  // one rank's dtype differs: an inconsistency naming the field
  mixed[5].group.ag_dtype = DType::kFp8;
  try {
    agree(mixed);
    FAIL();
  } catch (const InconsistentGroup& e) {
    EXPECT_EQ(e.field(), "group.ag_dtype");
    EXPECT_EQ(e.ranks(), std::vector<int>{5});
  }
  auto grads = cluster(1, 2);
  for (auto& d : grads) {
    d.group.ag_dtype = DType::kFp8;
    d.group.grad_dtype = DType::kFp8;
  }
  expect_fallback(grads, FallbackReason::kLayout, "fp8 is an all-gather-only dtype");
  auto cast = cluster(2, 2);
  for (auto& d : cast) {
    d.group.ag_dtype = DType::kFp8;
    d.group.ag.mixed_precision_cast = true;
  }
  expect_fallback(cast, FallbackReason::kPlanOptions, "give it bf16");
}

TEST(Capability, MalformedBlobsAreRejected) {
  const std::string blob = serialize(cluster(1, 2)[0]);
  EXPECT_THROW(deserialize(""), InvalidArgument);
  EXPECT_THROW(deserialize("NOTTIDE!" + blob.substr(8)), InvalidArgument);
  for (std::size_t n = 0; n < blob.size(); n += 7) {
    EXPECT_THROW(deserialize(blob.substr(0, n)), InvalidArgument) << n;
  }
  EXPECT_THROW(deserialize(blob + "x"), InvalidArgument);
  std::string version = blob;
  version[8] = static_cast<char>(kCapabilityFormatVersion + 1);  // a newer format
  EXPECT_THROW(deserialize(version), InvalidArgument);
  // In an exchange, an unreadable description is an inconsistency naming its rank.
  try {
    agree_serialized({blob, blob.substr(0, 20)});
    FAIL();
  } catch (const InconsistentGroup& e) {
    EXPECT_EQ(e.field(), "format");
    EXPECT_EQ(e.ranks(), std::vector<int>{1});
  }
  EXPECT_THROW(agree({}), InvalidArgument);
}

}  // namespace
}  // namespace tide
