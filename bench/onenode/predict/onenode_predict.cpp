// tide_onenode_predict: tide_onenode_bench's rows predicted on the CPU. Each row's program is
// the bench's own (onenode_program.hpp: layer, split 1 x L, program, accumulate, library
// defaults), run timing-only by the reference executor on a virtual-fabric machine (NOTE
// [virtual-fabric machine] in docs/reference_executor.md: the N ranks share one GPU's copy
// engines, HBM, SMs and hardware queues, rates from the machine file). With --measured (the
// bench's onenode.json) every row is compared with the GPU's median: prediction / measured,
// and whether it is within 15%. Beside it the same prediction with every stream on its own
// hardware queue (hw_queues 0), so a row shows what the queue aliasing term contributes.
//
// Usage: tide_onenode_predict --machine FILE.json [--measured onenode.json] [--json OUT]
//        [--md OUT] [--models a,b] [--splits 2,4,8] [--trace DIR] (a Chrome trace per row)
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../onenode_program.hpp"
#include "tide/core/error.hpp"
#include "tide/core/models.hpp"
#include "tide/core/text_file.hpp"
#include "tide/exec/reference_executor.hpp"

namespace {

using nlohmann::json;

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> v;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    v.push_back(item);
  return v;
}

double predict(const tide::program::Program& program, const tide::exec::CostModel& cost,
               const std::string& trace) {
  tide::exec::ReferenceExecutor ex(program, {true});
  tide::exec::RunOptions o;
  o.cost = cost;
  o.jitter = 0;
  o.record_times = !trace.empty();
  const tide::exec::RunResult r = ex.run(o);
  if (!r.completed) throw tide::InternalError("the reference executor did not complete the row");
  if (!trace.empty()) tide::exec::write_chrome_trace_file(trace, program, r);
  return r.makespan_us / 1000.0;
}

const json* measured_row(const json& measured, const std::string& layer, const std::string& split,
                         const std::string& program, bool accumulate) {
  if (!measured.contains("rows")) return nullptr;
  for (const json& r : measured["rows"]) {
    if (r.value("layer", "") == layer && r.value("split", "") == split &&
        r.value("program", "") == program && r.value("accumulate", false) == accumulate &&
        r.contains("ms")) {
      return &r;
    }
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  std::string machine_path, measured_path, json_path, md_path, trace_dir;
  std::vector<std::string> models = {"llama3.1-8b", "llama3.1-70b"};
  std::vector<int> splits = {2, 4, 8};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--machine") {
      machine_path = v;
    } else if (a == "--measured") {
      measured_path = v;
    } else if (a == "--json") {
      json_path = v;
    } else if (a == "--md") {
      md_path = v;
    } else if (a == "--trace") {
      trace_dir = v;
    } else if (a == "--models") {
      models = split_list(v);
    } else if (a == "--splits") {
      splits.clear();
      for (const std::string& s : split_list(v))
        splits.push_back(std::stoi(s));
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (machine_path.empty()) {
    std::fprintf(stderr, "usage: tide_onenode_predict --machine FILE.json [--measured FILE]\n");
    return 2;
  }
  try {
    const tide::exec::CostModel cost = tide::exec::load_cost_model(machine_path);
    if (!cost.virtual_fabric) {
      throw tide::InvalidArgument(machine_path + ": not a virtual-fabric machine file");
    }
    tide::exec::CostModel unaliased = cost;
    auto own_queues = std::make_shared<tide::exec::VirtualFabricMachine>(*cost.virtual_fabric);
    own_queues->hw_queues = 0;
    unaliased.virtual_fabric = own_queues;
    json measured = json::object();
    if (!measured_path.empty())
      measured = json::parse(tide::read_text_file(measured_path, "measured"));
    json out = {{"machine", machine_path},
                {"gpu", cost.virtual_fabric->gpu},
                {"source", cost.virtual_fabric->source},
                {"measured", measured_path},
                {"rows", json::array()}};
    std::ostringstream md;
    md << "| layer | N | program | accumulate | predicted ms | predicted, own queues ms | "
          "measured ms median [p10, p90] | predicted / measured | within 15% |\n"
          "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |\n";
    int within = 0, compared = 0;
    for (const std::string& model : models) {
      const auto& params = tide::find_model_group(model).params;
      for (const int l : splits) {
        const tide::Topology topo(1, l);
        const tide::GroupLayout layout(topo, params, tide::DType::kBf16, tide::DType::kBf16);
        for (const auto& v : tide::bench::one_node_variants()) {
          const tide::RsPlan plan = tide::bench::one_node_plan(layout, v);
          for (const bool accumulate : {false, true}) {
            const auto program = tide::bench::one_node_program(plan, topo.world(), accumulate);
            const std::string split = "1x" + std::to_string(l);
            const std::string trace = trace_dir.empty()
                                          ? ""
                                          : trace_dir + "/" + model + "-" + split + "-" + v.name +
                                                (accumulate ? "-acc" : "") + ".json";
            const double ms = predict(program, cost, trace);
            const double own = predict(program, unaliased, "");
            json row = {{"layer", model},           {"split", split},
                        {"program", v.name},        {"accumulate", accumulate},
                        {"predicted_ms", ms},       {"predicted_own_queues_ms", own},
                        {"ops", program.ops.size()}};
            char line[512];
            const json* m = measured_row(measured, model, split, v.name, accumulate);
            if (m != nullptr) {
              const json& t = (*m)["ms"];
              const double med = t["median"].get<double>();
              const double ratio = ms / med;
              const bool ok = std::fabs(ratio - 1.0) <= 0.15;
              ++compared;
              within += ok ? 1 : 0;
              row["measured_ms"] = t;
              row["ratio"] = ratio;
              row["within_15pct"] = ok;
              std::snprintf(line, sizeof line,
                            "| %s | %s | %s | %s | %.3f | %.3f | %.3f [%.3f, %.3f] | %.2f | %s |\n",
                            model.c_str(), split.c_str(), v.name.c_str(), accumulate ? "yes" : "no",
                            ms, own, med, t["p10"].get<double>(), t["p90"].get<double>(), ratio,
                            ok ? "yes" : "no");
            } else {
              std::snprintf(line, sizeof line, "| %s | %s | %s | %s | %.3f | %.3f | - | - | - |\n",
                            model.c_str(), split.c_str(), v.name.c_str(), accumulate ? "yes" : "no",
                            ms, own);
            }
            md << line;
            std::printf("%s", line);
            std::fflush(stdout);
            out["rows"].push_back(row);
          }
        }
      }
    }
    out["within_15pct"] = within;
    out["compared"] = compared;
    md << "\n" << within << " of " << compared << " rows within 15%.\n";
    std::printf("%d of %d rows within 15%%\n", within, compared);
    if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    if (!md_path.empty()) std::ofstream(md_path) << md.str();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tide_onenode_predict: %s\n", e.what());
    return 1;
  }
  return 0;
}
