// Fixed costs for `tide calibrate` (the cost model's kernel_launch_us, copy_launch_us,
// memop_us, event_us, host_enqueue_us): GPU-side start costs from CUDA events, the host's
// cost of issuing one op from a steady clock, and the signal round trip between two streams.
//
// Round trips (Sec. 3.2, App. E: streams order each other through device-memory signals):
// stream A first waits on a "go" flag, so that the host enqueues the whole chain before any of
// it runs; then, N times, A signals "ping" = i and waits for "pong" >= i while B waits for
// ping >= i and signals pong = i. The chain's time over N is one round trip, two signal/wait
// hops; memop_us is half of it. The same with cudaEventRecord / cudaStreamWaitEvent gives
// event_us.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "measure_parts.hpp"
#include "tide/calibrate/stream_memops.hpp"
#include "tide/calibrate/timing.hpp"

namespace tide::calibrate::detail {
namespace {

// Steps: none; an empty grid whose cost is the launch itself. No synchronisation.
__global__ void noop_kernel() {}

constexpr int kChain = 64;  // round trips per chain: far below a stream's queue depth

struct Flags {
  DeviceBuffer buf{256};
  std::uint32_t* ping() const { return buf.as<std::uint32_t>(); }
  std::uint32_t* pong() const { return buf.as<std::uint32_t>() + 16; }
  std::uint32_t* go() const { return buf.as<std::uint32_t>() + 32; }
};

// Milliseconds of one chain built by `chain(a, b)` after A's wait on go, released by C.
template <typename F>
double chain_ms(const Flags& flags, F&& chain) {
  Stream a, b, c;
  TIDE_CUDA_CHECK(cudaMemset(flags.buf.get(), 0, flags.buf.bytes()));
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  TIDE_CUDA_CHECK(cudaEventCreate(&start));
  TIDE_CUDA_CHECK(cudaEventCreate(&stop));
  stream_wait_geq_u32(a, flags.go(), 1);
  TIDE_CUDA_CHECK(cudaEventRecord(start, a));
  chain(a.get(), b.get());
  TIDE_CUDA_CHECK(cudaEventRecord(stop, a));
  stream_write_u32(c, flags.go(), 1);
  TIDE_CUDA_CHECK(cudaEventSynchronize(stop));
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());
  float ms = 0;
  TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

double memop_round_trip_us(const Flags& flags) {
  return 1e3 *
         chain_ms(flags,
                  [&](cudaStream_t a, cudaStream_t b) {
                    for (std::uint32_t i = 1; i <= kChain; ++i) {
                      stream_write_u32(a, flags.ping(), i);
                      stream_wait_geq_u32(b, flags.ping(), i);
                      stream_write_u32(b, flags.pong(), i);
                      stream_wait_geq_u32(a, flags.pong(), i);
                    }
                  }) /
         kChain;
}

double event_round_trip_us(const Flags& flags) {
  std::vector<cudaEvent_t> ev(2 * kChain);
  for (cudaEvent_t& e : ev)
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const double ms = chain_ms(flags, [&](cudaStream_t a, cudaStream_t b) {
    for (int i = 0; i < kChain; ++i) {
      cudaEvent_t there = ev[static_cast<std::size_t>(2 * i)];
      cudaEvent_t back = ev[static_cast<std::size_t>(2 * i + 1)];
      TIDE_CUDA_CHECK(cudaEventRecord(there, a));
      TIDE_CUDA_CHECK(cudaStreamWaitEvent(b, there, 0));
      TIDE_CUDA_CHECK(cudaEventRecord(back, b));
      TIDE_CUDA_CHECK(cudaStreamWaitEvent(a, back, 0));
    }
  });
  for (cudaEvent_t& e : ev)
    cudaEventDestroy(e);
  return 1e3 * ms / kChain;
}

// Host microseconds per call of issue() over batches of `n` calls (median over batches).
template <typename F>
double host_us_per_call(cudaStream_t s, int batches, int n, F&& issue) {
  std::vector<double> per_call;
  for (int b = 0; b < batches + 1; ++b) {
    TIDE_CUDA_CHECK(cudaStreamSynchronize(s));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i)
      issue();
    const auto t1 = std::chrono::steady_clock::now();
    if (b > 0) per_call.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
  }
  TIDE_CUDA_CHECK(cudaStreamSynchronize(s));
  return median(per_call);
}

}  // namespace

void measure_latency(Context& c) {
  Stream s;
  const int reps = c.reps(200);
  auto launch = [&] {
    noop_kernel<<<1, 32, 0, s>>>();
    TIDE_CUDA_CHECK_LAUNCH();
  };
  const double launch_us = 1e3 * median_ms(s, 10, reps, [&](int) { launch(); });
  c.measured("kernel_launch_us", launch_us,
             "CUDA events around one empty kernel launch, median of " + std::to_string(reps));
  // Back-to-back launches: the GPU's launch throughput (kernels per us), for the record.
  const double burst_ms = median_ms(s, 1, 5, [&](int) {
    for (int i = 0; i < 256; ++i)
      launch();
  });

  DeviceBuffer small_a(4096), small_b(4096);
  const double copy_us = 1e3 * median_ms(s, 10, reps, [&](int) {
                           TIDE_CUDA_CHECK(cudaMemcpyAsync(small_b.get(), small_a.get(), 64,
                                                           cudaMemcpyDeviceToDevice, s));
                         });
  c.measured(
      "copy_launch_us", copy_us,
      "CUDA events around one 64-byte cudaMemcpyAsync D2D, median of " + std::to_string(reps));

  const int batches = c.reps(9);
  const double enqueue_kernel = host_us_per_call(s, batches, 256, launch);
  const double enqueue_copy = host_us_per_call(s, batches, 256, [&] {
    TIDE_CUDA_CHECK(cudaMemcpyAsync(small_b.get(), small_a.get(), 64, cudaMemcpyDeviceToDevice, s));
  });
  Flags flags;
  TIDE_CUDA_CHECK(cudaMemset(flags.buf.get(), 0, flags.buf.bytes()));
  std::uint32_t counter = 0;
  const double enqueue_memop =
      host_us_per_call(s, batches, 256, [&] { stream_write_u32(s, flags.pong(), ++counter); });
  c.measured("host_enqueue_us", enqueue_kernel,
             "host steady clock per empty-kernel launch, batches of 256, median of " +
                 std::to_string(batches));

  std::vector<double> memop_rt, event_rt;
  for (int i = 0; i < c.reps(9); ++i) {
    memop_rt.push_back(memop_round_trip_us(flags));
    event_rt.push_back(event_round_trip_us(flags));
  }
  const double memop = median(memop_rt), event = median(event_rt);
  c.measured("memop_us", memop / 2,
             "half the cuStreamWriteValue32 / cuStreamWaitValue32 round trip between two streams "
             "(chains of " +
                 std::to_string(kChain) + ")");
  c.measured("event_us", event / 2,
             "half the cudaEventRecord / cudaStreamWaitEvent round trip between two streams");
  c.out.details["latency"] = {{"kernel_launch_us", launch_us},
                              {"back_to_back_kernel_us", 1e3 * burst_ms / 256},
                              {"copy_launch_us", copy_us},
                              {"host_enqueue_kernel_us", enqueue_kernel},
                              {"host_enqueue_memcpy_us", enqueue_copy},
                              {"host_enqueue_memop_us", enqueue_memop},
                              {"memop_round_trip_us", memop},
                              {"event_round_trip_us", event}};
  c.say("latency: launch " + std::to_string(launch_us) + " us, memop round trip " +
        std::to_string(memop) + " us, event round trip " + std::to_string(event) + " us");
}

}  // namespace tide::calibrate::detail
