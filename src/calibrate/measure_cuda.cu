// The CUDA measurement backend of `tide calibrate` (measure.hpp): finds the device, runs the
// parts of measure_parts.hpp in order (copies, kernels, latency), and adds the given values.
#include <cuda_runtime_api.h>

#include <chrono>
#include <ctime>
#include <ostream>
#include <string>

#include "measure_parts.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"

namespace tide::calibrate {

namespace detail {
void Context::say(const std::string& line) const {
  if (log != nullptr) *log << "tide calibrate: " << line << '\n' << std::flush;
}
}  // namespace detail

bool have_cuda_backend() {
  return true;
}

namespace {

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

Calibration measure(const MeasureOptions& options, std::ostream* log) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw Unsupported(std::string("no CUDA device found (cudaGetDeviceCount: ") +
                      (status == cudaSuccess ? "0 devices" : cudaGetErrorName(status)) +
                      "): run tide calibrate on a machine with an NVIDIA GPU, or give tide solve "
                      "its rates with --bw-* flags");
  }
  if (options.device < 0 || options.device >= count) {
    throw InvalidArgument("--device " + std::to_string(options.device) + " is outside 0.." +
                          std::to_string(count - 1) + " (" + std::to_string(count) +
                          " CUDA devices)");
  }
  TIDE_CUDA_CHECK(cudaSetDevice(options.device));
  cudaDeviceProp prop{};
  TIDE_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
  int driver = 0, runtime = 0;
  TIDE_CUDA_CHECK(cudaDriverGetVersion(&driver));
  TIDE_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));

  Calibration out;
  out.device = {
      {"name", prop.name},
      {"index", options.device},
      {"sms", prop.multiProcessorCount},
      {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
      {"l2_bytes", prop.l2CacheSize},
      {"memory_bytes", prop.totalGlobalMem},
      {"visible_devices", count},
      {"cuda_driver", driver},
      {"cuda_runtime", runtime},
      {"measured_at", utc_now()},
      {"quick", options.quick}};
  detail::Context c{options,
                    options.device,
                    prop.multiProcessorCount,
                    count,
                    static_cast<std::size_t>(prop.l2CacheSize),
                    log,
                    out};
  c.say(std::string(prop.name) + ", " + std::to_string(c.sms) + " SMs, " + std::to_string(count) +
        " visible device(s)");
  detail::measure_copies(c);
  detail::measure_kernels(c);
  detail::measure_latency(c);
  add_given_values(options, out);
  return out;
}

}  // namespace tide::calibrate
