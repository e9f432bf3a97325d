// Capability agreement (Sec. 6.3): before a group's first call every rank describes what it wants
// to run and can do, the launcher all-gathers the descriptions, and every rank's agree() on them
// reaches the same decision. A RankDescription's fields are agreed (the group signature, plan
// options, opt-ins and the protocol-shaping versions: the first that differs from rank 0's throws
// InconsistentGroup naming it), reduced (device and driver capabilities: min of numbers, AND of
// flags) or identity (rank, world, host id). A consistent group TIDE cannot run gets kStock and a
// one-line reason, the same on every rank. NVLink multicast only where every rank opted in and is
// capable. agree() is a pure function of the vector. The rules: NOTE [capability agreement] in
// docs/core.md.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tide/core/ag_plan.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/core/topology.hpp"

namespace tide {

// The serialised format's version; a rank running another TIDE build disagrees on it.
inline constexpr std::uint32_t kCapabilityFormatVersion = 4;
// What TIDE needs from every rank (Sec. 2.5): sm_90+, NCCL 2.28 (symmetric windows, LSA).
inline constexpr int kMinComputeCapability = 90;  // major * 10 + minor
inline constexpr int kMinNcclVersion = 22800;     // NCCL_VERSION(2, 28, 0)

// The group's signature and options: agreed fields (NOTE [capability agreement]).
struct GroupSignature {
  std::string name;            // the FSDP2 group (module path), for messages
  int nodes = 1;               // M, as declared by the launcher
  int gpus_per_node = 1;       // L
  bool virtual_nodes = false;  // one host declared as M virtual nodes of L GPUs
  std::vector<ParamShape> params;
  DType ag_dtype = DType::kBf16;
  DType grad_dtype = DType::kBf16;
  RsOptions rs;  // mode, W_wave, k, passes, staging
  AgOptions ag;  // cast, strided runs, last-round groups, head bytes
  int ag_stages = 2;
  // The group's landing slot (NOTE [communicator arena]); -1: its own.
  int landing_slot = -1;
  bool multicast_opt_in = false;  // NVLink multicast: off unless the user asks for it
  // The host backend: no GPU, NCCL or device feature needed, only a plan TIDE accepts.
  bool host_transport = false;
  // The ipc backend (NOTE [ipc fabric]): GPU features needed, NCCL's not.
  bool ipc_transport = false;
};

// What one rank's process can do. Versions are agreed; the rest is reduced.
struct RankCapabilities {
  int cuda_runtime_version = 0;    // CUDART_VERSION of the build, e.g. 13000 (agreed)
  int nccl_version = 0;            // NCCL_VERSION_CODE of the loaded library, 0: none (agreed)
  int compute_capability = 0;      // major * 10 + minor of the rank's device, 0: none
  bool vmm = false;                // cuMemCreate / cuMemMap
  bool stream_memops = false;      // 64-bit stream wait / write value
  bool copy_engine_batch = false;  // cudaMemcpyBatchAsync
  bool symmetric_windows = false;  // ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)
  bool nccl_device_api = false;    // ncclDevCommCreate, LSA pointers
  bool nccl_host_rma = false;      // ncclPutSignal / ncclWaitSignal (NCCL >= 2.29)
  bool multicast_capable = false;  // NVLink multicast; TIDE never uses it unless opted in
  std::int64_t shared_memory_per_block = 0;  // opt-in bytes per block (Sec. 2.5: >= 207 KB)
};

inline constexpr std::int64_t kMinSharedMemoryPerBlock = 207 * 1024;

struct RankDescription {
  std::uint32_t format_version = kCapabilityFormatVersion;  // agreed
  int rank = 0;                                             // identity
  int world = 1;                                            // identity
  std::uint64_t host_id = 0;  // identity: equal on ranks sharing an NVSwitch domain
  GroupSignature group;
  RankCapabilities caps;
};

// Little-endian encoding with a magic and the format version (what the launcher all-gathers);
// deserialize throws InvalidArgument on malformed input.
std::string serialize(const RankDescription& description);
RankDescription deserialize(std::string_view bytes);

// The agreed fields of a description as (name, value) pairs, in the fixed order agree()
// compares them ("group.params[3].rows", "caps.nccl_version", ...).
std::vector<std::pair<std::string, std::string>> agreed_fields(const RankDescription& d);

// Descriptions disagree: neither TIDE nor a fallback can run the group. Same on every rank.
class InconsistentGroup : public std::runtime_error {
 public:
  InconsistentGroup(std::string field, std::vector<int> ranks, const std::string& message)
      : std::runtime_error(message), field_(std::move(field)), ranks_(std::move(ranks)) {}
  const std::string& field() const { return field_; }
  const std::vector<int>& ranks() const { return ranks_; }  // ranks that differ from rank 0

 private:
  std::string field_;
  std::vector<int> ranks_;
};

enum class Backend : std::uint8_t { kTide, kStock };

// Why a consistent group falls back (one per check, in the order agree() makes them).
enum class FallbackReason : std::uint8_t {
  kNone,
  kTooManyParams,      // > kMaxParamsPerGroup
  kTopology,           // M x L outside TIDE's range (L > 8, M < 1, ...)
  kWorldMismatch,      // M x L != the launcher's world
  kNodeSpansHosts,     // a declared node's ranks are on different hosts
  kLayout,             // empty group, non-positive extent, byte overflow
  kPlanOptions,        // a plan option out of range, or a plan the validator rejects
  kComputeCapability,  // some rank below sm_90 or without enough shared memory
  kNccl,               // some rank without NCCL >= 2.28, symmetric windows or the device API
  kDeviceFeatures,     // some rank without VMM or stream memory operations
};

std::string_view fallback_reason_name(FallbackReason reason);

// The reduced capabilities of the group (min / AND over ranks).
struct GroupCapabilities {
  int compute_capability = 0;
  std::int64_t shared_memory_per_block = 0;
  bool vmm = false;
  bool stream_memops = false;
  bool copy_engine_batch = false;
  bool symmetric_windows = false;
  bool nccl_device_api = false;
  bool nccl_host_rma = false;
  bool multicast_capable = false;
  bool operator==(const GroupCapabilities&) const = default;
};

struct Decision {
  Backend backend = Backend::kStock;
  FallbackReason reason_code = FallbackReason::kNone;
  std::string reason;  // one line; empty for kTide
  GroupCapabilities caps;
  bool use_multicast = false;  // opted in by all AND capable on all; otherwise never
  // The plan inputs (valid for kTide; for kStock the signature as agreed).
  GroupSignature group;

  // "tide: group 'x' (M x L = 2 x 4, 37 params): TIDE" or "... stock collectives: <reason>".
  std::string log_line() const;
  bool operator==(const Decision& other) const;
};

// The group's decision from every rank's description (by rank). InvalidArgument (empty),
// InconsistentGroup; `log` receives the one-line decision.
Decision agree(const std::vector<RankDescription>& descriptions,
               const std::function<void(std::string_view)>& log = {});

// The same on serialised descriptions (what the launcher's all-gather delivers).
Decision agree_serialized(const std::vector<std::string>& blobs,
                          const std::function<void(std::string_view)>& log = {});

}  // namespace tide
