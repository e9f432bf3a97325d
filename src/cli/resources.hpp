// What a simulation will hold in memory and how many ops it runs, estimated before it
// starts, so `tide simulate` refuses early (naming the estimate and what to use instead)
// rather than growing until the machine runs out.
#pragma once

#include <cstdint>
#include <string>

#include "tide/core/ag_plan.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/program.hpp"

namespace tide::cli {

struct ResourceEstimate {
  double ops = 0;           // ops the reference executor runs
  double op_bytes = 0;      // the executor's state for them (program, schedule, clocks)
  double buffer_bytes = 0;  // simulated buffers of every rank (data runs only)
  double host_bytes = 0;    // inputs and references the CLI keeps beside them
  double seconds = 0;       // the run's wall time on the reference executor
  double bytes() const { return op_bytes + buffer_bytes + host_bytes; }
};

// One call, before its program is built (ops from the plan's shape; buffers of every rank
// and the CLI's inputs and references when `data`). `baseline`: stock FSDP2's rings.
ResourceEstimate estimate_reduce_scatter(const RsPlan& plan, bool data, bool baseline);
ResourceEstimate estimate_all_gather(const AgPlan& plan, bool data, bool baseline);
ResourceEstimate& operator+=(ResourceEstimate& total, const ResourceEstimate& call);

// Throws Unsupported when `estimate` needs more than half this machine's memory or would run
// for more than about twenty minutes: "<what> needs about X GB ... ; <instead>".
void require_fits(const ResourceEstimate& estimate, const std::string& what,
                  const std::string& instead);

// For a run estimated to take more than a few seconds: one line on stderr with the estimate,
// before the program is built (the executor then reports its progress).
void announce_long_run(const ResourceEstimate& estimate, const std::string& what);

}  // namespace tide::cli
