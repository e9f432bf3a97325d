// `tide solve`: the sizing solver of App. G (Eqs. 13-14 and the round-width rule).
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "table.hpp"
#include "tide/calibrate/calibration.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/core/sizing_solver.hpp"

namespace tide::cli {
namespace {

struct SolveArgs {
  SolverInput in;
  std::string grad_dtype = "bf16";
  std::string ag_dtype = "bf16";
  bool ag_dtype_given = false;  // the text output shows the all-gather's term only when asked
  bool json = false;
  std::string calibration;  // a `tide calibrate` file: the rates no flag gives
  std::vector<std::pair<CLI::Option*, double*>> rates;  // --bw-nic ... --t-round
};

// Every rate comes from its flag, else from --calibration; one of the two is required.
void resolve_rates(SolveArgs& a) {
  if (!a.calibration.empty()) {
    const calibrate::SolverRates r =
        calibrate::solver_rates(calibrate::load_calibration(a.calibration));
    const double from_file[] = {r.bw_nic_gbps, r.bw_sum_gbps, r.bw_land_gbps, r.bw_cap_gbps,
                                r.t_round_ms};
    for (std::size_t i = 0; i < a.rates.size(); ++i) {
      if (a.rates[i].first->count() == 0) *a.rates[i].second = from_file[i];
    }
    return;
  }
  for (const auto& [option, value] : a.rates) {
    if (option->count() == 0)
      throw InvalidArgument(option->get_name() + " is required (or --calibration FILE)");
  }
}

void run_solve(SolveArgs& a) {
  resolve_rates(a);
  const DType grad_dtype = parse_dtype(a.grad_dtype, "--grad-dtype");
  require_gradient_dtype(grad_dtype, "--grad-dtype");
  a.in.grad_bytes = static_cast<int>(item_bytes(grad_dtype));
  a.in.ag_bytes = static_cast<int>(item_bytes(parse_dtype(a.ag_dtype, "--ag-dtype")));
  const SolverResult r = solve_sizing(a.in);
  if (a.json) {
    nlohmann::json steps = nlohmann::json::array();
    for (const RoundWidthStep& s : r.round_width_steps) {
      steps.push_back({{"round_width", s.round_width},
                       {"rounds", s.rounds},
                       {"wait_ms", s.wait_ms},
                       {"widened", s.widened}});
    }
    nlohmann::json out = {{"sum_ctas", r.sum_ctas},
                          {"landing_ctas", r.landing_ctas},
                          {"round_width", r.round_width},
                          {"rounds", r.rounds},
                          {"rounds_in_flight", r.rounds_in_flight},
                          {"round_transfer_ms", r.round_transfer_ms},
                          {"fp32_shard_bytes", r.fp32_shard_bytes},
                          {"t_nic_ms", r.t_nic_ms},
                          {"level1_rate_factor", r.level1_rate_factor},
                          {"sum_ctas_exact", r.sum_ctas_exact},
                          {"landing_cap_ctas", r.landing_cap_ctas},
                          {"landing_tail_ctas", r.landing_tail_ctas},
                          {"round_wait_budget_ms", r.round_wait_budget_ms},
                          {"round_width_steps", steps},
                          {"ag_dtype", a.ag_dtype},
                          {"ag_shard_bytes", r.ag_shard_bytes},
                          {"t_ag_nic_ms", r.t_ag_nic_ms},
                          {"rates",
                           {{"bw_nic_gbps", a.in.bw_nic_gbps},
                            {"bw_sum_gbps", a.in.bw_sum_gbps},
                            {"bw_land_gbps", a.in.bw_land_gbps},
                            {"bw_cap_gbps", a.in.bw_cap_gbps},
                            {"t_round_ms", a.in.t_round_ms},
                            {"calibration", a.calibration}}}};
    std::cout << out.dump(2) << '\n';
    return;
  }
  std::cout << fmt::format(
      "Sizing solver (App. G): M={}, L={}, S={} bytes ({}), S_fp32={}, t_NIC={} ms\n", a.in.nodes,
      a.in.gpus_per_node, num(a.in.shard_bytes), a.grad_dtype, num(r.fp32_shard_bytes),
      fixed(r.t_nic_ms, 3));
  Table table({"result", "value", "how"});
  table.row(
      {"sum CTAs C_sum", std::to_string(r.sum_ctas),
       fmt::format("ceil({} x {} x {} / {} = {})", a.in.gamma_skew, fixed(r.level1_rate_factor, 2),
                   a.in.bw_nic_gbps, a.in.bw_sum_gbps, fixed(r.sum_ctas_exact, 3))});
  table.row({"landing CTAs C_mc", std::to_string(r.landing_ctas),
             fmt::format("min(floor({} / {}) = {}, tail bound {})", a.in.bw_cap_gbps,
                         a.in.bw_land_gbps, r.landing_cap_ctas, r.landing_tail_ctas)});
  std::string how;
  for (const RoundWidthStep& s : r.round_width_steps) {
    how += fmt::format(
        "{}k={}: {} rounds x {} ms = {} ms{}", how.empty() ? "" : "; ", s.round_width, s.rounds,
        a.in.t_round_ms, fixed(s.wait_ms, 2),
        s.widened ? fmt::format(" > {} ms, widen", fixed(r.round_wait_budget_ms, 2)) : "");
  }
  table.row({"round width k", std::to_string(r.round_width), how});
  table.row({"rounds in flight d", std::to_string(r.rounds_in_flight),
             r.rounds_in_flight == 1
                 ? std::string("lockstep: the rounds' waits fit the budget")
                 : fmt::format("1 + ceil({} / {}) (t_rnd over one round's transfer)",
                               a.in.t_round_ms, fixed(r.round_transfer_ms, 3))});
  if (a.ag_dtype_given) {
    table.row({"all-gather wire time t_AG", fixed(r.t_ag_nic_ms, 3) + " ms",
               fmt::format("({} - 1) x S_ag {} bytes ({}) / {} GB/s", a.in.nodes,
                           num(r.ag_shard_bytes), a.ag_dtype, a.in.bw_nic_gbps)});
  }
  table.print(std::cout);
}

}  // namespace

void add_solve_command(CLI::App& app) {
  auto args = std::make_shared<SolveArgs>();
  CLI::App* cmd = app.add_subcommand("solve", "Sum/landing CTA budgets and round width (App. G)");
  SolverInput& in = args->in;
  args->rates = {
      {cmd->add_option("--bw-nic", in.bw_nic_gbps, "Per-rail throughput, GB/s"), &in.bw_nic_gbps},
      {cmd->add_option("--bw-sum", in.bw_sum_gbps, "Level 1 sum rate per CTA, GB/s"),
       &in.bw_sum_gbps},
      {cmd->add_option("--bw-land", in.bw_land_gbps, "Landing rate per CTA, GB/s"),
       &in.bw_land_gbps},
      {cmd->add_option("--bw-cap", in.bw_cap_gbps, "Landing fabric ceiling, GB/s"),
       &in.bw_cap_gbps},
      {cmd->add_option("--t-round", in.t_round_ms, "Per-round wait overhead, ms"), &in.t_round_ms}};
  cmd->add_option("--calibration", args->calibration,
                  "A tide calibrate file: the rates above that no flag gives");
  cmd->add_option("--nodes,-M", args->in.nodes, "Nodes M")->required();
  cmd->add_option("--gpus-per-node,-L", args->in.gpus_per_node, "GPUs per node L")
      ->capture_default_str();
  cmd->add_option("--shard-bytes", args->in.shard_bytes,
                  "S: per-rank packed gradient shard, bytes in the gradient dtype")
      ->required();
  cmd->add_option("--grad-dtype", args->grad_dtype, "Gradient dtype: bf16 or fp32")
      ->capture_default_str();
  cmd->add_option("--ag-dtype", args->ag_dtype,
                  "All-gather dtype of the group (bf16, fp32, fp8 or u8): reports its shard "
                  "bytes S_ag and wire time t_AG = (M - 1) S_ag / BW_NIC")
      ->capture_default_str();
  cmd->add_option("--wave-width", args->in.wave_width, "W_wave (default L)");
  cmd->add_option("--passes", args->in.passes, "Sub-slice passes n_part")->capture_default_str();
  cmd->add_option("--gamma-skew", args->in.gamma_skew, "Arrival-skew factor")
      ->capture_default_str();
  cmd->add_option("--eta-tail", args->in.eta_tail, "Landing-tail fraction of t_NIC")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args, cmd] {
    args->ag_dtype_given = cmd->count("--ag-dtype") > 0;
    run_solve(*args);
  });
}

}  // namespace tide::cli
