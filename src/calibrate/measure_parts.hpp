// The parts of the CUDA measurement backend (measure_cuda.cu runs them in order). Each part
// times one family of operations and records what it found in the calibration: values it
// measured (source "measured", with the method) and its sweeps under `details`.
#pragma once

#include <iosfwd>
#include <string>

#include "tide/calibrate/calibration.hpp"
#include "tide/calibrate/measure.hpp"

namespace tide::calibrate::detail {

struct Context {
  const MeasureOptions& options;
  int device = 0;
  int sms = 0;
  int device_count = 1;
  std::size_t l2_bytes = 0;
  std::ostream* log = nullptr;
  Calibration& out;

  int reps(int full) const { return options.quick ? std::max(3, full / 4) : full; }
  void measured(const std::string& name, double value, const std::string& method) {
    out.values[name] = {value, Source::kMeasured, method};
  }
  void say(const std::string& line) const;
};

void measure_copies(Context& c);   // copy engines: 1-D, 2-D, batched, memset, peer
void measure_kernels(Context& c);  // Level 1 sum, landing, cast per CTA and full grid
void measure_latency(Context& c);  // launch, enqueue, stream-memop and event round trips

}  // namespace tide::calibrate::detail
