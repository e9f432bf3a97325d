// Capability agreement (Sec. 6.3). See NOTE [capability agreement] in docs/core.md.
//
// agree() proceeds in three steps, each deterministic in the gathered vector:
//   1. Identity: every description's world equals the vector's length, its rank its index.
//   2. Agreement: the agreed fields of every rank equal rank 0's; otherwise the first field
//      (in agreed_fields() order) on which any rank differs aborts with InconsistentGroup.
//   3. Support: the signature and the reduced capabilities pass TIDE's contract (Sec. 2.5);
//      the first failing check gives the fallback reason.
#include "tide/core/capability.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>

#include "tide/core/error.hpp"
#include "tide/core/plan_validator.hpp"

namespace tide {
namespace {

constexpr std::array<char, 8> kMagic = {'T', 'I', 'D', 'E', 'C', 'A', 'P', '1'};
constexpr std::uint32_t kMaxSerializedParams = 1u << 20;
constexpr std::uint32_t kMaxStringBytes = 1u << 16;
constexpr int kMaxRanksNamed = 8;

// --- Encoding: little-endian fixed-width integers, strings as u32 length + bytes ----------

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void boolean(bool v) { u8(v ? 1 : 0); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i)
      u8(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i)
      u8(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void i32(int v) { u32(static_cast<std::uint32_t>(v)); }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  void str(const std::string& s) {
    if (s.size() > kMaxStringBytes) {
      throw InvalidArgument("capability description: a name of " + std::to_string(s.size()) +
                            " bytes is longer than the limit of " +
                            std::to_string(kMaxStringBytes));
    }
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  void raw(const char* p, std::size_t n) { out_.append(p, n); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  std::uint8_t u8(const char* what) {
    need(1, what);
    return static_cast<std::uint8_t>(in_[pos_++]);
  }
  bool boolean(const char* what) {
    const std::uint8_t v = u8(what);
    if (v > 1) fail(std::string(what) + " is " + std::to_string(v) + ", not 0 or 1");
    return v == 1;
  }
  std::uint32_t u32(const char* what) {
    need(4, what);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v |= std::uint32_t{static_cast<std::uint8_t>(in_[pos_++])} << (8 * i);
    return v;
  }
  std::uint64_t u64(const char* what) {
    need(8, what);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= std::uint64_t{static_cast<std::uint8_t>(in_[pos_++])} << (8 * i);
    return v;
  }
  int i32(const char* what) { return static_cast<int>(u32(what)); }
  std::int64_t i64(const char* what) { return static_cast<std::int64_t>(u64(what)); }
  std::string str(const char* what) {
    const std::uint32_t n = u32(what);
    if (n > kMaxStringBytes) fail(std::string(what) + " claims " + std::to_string(n) + " bytes");
    need(n, what);
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  std::size_t remaining() const { return in_.size() - pos_; }
  [[noreturn]] void fail(const std::string& why) const {
    throw InvalidArgument("capability description: " + why + " (at byte " + std::to_string(pos_) +
                          " of " + std::to_string(in_.size()) + ")");
  }

 private:
  void need(std::size_t n, const char* what) const {
    if (remaining() < n) fail(std::string("truncated in ") + what);
  }
  std::string_view in_;
  std::size_t pos_ = 0;
};

enum CapFlag : std::uint8_t {
  kFlagVmm = 1u << 0,
  kFlagMemops = 1u << 1,
  kFlagBatch = 1u << 2,
  kFlagWindows = 1u << 3,
  kFlagDeviceApi = 1u << 4,
  kFlagHostRma = 1u << 5,
  kFlagMulticast = 1u << 6,
};
constexpr std::uint8_t kAllFlags = 0x7f;

void write_group(Writer& w, const GroupSignature& g) {
  w.str(g.name);
  w.i32(g.nodes);
  w.i32(g.gpus_per_node);
  w.boolean(g.virtual_nodes);
  if (g.params.size() > kMaxSerializedParams) {
    throw InvalidArgument("capability description: " + std::to_string(g.params.size()) +
                          " parameters exceed the format's limit");
  }
  w.u32(static_cast<std::uint32_t>(g.params.size()));
  for (const ParamShape& p : g.params) {
    w.str(p.name);
    w.i64(p.rows);
    w.i64(p.cols);
  }
  w.u8(static_cast<std::uint8_t>(g.ag_dtype));
  w.u8(static_cast<std::uint8_t>(g.grad_dtype));
  w.i32(g.rs.wave_width);
  w.i32(g.rs.round_width);
  w.u8(static_cast<std::uint8_t>(g.rs.mode));
  w.u8(static_cast<std::uint8_t>(g.rs.sub_slices));
  w.i32(g.rs.passes);
  w.i32(g.rs.staging_slots);
  w.i64(g.rs.staging_chunk_elems);
  w.i32(g.rs.rounds_in_flight);
  w.i32(g.rs.vector_elems);
  w.boolean(g.rs.one_node);
  w.boolean(g.rs.one_node_pull);
  w.boolean(g.ag.mixed_precision_cast);
  w.boolean(g.ag.staged_shards);
  w.i32(g.ag.min_strided_run);
  w.i32(g.ag.max_last_round_groups);
  w.i64(g.ag.head_bytes);
  w.i32(g.ag_stages);
  w.i32(g.landing_slot);
  w.boolean(g.multicast_opt_in);
  w.boolean(g.host_transport);
  w.boolean(g.ipc_transport);
}

GroupSignature read_group(Reader& r) {
  GroupSignature g;
  g.name = r.str("group.name");
  g.nodes = r.i32("group.nodes");
  g.gpus_per_node = r.i32("group.gpus_per_node");
  g.virtual_nodes = r.boolean("group.virtual_nodes");
  const std::uint32_t count = r.u32("group.params.count");
  // Each parameter takes at least 20 bytes: refuse counts the input cannot hold.
  if (count > kMaxSerializedParams || count > r.remaining() / 20) {
    r.fail("group.params.count " + std::to_string(count) + " does not fit the input");
  }
  g.params.resize(count);
  for (ParamShape& p : g.params) {
    p.name = r.str("group.params[].name");
    p.rows = r.i64("group.params[].rows");
    p.cols = r.i64("group.params[].cols");
  }
  const auto dtype = [&r](const char* what) {
    const std::uint8_t v = r.u8(what);
    if (v > static_cast<std::uint8_t>(kLastDType)) {
      r.fail(std::string(what) + " has unknown code " + std::to_string(v));
    }
    return static_cast<DType>(v);
  };
  g.ag_dtype = dtype("group.ag_dtype");
  g.grad_dtype = dtype("group.grad_dtype");
  g.rs.wave_width = r.i32("group.rs.wave_width");
  g.rs.round_width = r.i32("group.rs.round_width");
  const std::uint8_t mode = r.u8("group.rs.mode");
  if (mode > static_cast<std::uint8_t>(RsMode::kSlotReuse)) {
    r.fail("group.rs.mode has unknown code " + std::to_string(mode));
  }
  g.rs.mode = static_cast<RsMode>(mode);
  const std::uint8_t sub_slices = r.u8("group.rs.sub_slices");
  if (sub_slices > static_cast<std::uint8_t>(kLastSubSlices)) {
    r.fail("group.rs.sub_slices has unknown code " + std::to_string(sub_slices));
  }
  g.rs.sub_slices = static_cast<RsSubSlices>(sub_slices);
  g.rs.passes = r.i32("group.rs.passes");
  g.rs.staging_slots = r.i32("group.rs.staging_slots");
  g.rs.staging_chunk_elems = r.i64("group.rs.staging_chunk_elems");
  g.rs.rounds_in_flight = r.i32("group.rs.rounds_in_flight");
  g.rs.vector_elems = r.i32("group.rs.vector_elems");
  g.rs.one_node = r.boolean("group.rs.one_node");
  g.rs.one_node_pull = r.boolean("group.rs.one_node_pull");
  g.ag.mixed_precision_cast = r.boolean("group.ag.mixed_precision_cast");
  g.ag.staged_shards = r.boolean("group.ag.staged_shards");
  g.ag.min_strided_run = r.i32("group.ag.min_strided_run");
  g.ag.max_last_round_groups = r.i32("group.ag.max_last_round_groups");
  g.ag.head_bytes = r.i64("group.ag.head_bytes");
  g.ag_stages = r.i32("group.ag_stages");
  g.landing_slot = r.i32("group.landing_slot");
  g.multicast_opt_in = r.boolean("group.multicast_opt_in");
  g.host_transport = r.boolean("group.host_transport");
  g.ipc_transport = r.boolean("group.ipc_transport");
  return g;
}

std::uint8_t cap_flags(const RankCapabilities& c) {
  std::uint8_t f = 0;
  if (c.vmm) f |= kFlagVmm;
  if (c.stream_memops) f |= kFlagMemops;
  if (c.copy_engine_batch) f |= kFlagBatch;
  if (c.symmetric_windows) f |= kFlagWindows;
  if (c.nccl_device_api) f |= kFlagDeviceApi;
  if (c.nccl_host_rma) f |= kFlagHostRma;
  if (c.multicast_capable) f |= kFlagMulticast;
  return f;
}

// The agreed part of a description as bytes: equal bytes <=> equal agreed fields.
std::string agreed_key(const RankDescription& d) {
  Writer w;
  w.u32(d.format_version);
  write_group(w, d.group);
  w.i32(d.caps.cuda_runtime_version);
  w.i32(d.caps.nccl_version);
  return w.take();
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  const int shown = std::min<int>(static_cast<int>(ranks.size()), kMaxRanksNamed);
  for (int i = 0; i < shown; ++i)
    s += (i ? ", " : "") + std::to_string(ranks[static_cast<std::size_t>(i)]);
  if (static_cast<int>(ranks.size()) > shown) {
    s += " and " + std::to_string(ranks.size() - static_cast<std::size_t>(shown)) + " more";
  }
  return s;
}

[[noreturn]] void throw_inconsistent(const std::string& group, const std::string& field,
                                     const std::string& reference,
                                     const std::vector<std::pair<int, std::string>>& differing) {
  std::vector<int> ranks;
  std::string detail;
  for (const auto& [rank, value] : differing) {
    ranks.push_back(rank);
    if (static_cast<int>(ranks.size()) <= kMaxRanksNamed) {
      detail += (ranks.size() > 1 ? ", rank " : "rank ") + std::to_string(rank) + " has " + value;
    }
  }
  if (static_cast<int>(ranks.size()) > kMaxRanksNamed) {
    detail +=
        " and " + std::to_string(ranks.size() - static_cast<std::size_t>(kMaxRanksNamed)) + " more";
  }
  throw InconsistentGroup(field, ranks,
                          "tide: capability agreement failed for group '" + group + "': field '" +
                              field + "' differs: rank 0 has " + reference + "; " + detail +
                              " (differing ranks: " + ranks_text(ranks) +
                              "); every rank aborts this group");
}

std::string cc_text(int cc) {
  return std::to_string(cc / 10) + "." + std::to_string(cc % 10);
}

std::string nccl_text(int code) {
  if (code <= 0) return "none";
  return std::to_string(code / 10000) + "." + std::to_string((code / 100) % 100) + "." +
         std::to_string(code % 100);
}

// The lowest rank whose value of `get` is the group's minimum.
template <typename Get>
int argmin_rank(const std::vector<RankDescription>& ds, Get get) {
  int best = 0;
  for (int r = 1; r < static_cast<int>(ds.size()); ++r) {
    if (get(ds[static_cast<std::size_t>(r)]) < get(ds[static_cast<std::size_t>(best)])) best = r;
  }
  return best;
}

int first_rank_without(const std::vector<RankDescription>& ds, std::uint8_t flag) {
  for (int r = 0; r < static_cast<int>(ds.size()); ++r) {
    if (!(cap_flags(ds[static_cast<std::size_t>(r)].caps) & flag)) return r;
  }
  return -1;
}

GroupCapabilities reduce_caps(const std::vector<RankDescription>& ds) {
  GroupCapabilities g;
  g.compute_capability = std::numeric_limits<int>::max();
  g.shared_memory_per_block = std::numeric_limits<std::int64_t>::max();
  std::uint8_t flags = kAllFlags;
  for (const RankDescription& d : ds) {
    g.compute_capability = std::min(g.compute_capability, d.caps.compute_capability);
    g.shared_memory_per_block = std::min(g.shared_memory_per_block, d.caps.shared_memory_per_block);
    flags &= cap_flags(d.caps);
  }
  g.vmm = flags & kFlagVmm;
  g.stream_memops = flags & kFlagMemops;
  g.copy_engine_batch = flags & kFlagBatch;
  g.symmetric_windows = flags & kFlagWindows;
  g.nccl_device_api = flags & kFlagDeviceApi;
  g.nccl_host_rma = flags & kFlagHostRma;
  g.multicast_capable = flags & kFlagMulticast;
  return g;
}

struct Fallback {
  FallbackReason code;
  std::string why;
};

// Step 3: the first check the agreed group fails, or nothing.
std::optional<Fallback> check_support(const std::vector<RankDescription>& ds,
                                      const GroupCapabilities& caps) {
  const GroupSignature& g = ds.front().group;
  const int world = static_cast<int>(ds.size());
  if (g.params.size() > static_cast<std::size_t>(kMaxParamsPerGroup)) {
    return Fallback{FallbackReason::kTooManyParams,
                    std::to_string(g.params.size()) + " parameters, more than TIDE's limit of " +
                        std::to_string(kMaxParamsPerGroup) + " (Sec. 2.5)"};
  }
  std::optional<Topology> topology;
  try {
    topology.emplace(g.nodes, g.gpus_per_node);
  } catch (const std::exception& e) {
    return Fallback{FallbackReason::kTopology, std::string("topology: ") + e.what()};
  }
  if (topology->world() != world) {
    return Fallback{FallbackReason::kWorldMismatch, "declared M x L = " + std::to_string(g.nodes) +
                                                        " x " + std::to_string(g.gpus_per_node) +
                                                        " = " + std::to_string(topology->world()) +
                                                        " ranks, but the launcher's world has " +
                                                        std::to_string(world)};
  }
  // A declared node is one NVSwitch domain; with virtual nodes, the whole world is one host.
  for (int r = 0; r < world; ++r) {
    const int anchor = g.virtual_nodes ? 0 : topology->rank(topology->node_of(r), 0);
    if (ds[static_cast<std::size_t>(r)].host_id != ds[static_cast<std::size_t>(anchor)].host_id) {
      return Fallback{FallbackReason::kNodeSpansHosts,
                      g.virtual_nodes
                          ? "virtual nodes declared, but ranks 0 and " + std::to_string(r) +
                                " are on different hosts"
                          : "node " + std::to_string(topology->node_of(r)) +
                                " spans hosts: ranks " + std::to_string(anchor) + " and " +
                                std::to_string(r) + " are on different hosts"};
    }
  }
  std::optional<GroupLayout> layout;
  try {
    layout.emplace(*topology, g.params, g.ag_dtype, g.grad_dtype);
  } catch (const std::exception& e) {
    return Fallback{FallbackReason::kLayout, std::string("layout: ") + e.what()};
  }
  try {
    if (g.ag_stages != 1 && g.ag_stages != 2) {
      throw InvalidArgument("ag_stages must be 1 or 2 (got " + std::to_string(g.ag_stages) + ")");
    }
    const RsPlan rs(*layout, g.rs);
    const AgPlan ag(*layout, g.ag);
    if (const ValidationResult v = validate_rs_plan(rs); !v.accepted) {
      return Fallback{FallbackReason::kPlanOptions,
                      "the plan validator rejects the "
                      "reduce-scatter plan: " +
                          v.reason};
    }
  } catch (const std::exception& e) {
    return Fallback{FallbackReason::kPlanOptions, std::string("plan options: ") + e.what()};
  }
  if (g.host_transport) return std::nullopt;  // shared memory: no device feature needed
  if (caps.compute_capability < kMinComputeCapability) {
    const int r =
        argmin_rank(ds, [](const RankDescription& d) { return d.caps.compute_capability; });
    return Fallback{FallbackReason::kComputeCapability,
                    "rank " + std::to_string(r) + " has compute capability " +
                        cc_text(caps.compute_capability) + ", TIDE needs " +
                        cc_text(kMinComputeCapability)};
  }
  if (caps.shared_memory_per_block < kMinSharedMemoryPerBlock) {
    const int r =
        argmin_rank(ds, [](const RankDescription& d) { return d.caps.shared_memory_per_block; });
    return Fallback{FallbackReason::kComputeCapability,
                    "rank " + std::to_string(r) + " has " +
                        std::to_string(caps.shared_memory_per_block) +
                        " bytes of shared memory per block, TIDE needs " +
                        std::to_string(kMinSharedMemoryPerBlock)};
  }
  const int nccl = ds.front().caps.nccl_version;  // agreed
  if (g.ipc_transport) {  // CUDA IPC windows (NOTE [ipc fabric]): no NCCL feature is needed
    if (const int r = first_rank_without(ds, kFlagMemops); r >= 0) {
      return Fallback{FallbackReason::kDeviceFeatures,
                      "rank " + std::to_string(r) + " has no 64-bit stream memory operations"};
    }
    return std::nullopt;
  }
  if (nccl < kMinNcclVersion) {
    return Fallback{FallbackReason::kNccl, "NCCL " + nccl_text(nccl) + ", TIDE needs " +
                                               nccl_text(kMinNcclVersion) +
                                               " (symmetric windows, LSA pointers)"};
  }
  if (const int r = first_rank_without(ds, kFlagWindows); r >= 0) {
    return Fallback{FallbackReason::kNccl,
                    "rank " + std::to_string(r) + " cannot register NCCL symmetric windows"};
  }
  if (const int r = first_rank_without(ds, kFlagDeviceApi); r >= 0) {
    return Fallback{FallbackReason::kNccl,
                    "rank " + std::to_string(r) + " has no NCCL device API (LSA pointers)"};
  }
  if (const int r = first_rank_without(ds, kFlagVmm); r >= 0) {
    return Fallback{FallbackReason::kDeviceFeatures,
                    "rank " + std::to_string(r) + " has no CUDA virtual memory management"};
  }
  if (const int r = first_rank_without(ds, kFlagMemops); r >= 0) {
    return Fallback{FallbackReason::kDeviceFeatures,
                    "rank " + std::to_string(r) + " has no 64-bit stream memory operations"};
  }
  return std::nullopt;
}

}  // namespace

std::string serialize(const RankDescription& d) {
  Writer w;
  w.raw(kMagic.data(), kMagic.size());
  w.u32(d.format_version);
  w.i32(d.rank);
  w.i32(d.world);
  w.u64(d.host_id);
  write_group(w, d.group);
  w.i32(d.caps.cuda_runtime_version);
  w.i32(d.caps.nccl_version);
  w.i32(d.caps.compute_capability);
  w.u8(cap_flags(d.caps));
  w.i64(d.caps.shared_memory_per_block);
  return w.take();
}

RankDescription deserialize(std::string_view bytes) {
  if (bytes.size() < kMagic.size() ||
      std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    throw InvalidArgument("capability description: not a TIDE capability description (bad magic)");
  }
  Reader r(bytes.substr(kMagic.size()));
  RankDescription d;
  d.format_version = r.u32("format_version");
  if (d.format_version != kCapabilityFormatVersion) {
    r.fail("format version " + std::to_string(d.format_version) + ", this build reads " +
           std::to_string(kCapabilityFormatVersion));
  }
  d.rank = r.i32("rank");
  d.world = r.i32("world");
  d.host_id = r.u64("host_id");
  d.group = read_group(r);
  d.caps.cuda_runtime_version = r.i32("caps.cuda_runtime_version");
  d.caps.nccl_version = r.i32("caps.nccl_version");
  d.caps.compute_capability = r.i32("caps.compute_capability");
  const std::uint8_t flags = r.u8("caps.flags");
  if (flags & ~kAllFlags) r.fail("caps.flags has unknown bits " + std::to_string(flags));
  d.caps.vmm = flags & kFlagVmm;
  d.caps.stream_memops = flags & kFlagMemops;
  d.caps.copy_engine_batch = flags & kFlagBatch;
  d.caps.symmetric_windows = flags & kFlagWindows;
  d.caps.nccl_device_api = flags & kFlagDeviceApi;
  d.caps.nccl_host_rma = flags & kFlagHostRma;
  d.caps.multicast_capable = flags & kFlagMulticast;
  d.caps.shared_memory_per_block = r.i64("caps.shared_memory_per_block");
  if (r.remaining() != 0) r.fail(std::to_string(r.remaining()) + " trailing bytes");
  return d;
}

std::vector<std::pair<std::string, std::string>> agreed_fields(const RankDescription& d) {
  const GroupSignature& g = d.group;
  std::vector<std::pair<std::string, std::string>> f;
  f.reserve(32 + 3 * g.params.size());
  const auto add = [&f](std::string name, std::string value) {
    f.emplace_back(std::move(name), std::move(value));
  };
  const auto flag = [](bool b) { return std::string(b ? "true" : "false"); };
  add("format_version", std::to_string(d.format_version));
  add("group.name", "'" + g.name + "'");
  add("group.nodes", std::to_string(g.nodes));
  add("group.gpus_per_node", std::to_string(g.gpus_per_node));
  add("group.virtual_nodes", flag(g.virtual_nodes));
  add("group.params.count", std::to_string(g.params.size()));
  for (std::size_t i = 0; i < g.params.size(); ++i) {
    const std::string p = "group.params[" + std::to_string(i) + "]";
    add(p + ".name", "'" + g.params[i].name + "'");
    add(p + ".rows", std::to_string(g.params[i].rows));
    add(p + ".cols", std::to_string(g.params[i].cols));
  }
  add("group.ag_dtype", std::string(dtype_name(g.ag_dtype)));
  add("group.grad_dtype", std::string(dtype_name(g.grad_dtype)));
  add("group.rs.wave_width", std::to_string(g.rs.wave_width));
  add("group.rs.round_width", std::to_string(g.rs.round_width));
  add("group.rs.mode", std::string(mode_name(g.rs.mode)));
  add("group.rs.sub_slices", std::string(sub_slices_name(g.rs.sub_slices)));
  add("group.rs.passes", std::to_string(g.rs.passes));
  add("group.rs.staging_slots", std::to_string(g.rs.staging_slots));
  add("group.rs.staging_chunk_elems", std::to_string(g.rs.staging_chunk_elems));
  add("group.rs.rounds_in_flight", std::to_string(g.rs.rounds_in_flight));
  add("group.rs.vector_elems", std::to_string(g.rs.vector_elems));
  add("group.rs.one_node", flag(g.rs.one_node));
  add("group.rs.one_node_pull", flag(g.rs.one_node_pull));
  add("group.ag.mixed_precision_cast", flag(g.ag.mixed_precision_cast));
  add("group.ag.staged_shards", flag(g.ag.staged_shards));
  add("group.ag.min_strided_run", std::to_string(g.ag.min_strided_run));
  add("group.ag.max_last_round_groups", std::to_string(g.ag.max_last_round_groups));
  add("group.ag.head_bytes", std::to_string(g.ag.head_bytes));
  add("group.ag_stages", std::to_string(g.ag_stages));
  add("group.landing_slot", std::to_string(g.landing_slot));
  add("group.multicast_opt_in", flag(g.multicast_opt_in));
  add("group.host_transport", flag(g.host_transport));
  add("group.ipc_transport", flag(g.ipc_transport));
  add("caps.cuda_runtime_version", std::to_string(d.caps.cuda_runtime_version));
  add("caps.nccl_version", nccl_text(d.caps.nccl_version));
  return f;
}

std::string_view fallback_reason_name(FallbackReason reason) {
  switch (reason) {
    case FallbackReason::kNone:
      return "none";
    case FallbackReason::kTooManyParams:
      return "too-many-params";
    case FallbackReason::kTopology:
      return "topology";
    case FallbackReason::kWorldMismatch:
      return "world-mismatch";
    case FallbackReason::kNodeSpansHosts:
      return "node-spans-hosts";
    case FallbackReason::kLayout:
      return "layout";
    case FallbackReason::kPlanOptions:
      return "plan-options";
    case FallbackReason::kComputeCapability:
      return "compute-capability";
    case FallbackReason::kNccl:
      return "nccl";
    case FallbackReason::kDeviceFeatures:
      return "device-features";
  }
  return "unknown";
}

std::string Decision::log_line() const {
  std::string s = "tide: group '" + group.name + "' (M x L = " + std::to_string(group.nodes) +
                  " x " + std::to_string(group.gpus_per_node) + ", " +
                  std::to_string(group.params.size()) + " params): ";
  if (backend == Backend::kTide) {
    return s + "TIDE" + (use_multicast ? " (NVLink multicast opted in)" : "");
  }
  return s + "stock collectives [" + std::string(fallback_reason_name(reason_code)) +
         "]: " + reason;
}

bool Decision::operator==(const Decision& other) const {
  if (backend != other.backend || reason_code != other.reason_code || reason != other.reason ||
      !(caps == other.caps) || use_multicast != other.use_multicast) {
    return false;
  }
  Writer a;
  Writer b;
  write_group(a, group);
  write_group(b, other.group);
  return a.take() == b.take();
}

Decision agree(const std::vector<RankDescription>& ds,
               const std::function<void(std::string_view)>& log) {
  if (ds.empty()) throw InvalidArgument("capability agreement needs at least one description");
  const std::string& name = ds.front().group.name;
  const int world = static_cast<int>(ds.size());

  // 1. Identity.
  {
    std::vector<std::pair<int, std::string>> bad;
    for (int r = 0; r < world; ++r) {
      const int w = ds[static_cast<std::size_t>(r)].world;
      if (w != world) bad.emplace_back(r, std::to_string(w));
    }
    if (!bad.empty()) {
      std::vector<int> ranks;
      for (const auto& b : bad)
        ranks.push_back(b.first);
      throw InconsistentGroup("world", ranks,
                              "tide: capability agreement failed for group '" + name +
                                  "': field 'world' differs from the " + std::to_string(world) +
                                  " gathered descriptions: rank " + std::to_string(bad[0].first) +
                                  " has " + bad[0].second + " (differing ranks: " +
                                  ranks_text(ranks) + "); every rank aborts this group");
    }
    std::vector<int> misplaced;
    for (int r = 0; r < world; ++r) {
      if (ds[static_cast<std::size_t>(r)].rank != r) misplaced.push_back(r);
    }
    if (!misplaced.empty()) {
      const int r = misplaced.front();
      throw InconsistentGroup("rank", misplaced,
                              "tide: capability agreement failed for group '" + name +
                                  "': field 'rank': the description gathered at position " +
                                  std::to_string(r) + " says rank " +
                                  std::to_string(ds[static_cast<std::size_t>(r)].rank) +
                                  " (misplaced positions: " + ranks_text(misplaced) +
                                  "); every rank aborts this group");
    }
  }

  // 2. Agreement: compare agreed bytes; name fields only for ranks that differ.
  {
    const std::string key0 = agreed_key(ds.front());
    std::vector<int> differing;
    for (int r = 1; r < world; ++r) {
      if (agreed_key(ds[static_cast<std::size_t>(r)]) != key0) differing.push_back(r);
    }
    if (!differing.empty()) {
      const auto f0 = agreed_fields(ds.front());
      std::size_t first = std::numeric_limits<std::size_t>::max();
      std::vector<std::vector<std::pair<std::string, std::string>>> fields;
      for (int r : differing) {
        fields.push_back(agreed_fields(ds[static_cast<std::size_t>(r)]));
        const auto& fr = fields.back();
        for (std::size_t i = 0; i < std::min(f0.size(), fr.size()) && i < first; ++i) {
          if (fr[i] != f0[i]) {
            first = i;
            break;
          }
        }
      }
      if (first == std::numeric_limits<std::size_t>::max()) {
        throw InternalError("capability agreement: agreed bytes differ but no field does");
      }
      std::vector<std::pair<int, std::string>> at_first;
      for (std::size_t k = 0; k < differing.size(); ++k) {
        const auto& fr = fields[k];
        if (first < fr.size() && fr[first] != f0[first]) {
          at_first.emplace_back(differing[k], fr[first].second);
        }
      }
      throw_inconsistent(name, f0[first].first, f0[first].second, at_first);
    }
  }

  // 3. Support.
  Decision d;
  d.group = ds.front().group;
  d.caps = reduce_caps(ds);
  if (auto fallback = check_support(ds, d.caps)) {
    d.backend = Backend::kStock;
    d.reason_code = fallback->code;
    d.reason = std::move(fallback->why);
  } else {
    d.backend = Backend::kTide;
    d.use_multicast = d.group.multicast_opt_in && d.caps.multicast_capable;
  }
  if (log) log(d.log_line());
  return d;
}

Decision agree_serialized(const std::vector<std::string>& blobs,
                          const std::function<void(std::string_view)>& log) {
  std::vector<RankDescription> ds;
  ds.reserve(blobs.size());
  for (std::size_t r = 0; r < blobs.size(); ++r) {
    try {
      ds.push_back(deserialize(blobs[r]));
    } catch (const InvalidArgument& e) {
      // A rank on another TIDE build (or a corrupted exchange): every rank sees the same bytes,
      // so every rank reports the same rank.
      throw InconsistentGroup("format", {static_cast<int>(r)},
                              "tide: capability agreement failed: the description of rank " +
                                  std::to_string(r) + " cannot be read: " + e.what() +
                                  "; every rank aborts this group");
    }
  }
  return agree(ds, log);
}

}  // namespace tide
