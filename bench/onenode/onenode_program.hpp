// The one program a tide_onenode_bench row runs (layer, split 1 x L, program, accumulate):
// shared by the GPU bench and its CPU prediction (tide_onenode_predict), so both run the same
// work. Library defaults: rounds in flight, staging chunk and slots, CTA budgets.
#pragma once

#include <string>
#include <vector>

#include "tide/core/layout.hpp"
#include "tide/core/rs_defaults.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/rs_builder.hpp"

namespace tide::bench {

// A row's program: in-place (peers push), slot-reuse-pull (owners pull from the gradient
// areas), slot-reuse-push (the runtime's push from the slot).
struct OneNodeVariant {
  std::string name;
  RsMode mode;
  bool pull;
};

inline const std::vector<OneNodeVariant>& one_node_variants() {
  static const std::vector<OneNodeVariant> v = {{"in-place", RsMode::kInPlace, false},
                                                {"slot-reuse-pull", RsMode::kSlotReuse, true},
                                                {"slot-reuse-push", RsMode::kSlotReuse, false}};
  return v;
}

inline RsPlan one_node_plan(const GroupLayout& layout, const OneNodeVariant& v) {
  RsOptions ro;
  ro.mode = v.mode;
  ro.one_node = true;
  ro.one_node_pull = v.pull;
  ro = with_default_rounds_in_flight(ro, layout);
  return RsPlan(layout, ro);
}

inline program::Program one_node_program(const RsPlan& plan, int ranks, bool accumulate) {
  program::RsProgramOptions po;  // the library's CTA budgets
  po.alpha = 1.0f / static_cast<float>(ranks);
  po.accumulate = accumulate;
  return program::build_rs_program(plan, po);
}

}  // namespace tide::bench
