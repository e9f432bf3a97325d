// `tide check-plans`: the exhaustive plan-validator sweep of App. D.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "commands.hpp"
#include "table.hpp"
#include "tide/core/error.hpp"
#include "tide/core/plan_validator.hpp"

namespace tide::cli {
namespace {

struct CheckArgs {
  SweepRanges ranges;
  std::string wave_widths = "1-8";
  std::string round_widths = "1-32";
  std::string modes = "both";
  bool json = false;
};

// "A-B" or "A" -> [A, B].
std::pair<int, int> parse_range(const std::string& text, const char* what) {
  const std::size_t dash = text.find('-');
  try {
    std::size_t used = 0;
    const int lo = std::stoi(text.substr(0, dash), &used);
    if (used != (dash == std::string::npos ? text.size() : dash)) throw std::invalid_argument("");
    int hi = lo;
    if (dash != std::string::npos) {
      const std::string tail = text.substr(dash + 1);
      hi = std::stoi(tail, &used);
      if (used != tail.size()) throw std::invalid_argument("");
    }
    if (lo < 1 || hi < lo) throw std::invalid_argument("");
    return {lo, hi};
  } catch (const std::logic_error&) {
    throw InvalidArgument(std::string(what) + " '" + text +
                          "' is not a range A-B (or a single value) of positive integers");
  }
}

void run_check(CheckArgs& a) {
  std::tie(a.ranges.min_wave_width, a.ranges.max_wave_width) =
      parse_range(a.wave_widths, "--wave-widths");
  std::tie(a.ranges.min_round_width, a.ranges.max_round_width) =
      parse_range(a.round_widths, "--round-widths");
  if (a.modes != "both" && a.modes != "in-place") {
    throw InvalidArgument("--modes '" + a.modes + "' must be both or in-place");
  }
  a.ranges.both_modes = a.modes == "both";
  if (a.ranges.min_nodes < 1 || a.ranges.max_nodes < a.ranges.min_nodes) {
    throw InvalidArgument(
        fmt::format("--min-nodes {} / --max-nodes {} do not form a range of "
                    "node counts >= 1",
                    a.ranges.min_nodes, a.ranges.max_nodes));
  }
  const SweepResult r = sweep_plans(a.ranges);
  if (a.json) {
    nlohmann::json out = {{"gpus_per_node", a.ranges.gpus_per_node},
                          {"nodes", {a.ranges.min_nodes, a.ranges.max_nodes}},
                          {"wave_widths", {a.ranges.min_wave_width, a.ranges.max_wave_width}},
                          {"round_widths", {a.ranges.min_round_width, a.ranges.max_round_width}},
                          {"passes", a.ranges.passes},
                          {"modes", a.ranges.both_modes ? 2 : 1},
                          {"plans", r.plans},
                          {"accepted", r.accepted},
                          {"rejected", r.rejected},
                          {"violations", r.violations},
                          {"example_rejection", r.first_rejection},
                          {"seconds", r.seconds}};
    std::cout << out.dump(2) << '\n';
  } else {
    std::cout << fmt::format(
        "Plan sweep (Prop. 4.1, App. D): L={}, M in [{},{}], W_wave in [{},{}], k in [{},{}], "
        "n_part={}, modes: {}\n",
        a.ranges.gpus_per_node, a.ranges.min_nodes, a.ranges.max_nodes, a.ranges.min_wave_width,
        a.ranges.max_wave_width, a.ranges.min_round_width, a.ranges.max_round_width,
        a.ranges.passes, a.ranges.both_modes ? "in-place and slot-reuse" : "in-place");
    Table table({"plans", "accepted", "rejected", "violations", "seconds"});
    table.row(
        {num(r.plans), num(r.accepted), num(r.rejected), num(r.violations), fixed(r.seconds, 2)});
    table.print(std::cout);
    if (!r.first_rejection.empty())
      std::cout << "  example rejection: " << r.first_rejection << '\n';
  }
  if (r.violations != 0) {
    throw InternalError(
        fmt::format("{} accepted plans failed the independent re-check", r.violations));
  }
}

}  // namespace

void add_check_plans_command(CLI::App& app) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand("check-plans", "Validate every TIDE-RS plan in a range");
  cmd->add_option("--max-nodes", args->ranges.max_nodes, "Largest M")->capture_default_str();
  cmd->add_option("--min-nodes", args->ranges.min_nodes, "Smallest M")->capture_default_str();
  cmd->add_option("--gpus-per-node,-L", args->ranges.gpus_per_node, "L (1..8)")
      ->capture_default_str();
  cmd->add_option("--wave-widths", args->wave_widths, "W_wave range A-B")->capture_default_str();
  cmd->add_option("--round-widths", args->round_widths, "k range A-B")->capture_default_str();
  cmd->add_option("--passes", args->ranges.passes, "Sub-slice passes n_part")
      ->capture_default_str();
  cmd->add_option("--modes", args->modes, "both (In-Place and Slot-Reuse) or in-place")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args] { run_check(*args); });
}

}  // namespace tide::cli
