// `tide calibrate`: measures this GPU's rates for the sizing solver and the cost model and
// writes the calibration file (NOTE [calibration file] in docs/cli.md).
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "table.hpp"
#include "tide/calibrate/calibration.hpp"
#include "tide/calibrate/measure.hpp"
#include "tide/core/error.hpp"

namespace tide::cli {
namespace {

struct CalibrateArgs {
  calibrate::MeasureOptions options;
  std::string output;
  std::string json_path;
  CLI::Option* json = nullptr;
  CLI::Option* nic = nullptr;
  CLI::Option* t_round = nullptr;
  CLI::Option* rail_latency = nullptr;
  CLI::Option* nvlink = nullptr;
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out || !(out << text << '\n'))
    throw InvalidArgument("calibrate: cannot write '" + path + "'");
}

void print_table(const calibrate::Calibration& c) {
  std::cout << fmt::format("Calibration of {} ({} SMs)\n", c.device.value("name", "?"),
                           c.device.value("sms", 0));
  Table table({"value", "", "unit", "source", "how"});
  for (const std::string& name : calibrate::parameter_names()) {
    const calibrate::Value& v = c.values.at(name);
    table.row({name, fixed(v.value, v.value < 10 ? 2 : 1), calibrate::unit_of(name),
               calibrate::source_name(v.source), v.method});
  }
  table.print(std::cout);
}

void run_calibrate(CalibrateArgs& a) {
  calibrate::MeasureOptions& o = a.options;
  if (a.nic->count() > 0) o.nic_source = "given on the command line";
  if (a.t_round->count() > 0) o.t_round_source = "given on the command line";
  if (a.rail_latency->count() > 0) o.rail_latency_source = "given on the command line";
  if (a.nvlink->count() > 0) o.nvlink_source = "given on the command line";
  if (!(o.nic_gbps > 0) || !(o.nvlink_gbps > 0) || !(o.t_round_ms >= 0) ||
      !(o.rail_latency_us >= 0)) {
    throw InvalidArgument(
        "calibrate: --nic-gbps and --nvlink-gbps must be > 0, --t-round and "
        "--rail-latency-us >= 0");
  }
  if (o.sum_ctas < 1 || o.sum_ctas > 1024 || o.landing_ctas < 1 || o.landing_ctas > 1024)
    throw InvalidArgument("calibrate: --sum-ctas and --landing-ctas must be in 1..1024");
  // --json alone prints the file; --json FILE writes it (like --output) and prints the table.
  const bool print_json = a.json->count() > 0 && a.json_path.empty();
  std::string path = a.output;
  if (!a.json_path.empty()) path = a.json_path;

  const calibrate::Calibration c = calibrate::measure(o, print_json ? nullptr : &std::cerr);
  const std::string text = calibrate::calibration_json(c);
  if (!path.empty()) write_file(path, text);
  if (print_json) {
    std::cout << text << '\n';
    return;
  }
  print_table(c);
  if (!path.empty()) std::cout << "wrote " << path << '\n';
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Measure this GPU's rates for tide solve and the cost model (needs a GPU)");
  calibrate::MeasureOptions& o = a->options;
  cmd->add_option("--device", o.device, "CUDA device to measure")->capture_default_str();
  cmd->add_flag("--quick", o.quick, "Fewer repeats, smaller buffers (a smoke run)");
  cmd->add_option("--sum-ctas", o.sum_ctas, "Read BW_sum per CTA at this Level 1 CTA budget")
      ->capture_default_str();
  cmd->add_option("--landing-ctas", o.landing_ctas,
                  "Read BW_land per CTA at this landing CTA budget")
      ->capture_default_str();
  a->nic = cmd->add_option("--nic-gbps", o.nic_gbps, "Given: rail NIC rate per GPU, GB/s")
               ->capture_default_str();
  a->t_round = cmd->add_option("--t-round", o.t_round_ms, "Given: per-round wait t_rnd, ms")
                   ->capture_default_str();
  a->rail_latency =
      cmd->add_option("--rail-latency-us", o.rail_latency_us, "Given: rail put latency, us")
          ->capture_default_str();
  a->nvlink = cmd->add_option("--nvlink-gbps", o.nvlink_gbps,
                              "Given unless 2+ GPUs are visible: peer rate per GPU, GB/s")
                  ->capture_default_str();
  cmd->add_option("--output,-o", a->output, "Write the calibration file here");
  a->json = cmd->add_option("--json", a->json_path,
                            "Print the calibration file as JSON; with FILE, write it there")
                ->expected(0, 1);
  cmd->callback([a] { run_calibrate(*a); });
}

}  // namespace tide::cli
