// The measurement backend of a build without CUDA: `tide calibrate` refuses with one line.
#include "tide/calibrate/measure.hpp"
#include "tide/core/error.hpp"

namespace tide::calibrate {

bool have_cuda_backend() {
  return false;
}

Calibration measure(const MeasureOptions& /*options*/, std::ostream* /*log*/) {
  throw Unsupported(
      "no CUDA device found: this tide was built without CUDA (-DTIDE_CUDA=OFF or no nvcc); "
      "build it with the CUDA toolkit and run tide calibrate on a machine with an NVIDIA GPU");
}

}  // namespace tide::calibrate
