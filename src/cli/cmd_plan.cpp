// `tide plan`: the layout, the TIDE-AG plan and the TIDE-RS plan of one parameter group.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.hpp"
#include "rs_args.hpp"
#include "shapes.hpp"
#include "table.hpp"
#include "tide/core/ag_plan.hpp"
#include "tide/core/error.hpp"
#include "tide/core/models.hpp"
#include "tide/core/plan_validator.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide::cli {
namespace {

using nlohmann::json;

constexpr std::size_t kTableRows = 12;  // longer lists are elided in tables, never in JSON

struct PlanArgs {
  int nodes = 1;
  int gpus_per_node = 8;
  std::string shapes;
  std::string model;
  std::string ag_dtype = "bf16";
  std::string grad_dtype = "bf16";
  RsArgs rs;
  bool cast = false;
  bool json = false;
  bool list_models = false;
};

// The inbox that the runtime's arena holds for this plan (its pull landing).
std::int64_t pull_inbox_bytes(const RsPlan& rs) {
  const program::RsArenaLayout a = program::rs_arena_layout(rs, program::LandingStyle::kPull);
  return a.arena_bytes - a.inbox;
}

std::string mask_text(std::uint8_t mask, int l) {
  std::string text;
  for (int s = 0; s < l; ++s)
    text += ((mask >> s) & 1u) ? '1' : '.';
  return text;
}

json layout_json(const GroupLayout& layout) {
  json params = json::array();
  for (const ParamLayout& p : layout.params()) {
    params.push_back(
        {{"name", p.name},
         {"rows", p.rows},
         {"cols", p.cols},
         {"rows_per_rank", p.rows_per_rank},
         {"padding_rows", p.rows_per_rank * layout.topology().world() - p.rows},
         {"shard_bytes", p.shard_bytes},
         {"offset", p.offset},
         {"out_offset_elems", p.out_offset},
         {"landing_base", layout.landing_offset(static_cast<int>(&p - &layout.params()[0]), 0)},
         {"landing_stride", p.shard_bytes}});
  }
  return {{"params", params},
          {"param_count", layout.param_count()},
          {"shard_bytes", layout.shard_bytes()},
          {"grad_shard_bytes", layout.grad_shard_bytes()},
          {"fp32_shard_bytes", layout.fp32_shard_bytes()},
          {"pack_buffer_bytes", layout.pack_buffer_bytes()},
          {"unsharded_bytes", layout.unsharded_bytes()}};
}

json ag_json(const AgPlan& ag) {
  json rounds = json::array();
  for (const AgRound& r : ag.rounds()) {
    rounds.push_back({{"index", r.index},
                      {"slots", r.slot_count},
                      {"first_slot", r.first_slot},
                      {"send_to", fmt::format("n-{}", r.peer_distance)},
                      {"receive_from", fmt::format("n+{}", r.peer_distance)},
                      {"peer_distance", r.peer_distance},
                      {"bytes", r.bytes},
                      {"head_bytes", r.head_bytes},
                      {"tail_bytes", r.tail_bytes},
                      {"paced", r.paced}});
  }
  json groups = json::array();
  for (const AgSlotGroup& g : ag.slot_groups()) {
    groups.push_back({{"round", g.round}, {"first_slot", g.first_slot}, {"slots", g.slot_count}});
  }
  const AgDescriptorCounts d = ag.max_descriptor_counts();
  return {{"rounds", rounds},
          {"round_count", ag.rounds().size()},
          {"slot_groups", groups},
          {"stage_bytes", ag.stage_bytes()},
          {"descriptors",
           {{"per_destination", d.per_destination},
            {"unicast", d.unicast},
            {"multicast", d.multicast},
            {"flat_unicast", d.flat_unicast},
            {"flat_multicast", d.flat_multicast}}}};
}

json rs_json(const RsPlan& rs, const ValidationResult& validation) {
  const int l = rs.layout().topology().gpus_per_node();
  json waves = json::array();
  for (const RsWave& w : rs.waves()) {
    json zeroed = json::array();
    for (int j = 0; j < l; ++j)
      zeroed.push_back(w.zeroed_blocks[static_cast<std::size_t>(j)]);
    waves.push_back({{"index", w.index},
                     {"pass", w.pass},
                     {"generation", w.generation},
                     {"first_contributor", w.first_contributor},
                     {"last_contributor", w.last_contributor},
                     {"own_node", w.has_own_node},
                     {"first_round", w.first_round},
                     {"round_count", w.round_count},
                     {"zeroed_block_masks", zeroed}});
  }
  json rounds = json::array();
  for (const RsRound& r : rs.rounds()) {
    rounds.push_back({{"index", r.index},
                      {"wave", r.wave},
                      {"first_contributor", r.first_contributor},
                      {"width", r.width}});
  }
  const RsDescriptorCounts d = rs.max_level1_descriptors();
  const RsMemory mem = rs.memory();
  return {{"mode", mode_name(rs.options().mode)},
          {"sub_slices", sub_slices_name(rs.options().sub_slices)},
          {"block_rows", rs.block_rows()},
          {"wave_width", rs.wave_width()},
          {"round_width", rs.round_width()},
          {"rounds_in_flight", rs.options().rounds_in_flight},
          {"passes", rs.passes()},
          {"sub_slice_elems", rs.sub_slice_elems()},
          {"pass_elems", rs.pass_elems()},
          {"staging_chunk_elems", rs.chunk_elems()},
          {"waves_per_pass", rs.waves_per_pass()},
          {"waves", waves},
          {"rounds", rounds},
          {"round_count", rs.rounds().size()},
          {"inbox_generations", rs.generations()},
          {"remote_destinations", rs.remote_destinations()},
          {"outbox_depth", rs.outbox_depth()},
          {"descriptors",
           {{"coalesced", d.coalesced},
            {"flat", d.flat},
            {"tails", d.tails},
            {"paper_coalesced", rs.paper_coalesced_descriptors()},
            {"paper_flat", rs.paper_flat_descriptors()}}},
          {"memory",
           {{"block_bytes", mem.block_bytes},
            {"staging_slot_bytes", mem.staging_slot_bytes},
            {"staging_bytes", mem.staging_bytes},
            {"inbox_bytes", mem.inbox_bytes},
            {"inbox_bytes_pull_landing", pull_inbox_bytes(rs)},
            {"outbox_bytes", mem.outbox_bytes},
            {"spare_bytes", mem.spare_bytes},
            {"total_bytes", mem.total()}}},
          {"validation", {{"accepted", validation.accepted}, {"reason", validation.reason}}}};
}

void print_layout(const GroupLayout& layout, const std::string& group) {
  const Topology& t = layout.topology();
  std::cout << fmt::format(
      "TIDE plan for {} on M={} nodes x L={} GPUs (N={}), all-gather {}, gradients {}\n\n", group,
      t.nodes(), t.gpus_per_node(), t.world(), dtype_name(layout.ag_dtype()),
      dtype_name(layout.grad_dtype()));
  std::cout << fmt::format(
      "Layout (Sec. 2.1): P={}, S={} ({}), S_grad={}, S_fp32={}, B_pack={} (Eq. 3), NS={}\n",
      layout.param_count(), num(layout.shard_bytes()), bytes(layout.shard_bytes()),
      bytes(layout.grad_shard_bytes()), bytes(layout.fp32_shard_bytes()),
      bytes(layout.pack_buffer_bytes()), bytes(layout.unsharded_bytes()));
  Table table({"p", "name", "rows D", "cols K", "R_p", "shard s_p", "offset o_p", "Landing(p,0)",
               "Landing(p,N-1)"});
  for (int p = 0; p < layout.param_count(); ++p) {
    const ParamLayout& pl = layout.param(p);
    if (static_cast<std::size_t>(p) == kTableRows &&
        layout.param_count() > static_cast<int>(kTableRows) + 1) {
      table.row({"...", fmt::format("({} more)", layout.param_count() - p - 1)});
      p = layout.param_count() - 2;
      continue;
    }
    table.row({std::to_string(p), pl.name, num(pl.rows), num(pl.cols), num(pl.rows_per_rank),
               num(pl.shard_bytes), num(pl.offset), num(layout.landing_offset(p, 0)),
               num(layout.landing_offset(p, t.world() - 1))});
  }
  table.print(std::cout);
}

void print_ag(const AgPlan& ag) {
  const Topology& t = ag.layout().topology();
  std::cout << fmt::format("\nTIDE-AG (Sec. 3.1): {} Bruck rounds, receive stage {}\n",
                           ag.rounds().size(), bytes(ag.stage_bytes()));
  if (!ag.rounds().empty()) {
    Table table({"round d", "slots c_d", "stage slots", "send to", "recv from", "bytes", "head",
                 "tail", "paced"});
    for (const AgRound& r : ag.rounds()) {
      table.row({std::to_string(r.index), std::to_string(r.slot_count),
                 fmt::format("[{},{})", r.first_slot, r.first_slot + r.slot_count),
                 fmt::format("n-{}", r.peer_distance), fmt::format("n+{}", r.peer_distance),
                 num(r.bytes), bytes(r.head_bytes), bytes(r.tail_bytes), r.paced ? "yes" : "no"});
    }
    table.print(std::cout);
    std::string groups;
    for (const AgSlotGroup& g : ag.slot_groups()) {
      groups += fmt::format(" [{},{})", g.first_slot, g.first_slot + g.slot_count);
    }
    std::cout << "  scatter groups (stage slots):" << groups << '\n';
  }
  const AgDescriptorCounts d = ag.max_descriptor_counts();
  std::cout << fmt::format(
      "  copy descriptors per rank per call (max over nodes): {} per destination; unicast to L={} "
      "GPUs {}, multicast {} (gated); flat (one per slot and parameter) {} / {}\n",
      num(d.per_destination), t.gpus_per_node(), num(d.unicast), num(d.multicast),
      num(d.flat_unicast), num(d.flat_multicast));
}

void print_rs(const RsPlan& rs, const ValidationResult& validation) {
  const Topology& t = rs.layout().topology();
  const int l = t.gpus_per_node();
  std::cout << fmt::format(
      "\nTIDE-RS (Sec. 4-5): mode {}, sub-slices {} ({} rows), W_wave={}, k={}, d={}, n_part={}, "
      "E_sub={} elements, E_pass={}, {} waves, {} network rounds, {} inbox generation(s), outbox "
      "depth n_out={}\n",
      mode_name(rs.options().mode), sub_slices_name(rs.options().sub_slices), rs.block_rows(),
      rs.wave_width(), rs.round_width(), rs.options().rounds_in_flight, rs.passes(),
      num(rs.sub_slice_elems()), num(rs.pass_elems()), rs.waves().size(), rs.rounds().size(),
      rs.generations(), rs.outbox_depth());
  Table waves({"wave", "pass", "gen", "contributors", "rounds", "zeroed blocks per GPU j"});
  for (std::size_t i = 0; i < rs.waves().size(); ++i) {
    const RsWave& w = rs.waves()[i];
    if (i == kTableRows && rs.waves().size() > kTableRows + 1) {
      waves.row({"...", fmt::format("({} more)", rs.waves().size() - i - 1)});
      i = rs.waves().size() - 2;
      continue;
    }
    std::string zeroed;
    for (int j = 0; j < l; ++j) {
      zeroed += (j ? " " : "") + mask_text(w.zeroed_blocks[static_cast<std::size_t>(j)], l);
    }
    std::string rounds;
    for (int r = 0; r < w.round_count; ++r) {
      const RsRound& round = rs.rounds()[static_cast<std::size_t>(w.first_round + r)];
      rounds += fmt::format("{}{{{}..{}}}", r ? " " : "", round.first_contributor,
                            round.first_contributor + round.width - 1);
    }
    waves.row({std::to_string(w.index), std::to_string(w.pass), std::to_string(w.generation),
               fmt::format("{}..{}{}", w.first_contributor, w.last_contributor,
                           w.has_own_node ? " (own)" : ""),
               rounds.empty() ? "-" : rounds, zeroed});
  }
  waves.print(std::cout);
  const RsDescriptorCounts d = rs.max_level1_descriptors();
  std::cout << fmt::format(
      "  Level 1 copy descriptors per rank per call (max over ranks): coalesced {} (incl. {} "
      "padded-row tails), flat {}; paper bounds (L-1)PM = {}, (L-1)PML = {}\n",
      num(d.coalesced), num(d.tails), num(d.flat), num(rs.paper_coalesced_descriptors()),
      num(rs.paper_flat_descriptors()));
  const RsMemory mem = rs.memory();
  std::cout << fmt::format(
      "  staging per GPU: {} = Level 1 staging {} ({} slots) + inbox {}{} + outbox {} (2 banks x "
      "{}) "
      "+ spares {}; block {}\n",
      bytes(mem.total()), bytes(mem.staging_bytes), rs.options().staging_slots,
      bytes(mem.inbox_bytes),
      pull_inbox_bytes(rs) == mem.inbox_bytes
          ? ""
          : " (none with the pull landing on one node: NOTE [no inbox on one node])",
      bytes(mem.outbox_bytes), rs.outbox_depth(), bytes(mem.spare_bytes), bytes(mem.block_bytes));
  std::cout << "  plan validation (Prop. 4.1, App. D): "
            << (validation.accepted ? "accepted" : "REJECTED: " + validation.reason) << '\n';
}

void list_models(bool as_json) {
  json out = json::array();
  Table table({"model", "group", "params", "elements", "bf16 bytes", "repeats", "description"});
  for (const ModelPreset& preset : model_presets()) {
    for (const ModelGroup& g : preset.groups) {
      std::int64_t elems = 0;
      for (const ParamShape& p : g.params)
        elems += p.rows * p.cols;
      const bool layer = &g == &preset.groups.front();
      const std::string spec = preset.name + ":" + g.name;
      table.row({layer ? preset.name : "", spec, std::to_string(g.params.size()), num(elems),
                 bytes(2 * elems), layer ? std::to_string(preset.layer_count) : "1",
                 g.description});
      out.push_back({{"model", preset.name},
                     {"group", g.name},
                     {"spec", spec},
                     {"params", g.params.size()},
                     {"elements", elems},
                     {"repeats", layer ? preset.layer_count : 1},
                     {"description", g.description},
                     {"source", preset.source}});
    }
  }
  if (as_json) {
    std::cout << json{{"models", out}}.dump(2) << '\n';
  } else {
    table.print(std::cout);
  }
}

void run_plan(const PlanArgs& a) {
  if (a.list_models) return list_models(a.json);
  const Topology topology(a.nodes, a.gpus_per_node);
  NamedGroup group = resolve_group(a.shapes, a.model);
  const std::string group_name = group.name;
  const GroupLayout layout(topology, std::move(group.params), parse_dtype(a.ag_dtype, "--ag-dtype"),
                           parse_dtype(a.grad_dtype, "--grad-dtype"));
  AgOptions ag_options;
  ag_options.mixed_precision_cast = a.cast;
  const AgPlan ag(layout, ag_options);
  const RsPlan rs(layout, a.rs.options(layout));
  const ValidationResult validation = validate_rs_plan(rs);

  if (a.json) {
    const json out = {{"group", group_name},
                      {"topology",
                       {{"nodes", topology.nodes()},
                        {"gpus_per_node", topology.gpus_per_node()},
                        {"world", topology.world()}}},
                      {"ag_dtype", dtype_name(layout.ag_dtype())},
                      {"grad_dtype", dtype_name(layout.grad_dtype())},
                      {"layout", layout_json(layout)},
                      {"ag", ag_json(ag)},
                      {"rs", rs_json(rs, validation)}};
    std::cout << out.dump(2) << '\n';
  } else {
    print_layout(layout, group_name);
    print_ag(ag);
    print_rs(rs, validation);
  }
  if (!validation.accepted) {
    throw InvalidArgument("the TIDE-RS plan is rejected: " + validation.reason +
                          "; choose a wave width that divides L");
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Layout, TIDE-AG and TIDE-RS plans of one group");
  cmd->add_option("--nodes,-M", args->nodes, "Nodes M (NVSwitch domains)")->capture_default_str();
  cmd->add_option("--gpus-per-node,-L", args->gpus_per_node, "GPUs per node L (1..8)")
      ->capture_default_str();
  auto* shapes =
      cmd->add_option("--shapes", args->shapes, "Parameter shapes D0xK0,D1xK1,... (dim 0 first)");
  auto* model = cmd->add_option("--model", args->model,
                                "Model preset NAME or NAME:GROUP (see --list-models)");
  shapes->excludes(model);
  cmd->add_option("--ag-dtype", args->ag_dtype, "All-gather dtype: bf16, fp32, fp8 or u8")
      ->capture_default_str();
  cmd->add_option("--grad-dtype", args->grad_dtype, "Gradient dtype: bf16 or fp32")
      ->capture_default_str();
  args->rs.add_to(*cmd);
  cmd->add_flag("--cast", args->cast, "Mixed-precision all-gather: cast into stage slot 0");
  cmd->add_flag("--json", args->json, "Print JSON (field names in docs/cli.md)");
  cmd->add_flag("--list-models", args->list_models, "List the model presets and their groups");
  cmd->callback([args] { run_plan(*args); });
}

}  // namespace tide::cli
