// The calibration file (NOTE [calibration file]): round trip, validation errors that name the
// field, and the conversions to the cost model and the sizing solver. CPU only.
#include "tide/calibrate/calibration.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "tide/calibrate/measure.hpp"
#include "tide/core/error.hpp"
#include "tide/core/sizing_solver.hpp"

namespace tide::calibrate {
namespace {

Calibration full_calibration() {
  Calibration c;
  c.device = {{"name", "test GPU"}, {"sms", 132}};
  MeasureOptions o;
  c.values["sum_cta_gbps"] = {33.0, Source::kMeasured, "test"};
  add_given_values(o, c);
  return c;
}

std::string error_of(const std::string& text) {
  try {
    parse_calibration(text, "f.json");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(Calibration, EveryCostModelParameterIsNamed) {
  const auto& names = parameter_names();
  EXPECT_EQ(names.size(), 22u);
  EXPECT_EQ(names.front(), "ce_copy_gbps");
  EXPECT_EQ(unit_of("sum_cta_gbps"), "GB/s");
  EXPECT_EQ(unit_of("memop_us"), "us");
}

TEST(Calibration, RoundTrip) {
  const Calibration c = full_calibration();
  const Calibration back = parse_calibration(calibration_json(c), "x");
  ASSERT_EQ(back.values.size(), parameter_names().size());
  for (const auto& [name, v] : c.values) {
    EXPECT_EQ(back.values.at(name).value, v.value) << name;
    EXPECT_EQ(back.values.at(name).source, v.source) << name;
    EXPECT_EQ(back.values.at(name).method, v.method) << name;
  }
  EXPECT_EQ(back.device["sms"], 132);
  EXPECT_EQ(back.values.at("sum_cta_gbps").source, Source::kMeasured);
  EXPECT_EQ(back.values.at("nic_gbps").source, Source::kGiven);
  EXPECT_EQ(back.values.at("nic_gbps").value, 47.5);
  EXPECT_NE(back.values.at("nic_gbps").method.find("--nic-gbps"), std::string::npos);
}

TEST(Calibration, FilesWithoutTheBaselineParametersGetTheirDefaults) {
  // A file written before the stock baseline's parameters existed still loads: those come
  // from FSDP2's and NCCL's runs, not from `tide calibrate`.
  nlohmann::json j = nlohmann::json::parse(calibration_json(full_calibration()));
  const char* later[] = {"sm_copy_gbps",   "sm_copy_2d_gbps", "sm_stream_cap_gbps",
                         "nccl_link_gbps", "nccl_launch_us",  "nccl_fold_gbps"};
  for (const char* name : later)
    j["values"].erase(name);
  const Calibration c = parse_calibration(j.dump(), "old.json");
  const exec::CostModel m = to_cost_model(c);
  const exec::CostModel defaults;
  EXPECT_EQ(m.nccl_link_gbps, defaults.nccl_link_gbps);
  EXPECT_EQ(m.sm_stream_cap_gbps, defaults.sm_stream_cap_gbps);
  EXPECT_EQ(m.sum_cta_gbps, 33.0);  // what the file says is kept
  for (const char* name : later)
    EXPECT_EQ(c.values.at(name).source, Source::kGiven) << name;
}

TEST(Calibration, ConvertsToCostModelAndSolverRates) {
  const Calibration c = full_calibration();
  const exec::CostModel m = to_cost_model(c);
  EXPECT_EQ(m.sum_cta_gbps, 33.0);
  EXPECT_EQ(m.nic_gbps, 47.5);
  EXPECT_EQ(m.round_wait_us, 1300.0);
  const SolverRates r = solver_rates(c);
  EXPECT_EQ(r.bw_sum_gbps, 33.0);
  EXPECT_EQ(r.bw_nic_gbps, 47.5);
  EXPECT_EQ(r.bw_land_gbps, 21.0);
  EXPECT_EQ(r.bw_cap_gbps, 90.0);
  EXPECT_DOUBLE_EQ(r.t_round_ms, 1.3);
  // Eq. 13 with the slower BW_sum: ceil(1.5 * (8 * 2 / 4 + 1) * 47.5 / 33).
  SolverInput in;
  in.bw_nic_gbps = r.bw_nic_gbps;
  in.bw_sum_gbps = r.bw_sum_gbps;
  in.bw_land_gbps = r.bw_land_gbps;
  in.bw_cap_gbps = r.bw_cap_gbps;
  in.t_round_ms = r.t_round_ms;
  in.nodes = 8;
  in.shard_bytes = 32 << 20;
  EXPECT_EQ(solve_sizing(in).sum_ctas, static_cast<int>(std::ceil(1.5 * 5 * 47.5 / 33)));
}

TEST(Calibration, ErrorsNameTheField) {
  nlohmann::json good = nlohmann::json::parse(calibration_json(full_calibration()));
  auto with = [&](auto edit) {
    nlohmann::json j = good;
    edit(j);
    return error_of(j.dump());
  };
  EXPECT_NE(error_of("{not json"), "");
  EXPECT_NE(error_of("{not json").find("malformed JSON"), std::string::npos);
  EXPECT_NE(error_of("[1]").find("object"), std::string::npos);
  EXPECT_NE(with([](auto& j) { j.erase("tide_calibration"); }).find("tide_calibration"),
            std::string::npos);
  EXPECT_NE(with([](auto& j) { j["tide_calibration"] = 2; }).find("tide_calibration"),
            std::string::npos);
  EXPECT_NE(with([](auto& j) {
              j["values"].erase("sum_cta_gbps");
            }).find("missing field values.sum_cta_gbps"),
            std::string::npos);
  EXPECT_NE(with([](auto& j) {
              j["values"]["sum_cta_gbps"]["value"] = -1;
            }).find("values.sum_cta_gbps.value = -1 must be > 0"),
            std::string::npos);
  EXPECT_NE(
      with([](auto& j) { j["values"]["memop_us"]["value"] = -0.5; }).find("values.memop_us.value"),
      std::string::npos);
  EXPECT_NE(with([](auto& j) {
              j["values"]["nic_gbps"]["value"] = "fast";
            }).find("values.nic_gbps.value must be a number"),
            std::string::npos);
  EXPECT_NE(with([](auto& j) {
              j["values"]["nic_gbps"]["source"] = "guessed";
            }).find("values.nic_gbps.source"),
            std::string::npos);
  EXPECT_NE(
      with([](auto& j) { j["values"]["nic_gbps"]["unit"] = "MB/s"; }).find("values.nic_gbps.unit"),
      std::string::npos);
  EXPECT_NE(with([](auto& j) {
              j["values"]["warp_gbps"] = j["values"]["nic_gbps"];
            }).find("unknown field values.warp_gbps"),
            std::string::npos);
  EXPECT_NE(with([](auto& j) { j["extra"] = 1; }).find("unknown field extra"), std::string::npos);
  EXPECT_EQ(error_of(good.dump()), "");
  // Every message starts with the origin.
  EXPECT_EQ(with([](auto& j) { j.erase("values"); }).rfind("calibration 'f.json': ", 0), 0u);
}

TEST(Calibration, RecognisesItsFormat) {
  EXPECT_TRUE(looks_like_calibration(calibration_json(full_calibration())));
  EXPECT_FALSE(looks_like_calibration("{\"nic_gbps\": 10}"));
  EXPECT_FALSE(looks_like_calibration("{broken"));
}

TEST(Calibration, MeasureRefusesWithoutADevice) {
  if (have_cuda_backend()) GTEST_SKIP() << "CUDA build: the CLI test checks the no-GPU message";
  try {
    measure(MeasureOptions{});
    FAIL() << "measure() returned without a CUDA backend";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device found"), std::string::npos);
  }
}

}  // namespace
}  // namespace tide::calibrate
