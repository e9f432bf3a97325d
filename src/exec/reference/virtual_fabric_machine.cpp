// The virtual-fabric machine file (NOTE [virtual-fabric machine]): parsing and rate lookups.
#include "tide/exec/virtual_fabric_machine.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tide/core/error.hpp"
#include "tide/core/text_file.hpp"

namespace tide::exec {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) {
  throw InvalidArgument("virtual-fabric machine: " + what);
}

const json& field(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end()) bad(std::string("missing field '") + name + "'");
  return *it;
}

double rate(const json& v, const std::string& name) {
  if (!v.is_number()) bad("'" + name + "' must be a number, got " + v.dump());
  const double x = v.get<double>();
  if (!(x > 0) || !std::isfinite(x)) bad("'" + name + "' = " + v.dump() + " must be > 0");
  return x;
}

int count(const json& v, const std::string& name, int min) {
  if (!v.is_number_integer()) bad("'" + name + "' must be an integer, got " + v.dump());
  const int x = v.get<int>();
  if (x < min) bad("'" + name + "' = " + v.dump() + " must be >= " + std::to_string(min));
  return x;
}

std::string text(const json& v, const std::string& name) {
  if (!v.is_string()) bad("'" + name + "' must be a string");
  return v.get<std::string>();
}

constexpr const char* kKnown[] = {"machine",        "gpu",
                                  "source",         "sources",
                                  "hbm_gbps",       "copy_gbps_by_streams",
                                  "sum_cta_gelems", "land_cta_gbps",
                                  "cast_cta_gbps",  "sms",
                                  "hw_queues",      "cost_model"};

}  // namespace

double VirtualFabricMachine::copy_gbps(int streams) const {
  const auto& t = copy_gbps_by_streams;
  if (t.empty()) return 0;
  if (streams <= t.front().first) return t.front().second;
  for (std::size_t i = 1; i < t.size(); ++i) {
    if (streams <= t[i].first) {
      const double f = static_cast<double>(streams - t[i - 1].first) /
                       static_cast<double>(t[i].first - t[i - 1].first);
      return t[i - 1].second + f * (t[i].second - t[i - 1].second);
    }
  }
  return t.back().second;
}

double VirtualFabricMachine::sum_elems_per_us(int l, bool accumulate) const {
  // Time per element is interpolated in L between the measured L of this accumulate flag.
  std::vector<std::pair<int, double>> ns;  // (L, ns per element)
  for (const SumRate& r : sum_cta)
    if (r.accumulate == accumulate) ns.emplace_back(r.l, 1.0 / r.gelems);
  if (ns.empty())
    bad(std::string("no Level 1 sum rate with accumulate = ") + (accumulate ? "true" : "false"));
  std::sort(ns.begin(), ns.end());
  double t = ns.back().second;
  if (l <= ns.front().first) {
    t = ns.front().second;
  } else {
    for (std::size_t i = 1; i < ns.size(); ++i) {
      if (l <= ns[i].first) {
        const double f = static_cast<double>(l - ns[i - 1].first) /
                         static_cast<double>(ns[i].first - ns[i - 1].first);
        t = ns[i - 1].second + f * (ns[i].second - ns[i - 1].second);
        break;
      }
    }
  }
  return 1e3 / t;  // 1 / (ns per element) = elements per ns; x 1e3 per us
}

VirtualFabricMachine parse_virtual_fabric_machine(const std::string& json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    bad(std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) bad("expected a JSON object");
  for (const auto& item : j.items()) {
    if (std::find_if(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return item.key() == k; }) == std::end(kKnown)) {
      bad("unknown field '" + item.key() + "'");
    }
  }
  if (text(field(j, "machine"), "machine") != "virtual-fabric") {
    bad("'machine' is " + field(j, "machine").dump() + "; this file type is \"virtual-fabric\"");
  }
  VirtualFabricMachine m;
  m.gpu = text(field(j, "gpu"), "gpu");
  m.source = text(field(j, "source"), "source");
  if (m.source.empty()) bad("'source' must name where the rates come from");
  if (j.contains("sources")) {
    if (!j["sources"].is_object()) bad("'sources' must be an object of strings");
    for (const auto& s : j["sources"].items())
      m.sources[s.key()] = text(s.value(), "sources." + s.key());
  }
  m.hbm_gbps = rate(field(j, "hbm_gbps"), "hbm_gbps");
  const json& copies = field(j, "copy_gbps_by_streams");
  if (!copies.is_array() || copies.empty()) {
    bad("'copy_gbps_by_streams' must be a non-empty array of [streams, GB/s]");
  }
  for (const json& e : copies) {
    if (!e.is_array() || e.size() != 2) {
      bad("'copy_gbps_by_streams' entry " + e.dump() + " is not [streams, GB/s]");
    }
    const int s = count(e[0], "copy_gbps_by_streams streams", 1);
    if (!m.copy_gbps_by_streams.empty() && s <= m.copy_gbps_by_streams.back().first) {
      bad("'copy_gbps_by_streams' streams must increase (" + e.dump() + ")");
    }
    m.copy_gbps_by_streams.emplace_back(s, rate(e[1], "copy_gbps_by_streams GB/s"));
  }
  const json& sums = field(j, "sum_cta_gelems");
  if (!sums.is_array() || sums.empty()) {
    bad("'sum_cta_gelems' must be a non-empty array of {l, accumulate, gelems}");
  }
  for (const json& e : sums) {
    if (!e.is_object()) bad("'sum_cta_gelems' entry " + e.dump() + " is not an object");
    VirtualFabricMachine::SumRate r;
    r.l = count(field(e, "l"), "sum_cta_gelems.l", 1);
    const json& acc = field(e, "accumulate");
    if (!acc.is_boolean()) bad("'sum_cta_gelems.accumulate' must be true/false");
    r.accumulate = acc.get<bool>();
    r.gelems = rate(field(e, "gelems"), "sum_cta_gelems.gelems");
    m.sum_cta.push_back(r);
  }
  for (const bool acc : {false, true}) {
    if (std::none_of(m.sum_cta.begin(), m.sum_cta.end(),
                     [&](const VirtualFabricMachine::SumRate& r) { return r.accumulate == acc; })) {
      bad(std::string("'sum_cta_gelems' has no entry with accumulate = ") +
          (acc ? "true" : "false"));
    }
  }
  m.land_cta_gbps = rate(field(j, "land_cta_gbps"), "land_cta_gbps");
  m.cast_cta_gbps = rate(field(j, "cast_cta_gbps"), "cast_cta_gbps");
  m.sms = count(field(j, "sms"), "sms", 1);
  if (j.contains("hw_queues")) m.hw_queues = count(j["hw_queues"], "hw_queues", 0);
  return m;
}

VirtualFabricMachine load_virtual_fabric_machine(const std::string& path) {
  return parse_virtual_fabric_machine(read_text_file(path, "virtual-fabric machine"));
}

}  // namespace tide::exec
