// The calibration file of NOTE [calibration file]: parsing, validation, writing, and the
// conversions to the cost model and the sizing solver's rates.
#include "tide/calibrate/calibration.hpp"

#include <algorithm>
#include <cmath>

#include "tide/core/error.hpp"
#include "tide/core/text_file.hpp"

namespace tide::calibrate {
namespace {

using nlohmann::json;

bool is_rate(const std::string& name) {
  return name.ends_with("_gbps");
}

// Throws InvalidArgument "calibration ORIGIN: WHAT" (one line).
[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw InvalidArgument("calibration '" + origin + "': " + what);
}

// The baseline's parameters, added to the cost model after calibration files were first
// written: `tide calibrate` does not measure them (they come from FSDP2's and NCCL's own
// runs), so a file may leave them out and gets the cost model's default, marked given.
bool may_be_absent(const std::string& name) {
  return name.starts_with("sm_copy") || name == "sm_stream_cap_gbps" || name.starts_with("nccl_");
}

std::string known_names() {
  std::string names;
  for (const std::string& n : parameter_names())
    names += (names.empty() ? "" : ", ") + n;
  return names;
}

// The problem with `v` as the value of `name`, or "" when it is valid.
std::string value_problem(const std::string& name, double v) {
  if (!std::isfinite(v)) return "must be a finite number";
  if (is_rate(name) && !(v > 0)) return "must be > 0 (a rate in GB/s)";
  if (!is_rate(name) && !(v >= 0)) return "must be >= 0 (a time in us)";
  return "";
}

Value parse_value(const std::string& origin, const std::string& name, const json& entry) {
  const std::string field = "values." + name;
  if (!entry.is_object())
    fail(origin, "field " + field + " must be an object {\"value\", \"source\", ...}");
  for (const auto& item : entry.items()) {
    const std::string& k = item.key();
    if (k != "value" && k != "unit" && k != "source" && k != "method")
      fail(origin, "unknown field " + field + "." + k + "; known: value, unit, source, method");
  }
  Value out;
  if (!entry.contains("value")) fail(origin, "missing field " + field + ".value");
  const json& v = entry["value"];
  if (!v.is_number()) fail(origin, "field " + field + ".value must be a number, got " + v.dump());
  out.value = v.get<double>();
  if (const std::string p = value_problem(name, out.value); !p.empty())
    fail(origin, "field " + field + ".value = " + v.dump() + " " + p);
  if (!entry.contains("source")) fail(origin, "missing field " + field + ".source");
  const json& s = entry["source"];
  if (s == "measured") {
    out.source = Source::kMeasured;
  } else if (s == "given") {
    out.source = Source::kGiven;
  } else {
    fail(origin, "field " + field + ".source must be \"measured\" or \"given\", got " + s.dump());
  }
  if (entry.contains("unit")) {
    if (entry["unit"] != unit_of(name))
      fail(origin, "field " + field + ".unit must be \"" + unit_of(name) + "\", got " +
                       entry["unit"].dump());
  }
  if (entry.contains("method")) {
    if (!entry["method"].is_string()) fail(origin, "field " + field + ".method must be a string");
    out.method = entry["method"].get<std::string>();
  }
  return out;
}

}  // namespace

const char* source_name(Source source) {
  return source == Source::kMeasured ? "measured" : "given";
}

const std::vector<std::string>& parameter_names() {
  // The cost model's own list, so that the two never drift apart.
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    const auto all = nlohmann::ordered_json::parse(exec::cost_model_json(exec::CostModel{}));
    for (const auto& item : all.items()) {
      if (item.value().is_number()) out.push_back(item.key());
    }
    return out;
  }();
  return names;
}

std::string unit_of(const std::string& name) {
  return is_rate(name) ? "GB/s" : "us";
}

bool looks_like_calibration(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains(kFormatKey);
}

Calibration parse_calibration(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(origin, std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) fail(origin, "expected a JSON object");
  if (!j.contains(kFormatKey))
    fail(origin, std::string("missing field ") + kFormatKey + " (not a calibration file?)");
  if (j[kFormatKey] != kFormatVersion)
    fail(origin, std::string("field ") + kFormatKey + " = " + j[kFormatKey].dump() +
                     ": this tide reads format " + std::to_string(kFormatVersion));
  for (const auto& item : j.items()) {
    const std::string& k = item.key();
    if (k != kFormatKey && k != "device" && k != "values" && k != "details")
      fail(origin, "unknown field " + k + "; known: " + kFormatKey + ", device, values, details");
  }
  Calibration c;
  if (j.contains("device")) {
    if (!j["device"].is_object()) fail(origin, "field device must be an object");
    c.device = j["device"];
  }
  if (j.contains("details")) {
    if (!j["details"].is_object()) fail(origin, "field details must be an object");
    c.details = j["details"];
  }
  if (!j.contains("values")) fail(origin, "missing field values");
  const json& values = j["values"];
  if (!values.is_object()) fail(origin, "field values must be an object");
  const std::vector<std::string>& names = parameter_names();
  for (const auto& item : values.items()) {
    if (std::find(names.begin(), names.end(), item.key()) == names.end())
      fail(origin, "unknown field values." + item.key() + "; known: " + known_names());
  }
  const json defaults = json::parse(exec::cost_model_json(exec::CostModel{}));
  for (const std::string& name : names) {
    if (!values.contains(name) && may_be_absent(name)) {
      c.values[name] = {defaults[name].get<double>(), Source::kGiven,
                        "cost-model default (include/tide/exec/cost_model.hpp); not in this file"};
      continue;
    }
    if (!values.contains(name)) fail(origin, "missing field values." + name);
    c.values[name] = parse_value(origin, name, values[name]);
  }
  return c;
}

Calibration load_calibration(const std::string& path) {
  return parse_calibration(read_text_file(path, "calibration"), path);
}

std::string calibration_json(const Calibration& c) {
  nlohmann::ordered_json values;
  for (const std::string& name : parameter_names()) {
    const auto it = c.values.find(name);
    if (it == c.values.end()) throw InternalError("calibration: no value for " + name);
    if (const std::string p = value_problem(name, it->second.value); !p.empty())
      throw InternalError("calibration: " + name + " = " + std::to_string(it->second.value) + " " +
                          p);
    values[name] = {{"value", it->second.value},
                    {"unit", unit_of(name)},
                    {"source", source_name(it->second.source)},
                    {"method", it->second.method}};
  }
  nlohmann::ordered_json out;
  out[kFormatKey] = kFormatVersion;
  out["device"] = c.device;
  out["values"] = values;
  out["details"] = c.details;
  return out.dump(2);
}

exec::CostModel to_cost_model(const Calibration& c) {
  json flat = json::object();
  for (const auto& [name, v] : c.values)
    flat[name] = v.value;
  return exec::parse_cost_model(flat.dump());
}

exec::CostModel load_cost_model_file(const std::string& path) {
  const std::string text = read_text_file(path, "cost model");
  if (looks_like_calibration(text)) return to_cost_model(parse_calibration(text, path));
  return exec::parse_cost_model(text);
}

SolverRates solver_rates(const Calibration& c) {
  auto get = [&](const char* name) { return c.values.at(name).value; };
  SolverRates r;
  r.bw_nic_gbps = get("nic_gbps");
  r.bw_sum_gbps = get("sum_cta_gbps");
  r.bw_land_gbps = get("land_cta_gbps");
  r.bw_cap_gbps = get("land_cap_gbps");
  r.t_round_ms = get("round_wait_us") / 1000.0;
  return r;
}

}  // namespace tide::calibrate
