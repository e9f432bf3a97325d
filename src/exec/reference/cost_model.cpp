// The cost model of NOTE [cost model]: per-op durations, and reading / writing the
// parameters as JSON.
#include "tide/exec/cost_model.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tide/core/error.hpp"
#include "tide/core/text_file.hpp"

namespace tide::exec {
namespace {

using program::Op;
using program::OpKind;

// Every numeric parameter, by its JSON name; rates must be > 0, times >= 0.
struct Param {
  const char* name;
  double CostModel::*field;
  bool rate;
};
constexpr Param kParams[] = {
    {"ce_copy_gbps", &CostModel::ce_copy_gbps, true},
    {"ce_copy_2d_gbps", &CostModel::ce_copy_2d_gbps, true},
    {"nvlink_gbps", &CostModel::nvlink_gbps, true},
    {"nic_gbps", &CostModel::nic_gbps, true},
    {"sum_cta_gbps", &CostModel::sum_cta_gbps, true},
    {"land_cta_gbps", &CostModel::land_cta_gbps, true},
    {"land_cap_gbps", &CostModel::land_cap_gbps, true},
    {"cast_cta_gbps", &CostModel::cast_cta_gbps, true},
    {"memset_gbps", &CostModel::memset_gbps, true},
    {"round_wait_us", &CostModel::round_wait_us, false},
    {"kernel_launch_us", &CostModel::kernel_launch_us, false},
    {"copy_launch_us", &CostModel::copy_launch_us, false},
    {"rail_latency_us", &CostModel::rail_latency_us, false},
    {"memop_us", &CostModel::memop_us, false},
    {"event_us", &CostModel::event_us, false},
    {"host_enqueue_us", &CostModel::host_enqueue_us, false},
    {"sm_copy_2d_gbps", &CostModel::sm_copy_2d_gbps, true},
    {"sm_copy_gbps", &CostModel::sm_copy_gbps, true},
    {"sm_stream_cap_gbps", &CostModel::sm_stream_cap_gbps, true},
    {"nccl_link_gbps", &CostModel::nccl_link_gbps, true},
    {"nccl_launch_us", &CostModel::nccl_launch_us, false},
    {"nccl_fold_gbps", &CostModel::nccl_fold_gbps, true},
};
constexpr const char* kShareLinks = "share_links";

// Microseconds to move `bytes` at `gbps` GB/s (1e9 B/s).
double transfer_us(double bytes, double gbps) {
  return bytes / (gbps * 1e3);
}

bool is_2d(const program::Region& r) {
  return r.rows > 1 && r.pitch != r.width;
}

double ctas(const Op& op) {
  return static_cast<double>(std::max(1, program::ctas_of(op)));
}

}  // namespace

CostModel parse_cost_model(const std::string& json_text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(std::string("cost model: malformed JSON: ") + e.what());
  }
  if (!j.is_object()) throw InvalidArgument("cost model: expected a JSON object of parameters");
  if (j.contains("machine")) {  // a machine file: NOTE [virtual-fabric machine]
    auto machine =
        std::make_shared<const VirtualFabricMachine>(parse_virtual_fabric_machine(json_text));
    CostModel model = parse_cost_model(j.contains("cost_model") ? j["cost_model"].dump() : "{}");
    model.virtual_fabric = std::move(machine);
    return model;
  }
  CostModel model;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    if (key == kShareLinks) {
      if (!value.is_boolean()) throw InvalidArgument("cost model: share_links must be true/false");
      model.share_links = value.get<bool>();
      continue;
    }
    const Param* p = std::find_if(std::begin(kParams), std::end(kParams),
                                  [&](const Param& q) { return key == q.name; });
    if (p == std::end(kParams)) {
      std::string names;
      for (const Param& q : kParams)
        names += std::string(names.empty() ? "" : ", ") + q.name;
      throw InvalidArgument("cost model: unknown parameter '" + key + "'; known: " + names + ", " +
                            kShareLinks);
    }
    if (!value.is_number())
      throw InvalidArgument("cost model: parameter '" + key + "' must be a number");
    const double v = value.get<double>();
    if (p->rate ? !(v > 0) : !(v >= 0))
      throw InvalidArgument("cost model: parameter '" + key + "' = " + value.dump() +
                            (p->rate ? " must be > 0" : " must be >= 0"));
    model.*(p->field) = v;
  }
  return model;
}

CostModel load_cost_model(const std::string& path) {
  return parse_cost_model(read_text_file(path, "cost model"));
}

std::string cost_model_json(const CostModel& model) {
  nlohmann::ordered_json j;
  for (const Param& p : kParams)
    j[p.name] = model.*(p.field);
  j[kShareLinks] = model.share_links;
  return j.dump(2);
}

double op_duration_us(const CostModel& m, const Op& op, bool network_round_wait) {
  // A step inside an NCCL kernel pays no launch of its own.
  const double kernel_launch = op.inside_kernel ? 0.0 : m.kernel_launch_us;
  // An SM kernel streams at min(ctas * per-CTA rate, the full-grid HBM ceiling).
  auto streaming = [&](double cta_gbps) {
    return std::min(ctas(op) * cta_gbps, m.sm_stream_cap_gbps);
  };
  switch (op.kind()) {
    case OpKind::kCopy: {
      const program::CopyOp& copy = op.as<program::CopyOp>();
      const bool sm = copy.ctas > 0;  // a copy kernel or an NCCL ring hop, not a copy engine
      double us = op.inside_kernel ? 0.0 : (sm ? m.kernel_launch_us : m.copy_launch_us);
      for (const program::CopyDescriptor& c : copy.copies) {
        const bool peer = c.src.buffer.rank != c.dst.buffer.rank;
        const bool two_d = is_2d(c.src) || is_2d(c.dst);
        const double bytes = static_cast<double>(c.dst.bytes());
        if (sm) {
          us += peer ? transfer_us(bytes, m.nccl_link_gbps)
                     : transfer_us(2.0 * bytes, two_d ? m.sm_copy_2d_gbps : m.sm_copy_gbps);
          continue;
        }
        double rate = peer ? m.nvlink_gbps : m.ce_copy_gbps;
        if (two_d) rate = peer ? std::min(m.nvlink_gbps, m.ce_copy_2d_gbps) : m.ce_copy_2d_gbps;
        us += transfer_us(bytes, rate);
      }
      return us;
    }
    case OpKind::kRailPut: {
      double bytes = 0;
      for (const program::CopyDescriptor& c : op.as<program::RailPutOp>().copies)
        bytes += static_cast<double>(c.dst.bytes());
      return m.rail_latency_us + transfer_us(bytes, m.nic_gbps);
    }
    case OpKind::kSum: {
      const program::SumOp& sum = op.as<program::SumOp>();
      double in_elems = 0;
      for (const program::SumSegment& s : sum.segments)
        in_elems += static_cast<double>(s.elems);
      const double logical = in_elems * static_cast<double>(sum.staged.size() + 1) *
                                 static_cast<double>(item_bytes(sum.in_dtype)) +
                             static_cast<double>(sum.dst.bytes());
      return kernel_launch + transfer_us(logical, streaming(m.sum_cta_gbps));
    }
    case OpKind::kLand: {
      // TIDE's landing kernel runs at the in-situ landing rate (App. G) under the fabric's
      // ceiling when it pulls from peers, under HBM's when its partials are local; a step of
      // an NCCL ring folds local buffers and costs only the part its pipelining does not hide.
      const program::LandOp& land = op.as<program::LandOp>();
      const double bytes = static_cast<double>(land.dst.bytes());
      if (op.inside_kernel) return transfer_us(bytes, m.nccl_fold_gbps);
      bool remote = false;
      for (const program::Region& s : land.sources)
        remote |= s.buffer.rank != op.rank;
      const double ceiling = remote ? m.land_cap_gbps : m.sm_stream_cap_gbps;
      return kernel_launch + transfer_us(bytes, std::min(ctas(op) * m.land_cta_gbps, ceiling));
    }
    case OpKind::kCast: {
      const program::CastOp& cast = op.as<program::CastOp>();
      double bytes = static_cast<double>(cast.dst.bytes());
      bytes += static_cast<double>(cast.src.bytes());
      return kernel_launch + transfer_us(bytes, streaming(m.cast_cta_gbps));
    }
    case OpKind::kZero:
      return kernel_launch +
             transfer_us(static_cast<double>(op.as<program::ZeroOp>().dst.bytes()), m.memset_gbps);
    case OpKind::kSignal:
      return m.memop_us;
    case OpKind::kWait:
      return m.memop_us + (network_round_wait ? m.round_wait_us : 0.0);
    case OpKind::kEventWait:
      return op.as<program::EventWaitOp>().ctas > 0 ? m.nccl_launch_us : m.event_us;
    case OpKind::kEventRecord:
      return m.event_us;
    case OpKind::kRelease:
      return 0.0;
  }
  return 0.0;
}

}  // namespace tide::exec
