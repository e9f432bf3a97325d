// `tide memory`: the closed-form memory model of Sec. 5.4 (Eqs. 10-12) and Sec. 7.4.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "arena_json.hpp"
#include "commands.hpp"
#include "shapes.hpp"
#include "table.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/memory_model.hpp"
#include "tide/core/rs_defaults.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/communicator_arena.hpp"
#include "tide/program/ep_lane.hpp"

namespace tide::cli {
namespace {

struct MemoryArgs {
  MemoryModelInput in;
  int inbox_generations = 0;  // 0: from the schedule (NOTE [memory model terms])
  std::int64_t shard_bytes = 0;
  std::string shapes;
  std::string model;
  std::string grad_dtype = "bf16";
  bool json = false;
  // A communicator's groups: its arena as the runtime lays it out (NOTE [communicator arena]).
  std::string groups;
  std::string slots = "ring";
  std::string ag_dtype = "bf16";  // one dtype, or one per group (comma-separated)
  std::string mode = "in-place";
  bool cast = false;
  std::string lane;  // "ep": the groups of a communicator whose ranks are one per host
};

std::vector<int> parse_slots(const std::string& text, std::size_t groups) {
  std::vector<int> slots;
  if (text == "ring") {
    for (std::size_t g = 0; g < groups; ++g)
      slots.push_back(static_cast<int>(g % 2));
    return slots;
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = text.find(',', start);
    const std::string entry = text.substr(start, end == std::string::npos ? end : end - start);
    try {
      std::size_t used = 0;
      slots.push_back(std::stoi(entry, &used));
      if (used != entry.size() || slots.back() < -1) throw std::invalid_argument(entry);
    } catch (const std::exception&) {
      throw InvalidArgument("--slots entry '" + entry +
                            "' is not a slot id (an integer >= 0, or -1 for a slot of its own)");
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (slots.size() != groups) {
    throw InvalidArgument("--slots has " + std::to_string(slots.size()) + " entries for " +
                          std::to_string(groups) + " groups (or give 'ring')");
  }
  return slots;
}

// --ag-dtype with --groups: one dtype for every group, or one per group ("bf16,fp8"), as a
// communicator registers groups of different all-gather dtypes (NOTE [1-byte all-gather items]).
std::vector<DType> parse_ag_dtypes(const std::string& text, std::size_t groups) {
  std::vector<DType> dtypes;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(',', start);
    dtypes.push_back(parse_dtype(text.substr(start, end == std::string::npos ? end : end - start),
                                 "--ag-dtype entry"));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (dtypes.size() == 1) return std::vector<DType>(groups, dtypes.front());
  if (dtypes.size() != groups) {
    throw InvalidArgument("--ag-dtype has " + std::to_string(dtypes.size()) + " entries for " +
                          std::to_string(groups) + " groups (or give one dtype for all)");
  }
  return dtypes;
}

// What `tide memory --groups` lays out: the layouts and plans, and the arena over them.
struct GroupsArena {
  std::vector<NamedGroup> named;
  std::vector<GroupLayout> layouts;
  program::CommunicatorArena arena;
};

// The communicator arena of `a.groups` on M x L, with the runtime's plan defaults.
GroupsArena groups_arena(const MemoryArgs& a) {
  const Topology topo(a.in.nodes, a.in.gpus_per_node);
  GroupsArena out;
  out.named = parse_group_list(a.groups, "group");
  const std::vector<NamedGroup>& named = out.named;
  const std::vector<int> slots = parse_slots(a.slots, named.size());
  const std::vector<DType> ag_dtypes = parse_ag_dtypes(a.ag_dtype, named.size());
  const DType grad_dtype = parse_dtype(a.grad_dtype, "--grad-dtype");
  for (const DType ag_dtype : ag_dtypes) {
    if (a.cast && ag_dtype != DType::kBf16) {
      throw InvalidArgument("--cast all-gathers fp32 masters as bf16: give --ag-dtype bf16");
    }
  }
  RsOptions rs;
  rs.one_node = true;        // the runtime's layout at M = 1 (NOTE [one-node TIDE-RS]): the peers
  rs.one_node_pull = false;  // push from wherever the adapter left the gradients
  if (a.mode == "slot-reuse") {
    rs.mode = RsMode::kSlotReuse;
  } else if (a.mode == "in-place") {
    rs.mode = RsMode::kInPlace;
  } else {
    throw InvalidArgument("--mode '" + a.mode + "' is not one of: in-place, slot-reuse");
  }
  std::vector<GroupLayout>& layouts = out.layouts;
  layouts.reserve(named.size());
  std::vector<AgPlan> ag;
  ag.reserve(named.size());
  std::vector<RsPlan> plans;
  plans.reserve(named.size());
  std::vector<program::ArenaGroup> groups;
  for (std::size_t g = 0; g < named.size(); ++g) {
    layouts.emplace_back(topo, named[g].params, ag_dtypes[g], grad_dtype);
    AgOptions ao;
    ao.mixed_precision_cast = a.cast;
    ao.staged_shards = !a.cast;  // as tide.fsdp registers its groups
    ag.emplace_back(layouts.back(), ao);
    plans.emplace_back(layouts.back(), with_solver_defaults(rs, layouts.back()));  // as the runtime
    program::ArenaGroup group{&ag.back(), &plans.back(), slots[g]};
    if (a.lane == "ep") {  // NOTE [runtime] 11: as the runtime chooses the lanes
      if (const std::string why = program::ep_lane_inapplicable(layouts.back()); !why.empty()) {
        throw InvalidArgument("--lane ep: " + why + " (give -L 1 and -M 2 or more)");
      }
      group.ep_all_gather = true;
      group.ep_reduce_scatter = program::ep_rs_inapplicable(layouts.back()).empty();
    } else if (!a.lane.empty()) {
      throw InvalidArgument("--lane '" + a.lane + "' is not ep (or leave it out)");
    }
    groups.push_back(group);
  }
  out.arena = program::communicator_arena(groups);
  return out;
}

void run_groups_arena(const MemoryArgs& a) {
  const GroupsArena laid = groups_arena(a);
  const program::CommunicatorArena& arena = laid.arena;
  if (a.json) {
    nlohmann::json groups = nlohmann::json::array();
    for (std::size_t g = 0; g < laid.layouts.size(); ++g) {
      const GroupLayout& layout = laid.layouts[g];
      groups.push_back({{"group", g},
                        {"name", laid.named[g].name},
                        {"ag_dtype", dtype_name(layout.ag_dtype())},
                        {"grad_dtype", dtype_name(layout.grad_dtype())},
                        {"shard_bytes", layout.shard_bytes()},
                        {"landing_bytes", layout.unsharded_bytes()},
                        {"slot", arena.slots[static_cast<std::size_t>(arena.slot_of[g])].id}});
    }
    nlohmann::json out = {{"nodes", a.in.nodes},
                          {"gpus_per_node", a.in.gpus_per_node},
                          {"mode", a.mode},
                          {"groups", groups},
                          {"arena", arena_json(runtime::describe_arena(arena))}};
    std::cout << out.dump(2) << '\n';
    return;
  }
  std::cout << fmt::format(
      "Communicator arena (NOTE [communicator arena]) of {} groups on M={}, L={}, mode {}:\n",
      arena.all_gather.size(), a.in.nodes, a.in.gpus_per_node, a.mode);
  Table table({"area", "bytes"});
  table.row({"resident shards", bytes(arena.resident_bytes)});
  table.row({"receive stage (shared)", bytes(arena.stage_bytes)});
  for (const program::LandingSlot& s : arena.slots) {
    table.row({fmt::format("landing slot {} ({} groups)", s.id, s.groups.size()), bytes(s.bytes)});
  }
  table.row({"TIDE-RS areas (shared)", bytes(arena.reduce_scatter_bytes)});
  table.row({"arena", bytes(arena.arena_bytes)});
  table.row({"Sec. 5.4 bound", arena.bound_bytes > 0 ? bytes(arena.bound_bytes) : "n/a"});
  table.print(std::cout);
  // Each group's all-gather dtype sizes its shard and its landing (NOTE [1-byte all-gather
  // items]: an fp8 group's landing is half a bf16 one's).
  std::cout << "\nGroups:\n";
  Table per_group({"group", "all-gather dtype", "gradient dtype", "shard", "landing", "slot"});
  for (std::size_t g = 0; g < laid.layouts.size(); ++g) {
    const GroupLayout& layout = laid.layouts[g];
    const program::LandingSlot& slot = arena.slots[static_cast<std::size_t>(arena.slot_of[g])];
    per_group.row({std::to_string(g), std::string(dtype_name(layout.ag_dtype())),
                   std::string(dtype_name(layout.grad_dtype())), bytes(layout.shard_bytes()),
                   bytes(layout.unsharded_bytes()),
                   slot.id >= 0 ? std::to_string(slot.id) : "own"});
  }
  per_group.print(std::cout);
}

void run_memory(MemoryArgs& a) {
  if (!a.groups.empty()) {
    run_groups_arena(a);
    return;
  }
  const DType grad_dtype = parse_dtype(a.grad_dtype, "--grad-dtype");
  require_gradient_dtype(grad_dtype, "--grad-dtype");
  a.in.grad_bytes = static_cast<int>(item_bytes(grad_dtype));
  if (a.inbox_generations != 0) a.in.inbox_generations = a.inbox_generations;
  if (a.shard_bytes != 0) a.in.shard_bytes = a.shard_bytes;
  std::string group_name;
  if (!a.shapes.empty() || !a.model.empty()) {
    NamedGroup group = resolve_group(a.shapes, a.model);
    group_name = group.name;
    // S of this group at this topology: its bf16 shard (NS counts unsharded bf16 bytes).
    a.in.shard_bytes = GroupLayout(Topology(a.in.nodes, a.in.gpus_per_node),
                                   std::move(group.params), DType::kBf16, DType::kBf16)
                           .shard_bytes();
  }
  const MemoryModel m = evaluate_memory_model(a.in);
  const std::vector<BufferScalingRow> scaling =
      buffer_scaling({1, 2, 4, 8, 16, 32, 64}, a.in.gpus_per_node, a.in.round_width,
                     a.in.wave_width == 0 ? a.in.gpus_per_node : a.in.wave_width, a.in.grad_bytes);
  auto in_bytes = [&](double ns) -> std::optional<std::int64_t> {
    if (!m.ns_bytes) return std::nullopt;
    return static_cast<std::int64_t>(ns * static_cast<double>(*m.ns_bytes));
  };
  if (a.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const BufferScalingRow& r : scaling) {
      rows.push_back({{"nodes", r.nodes},
                      {"inbox_generations", r.inbox_generations},
                      {"fsdp2_blocks", r.fsdp2_blocks},
                      {"in_place_blocks", r.in_place_blocks},
                      {"slot_reuse_blocks", r.slot_reuse_blocks}});
    }
    nlohmann::json out = {
        {"nodes", a.in.nodes},
        {"gpus_per_node", a.in.gpus_per_node},
        {"round_width", a.in.round_width},
        {"wave_width", a.in.wave_width == 0 ? a.in.gpus_per_node : a.in.wave_width},
        {"passes", a.in.passes},
        {"inbox_generations", m.inbox_generations},
        {"in_place_outbox_blocks", m.in_place_outbox},
        {"slot_reuse_outbox_blocks", m.slot_reuse_outbox},
        {"staging_slots", a.in.staging_slots},
        {"in_place_staging_blocks", m.in_place_staging_blocks},
        {"slot_reuse_staging_blocks", m.slot_reuse_staging_blocks},
        {"in_place_staging_ns", m.in_place_staging_ns},
        {"slot_reuse_staging_ns", m.slot_reuse_staging_ns},
        {"ring_and_stage_ns", m.ring_and_stage_ns},
        {"in_place_total_ns", m.in_place_total_ns},
        {"slot_reuse_total_ns", m.slot_reuse_total_ns},
        {"fsdp2_total_ns", m.fsdp2_total_ns},
        {"fsdp2_pack_ns", m.fsdp2_pack_ns},
        {"buffer_scaling_fp32_blocks", rows}};
    if (!group_name.empty()) out["group"] = group_name;
    if (m.one_node) {  // the one-node form (NOTE [memory model terms])
      out["layout"] = "one-node";
      if (m.staging_ring_bytes) out["staging_ring_bytes"] = *m.staging_ring_bytes;
    }
    if (m.ns_bytes) {
      out["shard_bytes"] = *a.in.shard_bytes;
      out["ns_bytes"] = *m.ns_bytes;
      out["in_place_staging_bytes"] = *in_bytes(m.in_place_staging_ns);
      out["slot_reuse_staging_bytes"] = *in_bytes(m.slot_reuse_staging_ns);
      out["in_place_total_bytes"] = *in_bytes(m.in_place_total_ns);
      out["slot_reuse_total_bytes"] = *in_bytes(m.slot_reuse_total_ns);
      out["fsdp2_total_bytes"] = *in_bytes(m.fsdp2_total_ns);
    }
    std::cout << out.dump(2) << '\n';
    return;
  }
  std::cout << fmt::format(
      "Memory model (Sec. 5.4{}): M={}, L={}, k={}, n_par={}, n_out={} (In-Place) and {} "
      "(Slot-Reuse), n_stg={}, n_part={}; NS = one unsharded bf16 group{}{}\n",
      m.one_node ? "; the one-node layout" : "", a.in.nodes, a.in.gpus_per_node, a.in.round_width,
      m.inbox_generations, m.in_place_outbox, m.slot_reuse_outbox, a.in.staging_slots, a.in.passes,
      group_name.empty() ? "" : " (" + group_name + ")",
      m.ns_bytes ? fmt::format(" = {}", bytes(*m.ns_bytes)) : "");
  Table table({"quantity", "S_fp32 blocks", "x NS", "bytes"});
  auto add = [&](const std::string& what, std::optional<double> blocks, double ns) {
    const auto b = in_bytes(ns);
    table.row({what, blocks ? fixed(*blocks, 0) : "", fixed(ns, 3), b ? bytes(*b) : ""});
  };
  if (m.one_node) {  // NOTE [memory model terms]: the ring is TIDE-RS's only area, both modes
    const auto ring = in_bytes(m.in_place_staging_ns);
    table.row({m.staging_ring_bytes ? "staging ring (one node, the solver's chunk)"
                                    : "staging ring bound (one node, 0.25 NS)",
               fixed(m.in_place_staging_blocks, 3), fixed(m.in_place_staging_ns, 3),
               ring ? bytes(*ring) : ""});
    add("ring slots (no receive stage on one node)", std::nullopt, m.ring_and_stage_ns);
  } else {
    add("In-Place staging bound (Eq. 11)", m.in_place_staging_blocks, m.in_place_staging_ns);
    add("Slot-Reuse staging bound (Eq. 12)", m.slot_reuse_staging_blocks, m.slot_reuse_staging_ns);
    add("ring slots + receive stage", std::nullopt, m.ring_and_stage_ns);
  }
  add("per-layer backward, TIDE In-Place", std::nullopt, m.in_place_total_ns);
  add("per-layer backward, TIDE Slot-Reuse", std::nullopt, m.slot_reuse_total_ns);
  add("per-layer backward, FSDP2", std::nullopt, m.fsdp2_total_ns);
  add("FSDP2 fp32 packing buffer (Eq. 3)", std::nullopt, m.fsdp2_pack_ns);
  table.print(std::cout);
  std::cout << fmt::format(
      "\nReduce-scatter buffer at a fixed per-GPU output size, in output-shard fp32 blocks "
      "(L={}, k={}; Sec. 7.4):\n",
      a.in.gpus_per_node, a.in.round_width);
  Table scale(
      {"nodes M", "GPUs N", "FSDP2 (N)", "TIDE In-Place", "TIDE Slot-Reuse", "FSDP2 / In-Place"});
  for (const BufferScalingRow& r : scaling) {
    scale.row({std::to_string(r.nodes), fixed(r.fsdp2_blocks, 0), fixed(r.fsdp2_blocks, 0),
               fixed(r.in_place_blocks, 0), fixed(r.slot_reuse_blocks, 0),
               fixed(r.fsdp2_blocks / r.in_place_blocks, 2)});
  }
  scale.print(std::cout);
}

}  // namespace

void add_memory_command(CLI::App& app) {
  auto args = std::make_shared<MemoryArgs>();
  CLI::App* cmd = app.add_subcommand("memory", "Closed-form memory model (Eqs. 10-12)");
  cmd->add_option("--nodes,-M", args->in.nodes, "Nodes M")->required();
  cmd->add_option("--gpus-per-node,-L", args->in.gpus_per_node, "GPUs per node L")
      ->capture_default_str();
  cmd->add_option("--round-width,-k", args->in.round_width, "Round width k")->capture_default_str();
  cmd->add_option("--wave-width", args->in.wave_width, "Wave width W_wave (0: L)")
      ->capture_default_str();
  cmd->add_option("--passes", args->in.passes, "Sub-slice passes n_part")->capture_default_str();
  cmd->add_option("--inbox-generations", args->inbox_generations,
                  "n_par (1 or 2); default: the schedule's (1 for one wave, 2 otherwise, none "
                  "at M = 1)");
  cmd->add_option("--staging-slots", args->in.staging_slots, "n_stg")->capture_default_str();
  auto* shard = cmd->add_option("--shard-bytes", args->shard_bytes,
                                "S: bf16 shard bytes of the largest group (adds byte figures)");
  auto* shapes = cmd->add_option("--shapes", args->shapes, "Take S from these shapes D0xK0,...");
  auto* model = cmd->add_option("--model", args->model, "Take S from a model group NAME[:GROUP]");
  shard->excludes(shapes)->excludes(model);
  shapes->excludes(model);
  cmd->add_option("--grad-dtype", args->grad_dtype, "Gradient dtype: bf16 or fp32")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  auto* groups = cmd->add_option(
      "--groups", args->groups,
      "A communicator's groups \"D0xK0,...;D1xK1,...\": its arena as the runtime lays it out");
  groups->excludes(shard)->excludes(shapes)->excludes(model);
  cmd->add_option("--slots", args->slots,
                  "With --groups: each group's landing slot id, comma-separated (-1: its own), "
                  "or ring (group g in slot g mod 2)")
      ->capture_default_str();
  cmd->add_option("--ag-dtype", args->ag_dtype,
                  "With --groups: all-gather dtype (bf16, fp32, fp8 or u8), one for all groups "
                  "or one per group, comma-separated (e.g. bf16,fp8)")
      ->capture_default_str();
  cmd->add_option("--mode", args->mode, "With --groups: in-place or slot-reuse")
      ->capture_default_str();
  cmd->add_flag("--cast", args->cast, "With --groups: fp32 masters all-gathered as bf16");
  cmd->add_option("--lane", args->lane,
                  "With --groups: ep, the expert-parallel lane of a communicator whose ranks are "
                  "one per host (-L 1; NOTE [runtime] 11)");
  cmd->callback([args] { run_memory(*args); });
}

}  // namespace tide::cli
