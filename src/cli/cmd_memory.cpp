// `tide memory`: the closed-form memory model of Sec. 5.4 (Eqs. 10-12) and Sec. 7.4.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.hpp"
#include "shapes.hpp"
#include "table.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/memory_model.hpp"

namespace tide::cli {
namespace {

struct MemoryArgs {
  MemoryModelInput in;
  std::int64_t shard_bytes = 0;
  std::string shapes;
  std::string model;
  std::string grad_dtype = "bf16";
  bool json = false;
};

void run_memory(MemoryArgs& a) {
  a.in.grad_bytes = static_cast<int>(item_bytes(parse_dtype(a.grad_dtype, "--grad-dtype")));
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
                     a.in.gpus_per_node, a.in.grad_bytes);
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
    nlohmann::json out = {{"nodes", a.in.nodes},
                          {"gpus_per_node", a.in.gpus_per_node},
                          {"round_width", a.in.round_width},
                          {"inbox_generations", a.in.inbox_generations},
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
      "Memory model (Sec. 5.4): M={}, L={}, k={}, n_par={}, n_stg={}; NS = one unsharded bf16 "
      "group{}{}\n",
      a.in.nodes, a.in.gpus_per_node, a.in.round_width, a.in.inbox_generations, a.in.staging_slots,
      group_name.empty() ? "" : " (" + group_name + ")",
      m.ns_bytes ? fmt::format(" = {}", bytes(*m.ns_bytes)) : "");
  Table table({"quantity", "S_fp32 blocks", "x NS", "bytes"});
  auto add = [&](const std::string& what, std::optional<double> blocks, double ns) {
    const auto b = in_bytes(ns);
    table.row({what, blocks ? fixed(*blocks, 0) : "", fixed(ns, 3), b ? bytes(*b) : ""});
  };
  add("In-Place staging bound (Eq. 11)", m.in_place_staging_blocks, m.in_place_staging_ns);
  add("Slot-Reuse staging bound (Eq. 12)", m.slot_reuse_staging_blocks, m.slot_reuse_staging_ns);
  add("ring slots + receive stage", std::nullopt, m.ring_and_stage_ns);
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
  cmd->add_option("--inbox-generations", args->in.inbox_generations, "n_par (1 or 2)")
      ->capture_default_str();
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
  cmd->callback([args] { run_memory(*args); });
}

}  // namespace tide::cli
