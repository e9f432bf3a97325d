// `tide check-runtime`: the runtime end to end across processes. It launches one process per
// rank; each registers the groups, then makes K calls in FSDP2's order (forward all-gathers,
// then per group in reverse its backward all-gather and reduce-scatter, step after step) with
// fresh inputs at fresh addresses on every call, and checks every output on every rank
// against the definition in TIDE's arithmetic order (all-gathers bit for bit against Eq. 2,
// reduce-scatters bit for bit against collective_reference). Faults: a rank killed at a call,
// or a rank issuing two calls in the other order; every other rank must then fail within the
// timeout with one line naming the cause.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "arena_json.hpp"
#include "call_memory.hpp"
#include "commands.hpp"
#include "shapes.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/collective_reference.hpp"
#include "tide/core/error.hpp"
#include "tide/core/models.hpp"
#include "tide/core/process.hpp"
#include "tide/runtime/communicator.hpp"

namespace tide::cli {
namespace {

using nlohmann::json;

struct CheckRuntimeArgs {
  std::string backend = "host";
  int procs = 0;
  int nodes = 0;
  int gpus_per_node = 0;
  std::string groups;
  std::string model;
  int calls = 12;
  std::uint64_t seed = 1;
  std::string mode = "in-place";
  std::string sub_slices = std::string(sub_slices_name(RsOptions{}.sub_slices));
  bool cast = false;
  std::string ag_dtype = "bf16";  // the all-gather dtype (fp8, u8: random byte codes)
  bool staged_shards = false;
  bool ring = false;
  bool nodes_as_hosts = false;
  int kill_rank = -1;
  int kill_at_call = -1;
  int misorder_rank = -1;
  int stall_rank = -1;
  int stall_at_call = -1;
  int release_rank = -1;  // aborts (releases its waits) right after enqueuing this call
  int release_at_call = -1;
  double timeout_s = 30.0;
  double max_gib = 4.0;
  bool json = false;
};

struct CallSpec {
  bool all_gather = true;
  int group = 0;
};

// FSDP2's order: forward all-gathers, then per group in reverse its re-gather and its
// reduce-scatter; repeated step after step up to `calls`.
std::vector<CallSpec> fsdp2_order(int groups, int calls) {
  std::vector<CallSpec> step;
  for (int g = 0; g < groups; ++g)
    step.push_back({true, g});
  for (int g = groups - 1; g >= 0; --g) {
    step.push_back({true, g});
    step.push_back({false, g});
  }
  std::vector<CallSpec> out;
  for (int i = 0; i < calls; ++i)
    out.push_back(step[static_cast<std::size_t>(i) % step.size()]);
  return out;
}

std::vector<NamedGroup> parse_groups(const CheckRuntimeArgs& a) {
  std::vector<NamedGroup> groups;
  if (a.groups.empty() == a.model.empty()) {
    throw InvalidArgument("give exactly one of --groups and --model");
  }
  if (!a.model.empty()) {
    if (a.model.find(':') != std::string::npos) return {resolve_group("", a.model)};
    for (const ModelPreset& m : model_presets()) {
      if (m.name != a.model) continue;
      for (const ModelGroup& g : m.groups)
        groups.push_back({a.model + ":" + g.name, g.params});
      return groups;
    }
    find_model_group(a.model);  // throws, listing the known names
  }
  return parse_group_list(a.groups, "group");
}

// Swaps the first two reduce-scatters of different groups (the step-call-order fault).
void misorder(std::vector<CallSpec>& order) {
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i].all_gather) continue;
    for (std::size_t j = i + 1; j < order.size(); ++j) {
      if (!order[j].all_gather && order[j].group != order[i].group) {
        std::swap(order[i], order[j]);
        return;
      }
    }
  }
}

// Every rank's inputs of call `call` are drawn from (seed, call), so every process knows
// every rank's data and can compute the expected outputs itself.
std::mt19937_64 call_rng(std::uint64_t seed, int call) {
  std::seed_seq seq{seed, static_cast<std::uint64_t>(call), std::uint64_t{0x7469646521}};
  return std::mt19937_64(seq);
}

// Packed shards in the all-gather dtype (or fp32 masters) of every rank for an all-gather call.
struct AgInputs {
  std::vector<std::vector<std::byte>> packed;  // [rank]: the shard as landed (S bytes)
  std::vector<std::vector<float>> masters;     // [rank]: fp32 masters (with a cast)
};

// bf16 (rounded from fp32 masters with a cast), fp32, or random byte codes 1..255 for fp8 and
// u8 (NOTE [1-byte all-gather items]).
AgInputs ag_inputs(std::mt19937_64& rng, const GroupLayout& layout, bool cast) {
  AgInputs in;
  const int world = layout.topology().world();
  for (int r = 0; r < world; ++r) {
    std::vector<float> master(static_cast<std::size_t>(layout.shard_elems()));
    for (float& v : master)
      v = random_value(rng, cast ? DType::kFp32 : layout.ag_dtype());
    std::vector<std::byte> shard(static_cast<std::size_t>(layout.shard_bytes()));
    store_values(master, layout.ag_dtype(), shard);
    in.packed.push_back(std::move(shard));
    if (cast) in.masters.push_back(std::move(master));
  }
  return in;
}

struct WorkerResult {
  int calls = 0;
  std::int64_t mismatches = 0;
  std::int64_t replays = 0;        // calls that ran as replayed CUDA graphs (GPU backends)
  std::int64_t captures = 0;       // calls that captured their slot's graph (then launched it)
  std::int64_t rail_messages = 0;  // sent to ranks of other hosts (--nodes-as-hosts)
  std::int64_t rail_message_bytes = 0;
  std::vector<std::string> lanes;  // per group: "<all-gather lane>/<reduce-scatter lane>"
  // per group: GroupStats::message_path (NOTE [one-sided messages]), with the reason where
  // not one-sided; empty where the group sends no messages
  std::vector<std::string> message_paths;
  // per group: why its slot graphs cannot take fresh pointers, "<all-gather> | <reduce-scatter>"
  // (empty where both can)
  std::vector<std::string> repoint_failures;
  std::string error;
  runtime::ArenaInfo arena;
};

// A call's buffers in the backend's memory, freed when the next call's are made (so every
// call sees fresh addresses) or when the worker ends.
class Buffers {
 public:
  explicit Buffers(CallMemory& memory) : memory_(memory) {}
  ~Buffers() {
    for (auto* list : {&previous_, &current_}) {
      for (std::byte* p : *list)
        memory_.release(p);
    }
  }
  std::byte* make(const void* data, std::size_t bytes) {
    std::byte* p = memory_.allocate(bytes);
    current_.push_back(p);
    if (data != nullptr) memory_.write(p, data, bytes);
    return p;
  }
  void next_call() {
    for (std::byte* p : previous_)
      memory_.release(p);
    previous_.swap(current_);
    current_.clear();
  }

 private:
  CallMemory& memory_;
  std::vector<std::byte*> previous_, current_;
};

// --release-rank: the rank aborts while its call is in flight, as its watchdog does on a
// timeout; its peers still wait for its messages (NOTE [abort relay]).
void release_mid_call(const CheckRuntimeArgs& a, runtime::Communicator& comm, int rank, int call) {
  if (rank != a.release_rank || call != a.release_at_call) return;
  comm.abort("check-runtime --release-rank " + std::to_string(rank) + " at call " +
             std::to_string(call));
}

WorkerResult run_worker(const CheckRuntimeArgs& a, const std::vector<NamedGroup>& groups, int rank,
                        const std::filesystem::path& store_dir) {
  WorkerResult result;
  runtime::CommunicatorOptions o;
  o.rank = rank;
  o.world = a.procs;
  o.gpus_per_node = a.gpus_per_node;
  o.backend = runtime::parse_backend(a.backend);
  o.store = std::make_shared<FileStore>(store_dir);
  o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000));
  o.fault_injection.stall_rank = a.stall_rank;
  o.fault_injection.stall_at_call = a.stall_at_call;
  o.fault_injection.release_rank = a.release_rank;
  // NOTE [abort relay]: the peers' watchdogs time out before the store tells them.
  o.fault_injection.release_hold =
      std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1500));
  o.emulation.nodes_as_hosts = a.nodes_as_hosts;
  const bool gpu = o.backend != runtime::BackendKind::kHost;
  if (gpu) {
    const int devices = visible_devices();
    if (devices < 1) throw Unsupported("no CUDA device is visible to rank " + std::to_string(rank));
    o.device = rank % devices;
  }
  std::unique_ptr<CallMemory> memory = gpu ? device_call_memory(o.device) : host_call_memory();
  auto comm = runtime::Communicator::create(o);
  const RsMode mode = a.mode == "slot-reuse" ? RsMode::kSlotReuse : RsMode::kInPlace;
  const Topology topo(a.nodes, a.gpus_per_node);
  std::vector<int> ids;
  std::vector<GroupLayout> layouts;
  std::vector<RsPlan> plans;
  for (const NamedGroup& g : groups) {
    runtime::GroupSpec spec;
    spec.name = g.name;
    spec.params = g.params;
    spec.mode = mode;
    spec.sub_slices = parse_sub_slices(a.sub_slices);
    spec.cast = a.cast;
    spec.ag_dtype = parse_dtype(a.ag_dtype, "--ag-dtype");
    spec.staged_shards = a.staged_shards;
    // FSDP2's ring (App. F): group g lands in slot g mod 2, released after its check.
    spec.landing_slot = a.ring ? static_cast<int>(ids.size()) % 2 : -1;
    const runtime::Registration reg = comm->register_group(spec);
    if (reg.group < 0) throw Unsupported("group '" + g.name + "' refused: " + reg.reason);
    ids.push_back(reg.group);
    layouts.emplace_back(topo, g.params, spec.ag_dtype, DType::kBf16);
    RsOptions rs;
    rs.mode = mode;
    rs.sub_slices = spec.sub_slices;
    // As the runtime chooses (NOTE [one-node TIDE-RS]; communicator_base.cpp).
    rs.one_node = runtime::one_node_layout();
    rs.one_node_pull = false;
    plans.emplace_back(layouts.back(), rs);
  }
  std::vector<CallSpec> order = fsdp2_order(static_cast<int>(groups.size()), a.calls);
  if (rank == a.misorder_rank) misorder(order);
  Buffers buffers(*memory);
  for (int call = 0; call < a.calls; ++call) {
    const CallSpec c = order[static_cast<std::size_t>(call)];
    if (rank == a.kill_rank && call == a.kill_at_call) raise(SIGKILL);
    const int g = c.group;
    const GroupLayout& layout = layouts[static_cast<std::size_t>(g)];
    const runtime::GroupInfo& info = comm->info(ids[static_cast<std::size_t>(g)]);
    std::mt19937_64 rng = call_rng(a.seed, call);
    buffers.next_call();
    if (c.all_gather) {
      const AgInputs in = ag_inputs(rng, layout, a.cast);
      const auto& packed = in.packed[static_cast<std::size_t>(rank)];
      std::vector<const void*> shards;
      // Odd calls copy in from pointers; shards staged per call always come by pointer.
      const bool by_pointer = a.cast || a.staged_shards || call % 2 == 1;
      for (int p = 0; p < layout.param_count() && by_pointer; ++p) {
        const ParamLayout& pl = layout.param(p);
        const void* src =
            a.cast ? static_cast<const void*>(in.masters[static_cast<std::size_t>(rank)].data() +
                                              pl.out_offset)
                   : static_cast<const void*>(packed.data() + pl.offset);
        shards.push_back(buffers.make(
            src, static_cast<std::size_t>(a.cast ? pl.shard_elems() * 4 : pl.shard_bytes)));
      }
      if (!by_pointer) {
        memory->write(info.resident, packed.data(), static_cast<std::size_t>(layout.shard_bytes()));
      }
      // Poison: 0xFF bytes, or 0 for 1-byte items (their codes are 1..255).
      memory->fill(info.landing, item_bytes(layout.ag_dtype()) == 1 ? 0x00 : 0xFF,
                   static_cast<std::size_t>(info.landing_bytes));
      comm->all_gather(ids[static_cast<std::size_t>(g)], memory->stream(), shards);
      release_mid_call(a, *comm, rank, call);
      memory->finish();
      comm->check();  // a call the watchdog found stalled (its output is garbage) raises
      std::vector<std::byte> landing(static_cast<std::size_t>(info.landing_bytes));
      memory->read(landing.data(), info.landing, landing.size());
      for (int p = 0; p < layout.param_count(); ++p) {
        const ParamLayout& pl = layout.param(p);
        for (int src = 0; src < layout.topology().world(); ++src) {
          const std::int64_t bytes =
              layout.valid_rows(p, src) * pl.cols * item_bytes(layout.ag_dtype());
          const std::byte* got = landing.data() + layout.landing_offset(p, src);
          if (std::memcmp(got, in.packed[static_cast<std::size_t>(src)].data() + pl.offset,
                          static_cast<std::size_t>(bytes)) != 0) {
            ++result.mismatches;
          }
        }
      }
      comm->release(ids[static_cast<std::size_t>(g)], memory->stream());  // NOTE [runtime] 7
    } else {
      const std::vector<RankGrads> grads = random_grads(rng, layout);
      const float alpha = (call % 3 == 0) ? 1.0f : 1.0f / static_cast<float>(a.procs);
      const bool accumulate = call % 4 == 3;
      std::vector<std::vector<float>> initial(static_cast<std::size_t>(a.procs));
      for (auto& v : initial) {
        v.resize(static_cast<std::size_t>(layout.shard_elems()));
        for (float& x : v)
          x = random_value(rng, DType::kFp32);
      }
      std::vector<const void*> ptrs;
      for (int p = 0; p < layout.param_count(); ++p) {
        const auto& values = grads[static_cast<std::size_t>(rank)][static_cast<std::size_t>(p)];
        std::vector<std::byte> bytes(values.size() * 2);
        store_values(values, DType::kBf16, bytes);
        ptrs.push_back(buffers.make(bytes.data(), bytes.size()));
      }
      const std::size_t out_bytes = static_cast<std::size_t>(layout.shard_elems()) * 4;
      std::byte* out = buffers.make(nullptr, out_bytes);
      if (accumulate) {
        memory->write(out, initial[static_cast<std::size_t>(rank)].data(), out_bytes);
      } else {
        memory->fill(out, 0xFF, out_bytes);  // poison
      }
      comm->reduce_scatter(ids[static_cast<std::size_t>(g)], memory->stream(), ptrs,
                           reinterpret_cast<float*>(out), alpha, accumulate);
      release_mid_call(a, *comm, rank, call);
      memory->finish();
      comm->check();
      std::vector<float> got(static_cast<std::size_t>(layout.shard_elems()));
      memory->read(got.data(), out, out_bytes);
      // NOTE [runtime] 11: the expert-parallel lane sums in its own order.
      const auto expected =
          info.reduce_scatter_lane == "ep"
              ? ep_rs_expected(layout, grads, alpha, accumulate, initial)
              : rs_expected(plans[static_cast<std::size_t>(g)], grads, alpha, accumulate, initial);
      const auto& want = expected[static_cast<std::size_t>(rank)];
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &want[i], 4) != 0) ++result.mismatches;
      }
    }
    ++result.calls;
  }
  result.arena = comm->arena();
  for (const int id : ids) {
    const runtime::GroupInfo& info = comm->info(id);
    result.lanes.push_back(info.all_gather_lane + "/" + info.reduce_scatter_lane +
                           (info.lane_reason.empty() ? "" : " (" + info.lane_reason + ")"));
    const runtime::GroupStats s = comm->stats(id);
    result.replays += s.all_gather_replays + s.reduce_scatter_replays;
    result.captures += s.all_gather_graph_captures + s.reduce_scatter_graph_captures;
    result.rail_messages += s.rail_messages;
    result.rail_message_bytes += s.rail_message_bytes;
    result.message_paths.push_back(
        s.message_path + (s.message_path_reason.empty() ? "" : " (" + s.message_path_reason + ")"));
    result.repoint_failures.push_back(
        s.all_gather_repoint_failure.empty() && s.reduce_scatter_repoint_failure.empty()
            ? ""
            : s.all_gather_repoint_failure + " | " + s.reduce_scatter_repoint_failure);
  }
  return result;
}

// The lines a rank's process wrote to its stderr file that start with "tide: ".
std::vector<std::string> tide_lines(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("tide: ", 0) == 0) lines.push_back(line);
  }
  return lines;
}

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

void check_args(CheckRuntimeArgs& a) {
  if (a.backend != "host" && a.backend != "nccl" && a.backend != "ipc") {
    throw InvalidArgument("--backend must be host, nccl or ipc (got '" + a.backend + "')");
  }
  if (a.mode != "in-place" && a.mode != "slot-reuse") {
    throw InvalidArgument("--mode must be in-place or slot-reuse (got '" + a.mode + "')");
  }
  (void)parse_sub_slices(a.sub_slices);  // names the three geometries when it is none
  if (a.cast && parse_dtype(a.ag_dtype, "--ag-dtype") != DType::kBf16) {
    throw InvalidArgument("--cast all-gathers fp32 masters as bf16: give --ag-dtype bf16");
  }
  if (a.nodes < 1 || a.gpus_per_node < 1) throw InvalidArgument("-M and -L must be at least 1");
  if (a.procs == 0) a.procs = a.nodes * a.gpus_per_node;
  if (a.procs != a.nodes * a.gpus_per_node) {
    throw InvalidArgument("--procs " + std::to_string(a.procs) + " must equal M x L = " +
                          std::to_string(a.nodes * a.gpus_per_node) + " (one process per rank)");
  }
  if (a.procs > 64) throw InvalidArgument("--procs " + std::to_string(a.procs) + " exceeds 64");
  if (a.calls < 1 || a.calls > 100000) throw InvalidArgument("--calls must be in 1..100000");
  if (!(a.timeout_s > 0 && a.timeout_s <= 3600)) {
    throw InvalidArgument("--timeout-s must be in (0, 3600]");
  }
  if ((a.kill_rank >= 0) != (a.kill_at_call >= 0)) {
    throw InvalidArgument("--kill-rank and --kill-at-call go together");
  }
  if (a.kill_rank >= a.procs || a.misorder_rank >= a.procs) {
    throw InvalidArgument("--kill-rank / --misorder-rank must name a rank below --procs");
  }
  if (a.kill_at_call >= a.calls) {
    throw InvalidArgument("--kill-at-call must be below --calls");
  }
  if ((a.stall_rank >= 0) != (a.stall_at_call >= 0)) {
    throw InvalidArgument("--stall-rank and --stall-at-call go together");
  }
  if (a.stall_rank >= 0 && a.backend == "host") {
    throw InvalidArgument(
        "--stall-rank is for the GPU backends, nccl and ipc (host calls run on the caller's "
        "thread; --kill-rank tests their failures)");
  }
  if ((a.release_rank >= 0) != (a.release_at_call >= 0)) {
    throw InvalidArgument("--release-rank and --release-at-call go together");
  }
  if (a.release_rank >= 0 && a.backend == "host") {
    throw InvalidArgument("--release-rank is for the GPU backends, nccl and ipc");
  }
  if (a.release_rank >= a.procs || a.release_at_call >= a.calls) {
    throw InvalidArgument(
        "--release-rank must be below --procs and --release-at-call below --calls");
  }
  if (a.stall_rank >= a.procs || a.stall_at_call >= a.calls) {
    throw InvalidArgument("--stall-rank must be below --procs and --stall-at-call below --calls");
  }

  if (a.backend != "host") {
    if (!runtime::backend_built(runtime::parse_backend(a.backend))) {
      throw Unsupported("this tide was built without " +
                        std::string(a.backend == "nccl" ? "CUDA and NCCL" : "CUDA") +
                        " (use --backend host)");
    }
    // No CUDA call here: the ranks are forked from this process, and CUDA must not be
    // initialised before a fork.
    if (!std::filesystem::exists("/dev/nvidiactl")) {
      throw Unsupported("--backend " + a.backend +
                        " needs GPUs; this machine has no NVIDIA device");
    }
  }
}

// The largest arena and input bytes one process would hold, to refuse runs that do not fit.
double estimate_gib(const CheckRuntimeArgs& a, const std::vector<NamedGroup>& groups) {
  double bytes = 0;
  const Topology topo(a.nodes, a.gpus_per_node);
  for (const NamedGroup& g : groups) {
    const GroupLayout layout(topo, g.params, DType::kBf16, DType::kBf16);
    // Region (landing N S, stages, RS areas) plus every rank's inputs, generated per process.
    bytes += 8.0 * static_cast<double>(layout.unsharded_bytes()) +
             4.0 * static_cast<double>(layout.pack_buffer_bytes());
  }
  return bytes / (1u << 30);
}

void run_check_runtime(CheckRuntimeArgs a) {
  check_args(a);
  const std::vector<NamedGroup> groups = parse_groups(a);
  if (a.misorder_rank >= 0 && groups.size() < 2) {
    throw InvalidArgument("--misorder-rank needs at least two groups (--groups A;B)");
  }
  const double gib = estimate_gib(a, groups);
  if (gib > a.max_gib) {
    throw InvalidArgument(fmt::format(
        "these groups need about {:.1f} GiB per process (limit --max-gib {:.1f}); use smaller "
        "shapes (--groups) or fewer ranks",
        gib, a.max_gib));
  }
  // Validate the groups once here, so bad shapes are one line and exit 2, not P failures.
  for (const NamedGroup& g : groups) {
    GroupLayout(Topology(a.nodes, a.gpus_per_node), g.params, parse_dtype(a.ag_dtype, "--ag-dtype"),
                DType::kBf16);
  }

  char pattern[] = "/tmp/tide-check-runtime-XXXXXX";
  if (mkdtemp(pattern) == nullptr) throw InvalidArgument("cannot create a temporary directory");
  const std::filesystem::path dir(pattern);
  std::cout.flush();
  std::cerr.flush();
  // Wait for every rank, within the timeout plus a margin for set-up and checks.
  WaitPolicy policy;
  policy.deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<std::int64_t>(a.timeout_s * 1000 * 2 + 60000));
  const auto rank_body = [&](int rank) {
    // The rank's stderr in a file of its own: a rank that the fail-stop path ends (NOTE
    // [runtime] 5) leaves no result, and its one line is then its error.
    const std::string err_path = (dir / ("rank" + std::to_string(rank) + ".err")).string();
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (err >= 0) {
      dup2(err, STDERR_FILENO);
      close(err);
    }
    json out;
    int status = 0;
    try {
      const WorkerResult r = run_worker(a, groups, rank, dir / "store");
      out = {{"rank", rank},
             {"calls", r.calls},
             {"mismatches", r.mismatches},
             {"replays", r.replays},
             {"captures", r.captures},
             {"rail_messages", r.rail_messages},
             {"rail_message_bytes", r.rail_message_bytes},
             {"lanes", r.lanes},
             {"message_paths", r.message_paths},
             {"repoint_failures", r.repoint_failures},
             {"arena", arena_json(r.arena)}};
      status = r.mismatches == 0 ? 0 : 1;
    } catch (const std::exception& e) {
      out = {{"rank", rank}, {"error", one_line(e.what())}};
      status = 1;
    }
    std::ofstream(dir / ("rank" + std::to_string(rank) + ".json")) << out.dump() << '\n';
    return status;
  };
  const std::vector<ChildExit> exits = run_processes(
      a.procs,
      [&](int rank) {
        return fork_child([&, rank] { return rank_body(rank); }, /*die_with_parent=*/true);
      },
      policy);
  std::vector<int> status;
  std::vector<double> seconds;
  for (const ChildExit& e : exits) {
    status.push_back(e.wait_status);
    seconds.push_back(e.seconds);
  }
  json ranks = json::array();
  std::int64_t mismatches = 0, calls_done = 0;
  bool passed = true;
  for (int r = 0; r < a.procs; ++r) {
    json row;
    std::ifstream in(dir / ("rank" + std::to_string(r) + ".json"));
    const bool has_result = static_cast<bool>(in);
    if (has_result) {
      in >> row;
    } else {
      const int st = status[static_cast<std::size_t>(r)];
      row = {{"rank", r},
             {"error", WIFSIGNALED(st) ? "killed by signal " + std::to_string(WTERMSIG(st))
                                       : "exited without a result"}};
    }
    row["seconds"] = seconds[static_cast<std::size_t>(r)];
    const std::vector<std::string> said = tide_lines(dir / ("rank" + std::to_string(r) + ".err"));
    for (const std::string& line : said)
      std::cerr << line << '\n';
    if (!has_result && !said.empty() && WIFEXITED(status[static_cast<std::size_t>(r)])) {
      row["error"] = "ended the process (status " +
                     std::to_string(WEXITSTATUS(status[static_cast<std::size_t>(r)])) +
                     "): " + said.front();
    }
    mismatches += row.value("mismatches", std::int64_t{0});
    calls_done += row.value("calls", 0);
    if (row.contains("error") || row.value("mismatches", std::int64_t{0}) != 0) passed = false;
    ranks.push_back(row);
  }
  std::filesystem::remove_all(dir);
  json summary = {{"calls", a.calls},
                  {"ranks", a.procs},
                  {"groups", groups.size()},
                  {"backend", a.backend},
                  {"mode", a.mode},
                  {"ag_dtype", a.ag_dtype},
                  {"sub_slices", a.sub_slices},
                  {"ring", a.ring},
                  {"staged_shards", a.staged_shards},
                  {"nodes_as_hosts", a.nodes_as_hosts},
                  {"seed", a.seed},
                  {"mismatches", mismatches},
                  {"passed", passed},
                  {"per_rank", ranks}};
  // Every rank lays out the same arena (NOTE [communicator arena]): rank 0's stands for all.
  if (!ranks.empty() && ranks.front().contains("arena")) summary["arena"] = ranks.front()["arena"];
  if (!ranks.empty() && ranks.front().contains("lanes")) summary["lanes"] = ranks.front()["lanes"];
  if (a.json) {
    std::cout << summary.dump(2) << '\n';
  } else {
    std::cout << fmt::format(
        "check-runtime: {} ranks ({} x {}), {} groups, {} calls each, "
        "backend {}, mode {}, seed {}\n",
        a.procs, a.nodes, a.gpus_per_node, groups.size(), a.calls, a.backend, a.mode, a.seed);
    if (summary.contains("lanes")) {
      for (const auto& lane : summary["lanes"])
        std::cout << "  lanes: " << lane.get<std::string>() << '\n';
    }
    for (const json& row : ranks) {
      if (row.contains("error")) {
        std::cout << fmt::format("  rank {}: FAILED after {:.2f} s: {}\n", row["rank"].get<int>(),
                                 row["seconds"].get<double>(), row["error"].get<std::string>());
      } else {
        std::cout << fmt::format("  rank {}: {} calls, {} mismatching elements\n",
                                 row["rank"].get<int>(), row["calls"].get<int>(),
                                 row["mismatches"].get<std::int64_t>());
      }
    }
    std::cout << (passed ? "passed: every output equal to the reference\n" : "FAILED\n");
  }
  std::cout.flush();
  if (!std::cout) throw InvalidArgument("cannot write the output (stdout)");
  if (!passed) {
    throw CheckFailed(std::to_string(mismatches) + " mismatching elements, " +
                      std::to_string(a.procs - static_cast<int>(ranks.size()) +
                                     static_cast<int>(std::count_if(
                                         ranks.begin(), ranks.end(),
                                         [](const json& r) { return r.contains("error"); }))) +
                      " ranks failed (seed " + std::to_string(a.seed) + ")");
  }
}

}  // namespace

void add_check_runtime_command(CLI::App& app) {
  auto args = std::make_shared<CheckRuntimeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "check-runtime",
      "Run the runtime across processes (one per rank) and check every output against the "
      "reference");
  cmd->add_option("--backend", args->backend,
                  "host (CPU processes), nccl (a GPU per process) or ipc (GPU processes of one "
                  "host over CUDA IPC; processes may share a GPU)")
      ->capture_default_str();
  cmd->add_option("--procs", args->procs, "Processes (default M x L)");
  cmd->add_option("--nodes,-M", args->nodes, "Nodes M")->required();
  cmd->add_option("--gpus-per-node,-L", args->gpus_per_node, "GPUs per node L")->required();
  cmd->add_option("--groups", args->groups, "Groups: \"D0xK0,D1xK1;D2xK2,...\" (';' between)");
  cmd->add_option("--model", args->model, "A model preset (tide plan --list-models)");
  cmd->add_option("--calls", args->calls, "Calls per rank, FSDP2 order")->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of every input")->capture_default_str();
  cmd->add_option("--mode", args->mode, "in-place or slot-reuse")->capture_default_str();
  cmd->add_option("--sub-slices", args->sub_slices,
                  "TIDE-RS sub-slice geometry: across-ranks (paper), per-rank or node-contiguous")
      ->capture_default_str();
  cmd->add_flag("--cast", args->cast, "All-gather fp32 master shards as bf16");
  cmd->add_option("--ag-dtype", args->ag_dtype,
                  "All-gather dtype: bf16, fp32, fp8 or u8 (1-byte items: random byte codes, "
                  "checked byte for byte); gradients stay bf16")
      ->capture_default_str();
  cmd->add_flag("--staged-shards", args->staged_shards,
                "Shards by pointer with every all-gather, no resident shard (as tide.fsdp)");
  cmd->add_flag("--ring", args->ring,
                "Group g lands in shared slot g mod 2, released after each all-gather's check");
  cmd->add_flag("--nodes-as-hosts", args->nodes_as_hosts,
                "each node of L ranks is a host of its own, reached by rail messages only "
                "(NOTE [runtime] 9)");
  cmd->add_option("--kill-rank", args->kill_rank, "Kill this rank (SIGKILL) at --kill-at-call");
  cmd->add_option("--kill-at-call", args->kill_at_call, "The call at which --kill-rank dies");
  cmd->add_option(
      "--stall-rank", args->stall_rank,
      "nccl, ipc: from --stall-at-call on, this rank's calls wait for a gate that never "
      "opens (a peer that stopped signalling); every rank must fail within the "
      "timeout, the watchdog naming the stalled call");
  cmd->add_option("--stall-at-call", args->stall_at_call, "The call at which --stall-rank stalls");
  cmd->add_option(
      "--release-rank", args->release_rank,
      "nccl, ipc: this rank aborts (releases its waits) with its --release-at-call in flight "
      "and keeps its messages flowing for 1.5 x the timeout; every rank must raise");
  cmd->add_option("--release-at-call", args->release_at_call,
                  "The call at which --release-rank aborts");
  cmd->add_option("--misorder-rank", args->misorder_rank,
                  "This rank issues two reduce-scatters in the other order");
  cmd->add_option("--timeout-s", args->timeout_s, "Per-call timeout")->capture_default_str();
  cmd->add_option("--max-gib", args->max_gib, "Refuse runs needing more per process")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args] { run_check_runtime(*args); });
}

}  // namespace tide::cli
