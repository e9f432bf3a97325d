// Copy-engine rates for `tide calibrate` (architecture.md "Seen on the lent H200"; the cost
// model's ce_copy_gbps, ce_copy_2d_gbps, memset_gbps, nvlink_gbps). Rates count the bytes
// copied once (dst bytes / time), as the cost model divides them. Each copy alternates
// between two buffer pairs of 256 MiB (64 MiB with --quick), far larger than the L2.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>

#include "measure_parts.hpp"
#include "tide/calibrate/timing.hpp"
#include "tide/version_gates.hpp"

namespace tide::calibrate::detail {
namespace {

double gbps(double bytes, double ms) {
  return bytes / (ms * 1e-3) / 1e9;
}

// Same-GPU cudaMemcpyBatchAsync of `pieces` equal copies; 0 where the runtime lacks it.
double batched_ms(const DeviceBuffer* src, const DeviceBuffer* dst, std::size_t bytes, int pieces,
                  cudaStream_t s, int reps) {
#if TIDE_HAS_CUDA_MEMCPY_BATCH
  const std::size_t piece = bytes / static_cast<std::size_t>(pieces);
  std::vector<void*> dsts[2];
  std::vector<const void*> srcs[2];
  std::vector<std::size_t> sizes(static_cast<std::size_t>(pieces), piece);
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < pieces; ++i) {
      dsts[k].push_back(dst[k].as() + static_cast<std::size_t>(i) * piece);
      srcs[k].push_back(src[k].as() + static_cast<std::size_t>(i) * piece);
    }
  }
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  std::size_t attr_index = 0;
  return median_ms(s, 2, reps, [&](int i) {
    const int k = i % 2;
#if TIDE_CUDA_MEMCPY_BATCH_FAIL_INDEX
    std::size_t fail = 0;
    TIDE_CUDA_CHECK(cudaMemcpyBatchAsync(dsts[k].data(), const_cast<void**>(srcs[k].data()),
                                         sizes.data(), sizes.size(), &attr, &attr_index, 1, &fail,
                                         s));
#else
    TIDE_CUDA_CHECK(cudaMemcpyBatchAsync(dsts[k].data(), srcs[k].data(), sizes.data(),
                                         sizes.size(), &attr, &attr_index, 1, s));
#endif
  });
#else
  (void)src, (void)dst, (void)bytes, (void)pieces, (void)s, (void)reps;
  return 0;
#endif
}

}  // namespace

void measure_copies(Context& c) {
  const std::size_t bytes = c.options.quick ? (64ull << 20) : (256ull << 20);
  DeviceBuffer src[2] = {DeviceBuffer(bytes), DeviceBuffer(bytes)};
  DeviceBuffer dst[2] = {DeviceBuffer(bytes), DeviceBuffer(bytes)};
  for (auto& b : src)
    TIDE_CUDA_CHECK(cudaMemset(b.get(), 0x3c, bytes));
  Stream s;
  const int reps = c.reps(20);
  const double mb = static_cast<double>(bytes >> 20);

  const double one_d = median_ms(s, 2, reps, [&](int i) {
    TIDE_CUDA_CHECK(
        cudaMemcpyAsync(dst[i % 2].get(), src[i % 2].get(), bytes, cudaMemcpyDeviceToDevice, s));
  });
  c.measured("ce_copy_gbps", gbps(static_cast<double>(bytes), one_d),
             "cudaMemcpyAsync D2D, " + std::to_string(static_cast<int>(mb)) + " MiB, median of " +
                 std::to_string(reps));

  // 2-D: 8 KiB rows out of 16 KiB-pitched rows into a packed destination (a strided gather,
  // the shape of TIDE-RS staging copies).
  const std::size_t width = 8192, pitch = 16384, rows = bytes / pitch;
  const double two_d = median_ms(s, 2, reps, [&](int i) {
    TIDE_CUDA_CHECK(cudaMemcpy2DAsync(dst[i % 2].get(), width, src[i % 2].get(), pitch, width, rows,
                                      cudaMemcpyDeviceToDevice, s));
  });
  c.measured("ce_copy_2d_gbps", gbps(static_cast<double>(width * rows), two_d),
             "cudaMemcpy2DAsync D2D, 8 KiB rows at a 16 KiB source pitch, " + std::to_string(rows) +
                 " rows");

  const double set = median_ms(
      s, 2, reps, [&](int i) { TIDE_CUDA_CHECK(cudaMemsetAsync(dst[i % 2].get(), 0, bytes, s)); });
  c.measured("memset_gbps", gbps(static_cast<double>(bytes), set),
             "cudaMemsetAsync, " + std::to_string(static_cast<int>(mb)) + " MiB");

  nlohmann::json copies = {{"bytes", bytes},
                           {"memcpy_1d_gbps", gbps(static_cast<double>(bytes), one_d)},
                           {"memcpy_2d_gbps", gbps(static_cast<double>(width * rows), two_d)},
                           {"memcpy_2d_row_bytes", width},
                           {"memcpy_2d_src_pitch", pitch},
                           {"memset_gbps", gbps(static_cast<double>(bytes), set)}};
  nlohmann::json batched = nlohmann::json::object();
  for (int pieces : {8, 64, 512}) {
    try {  // a refusal here (an old driver) is recorded, not fatal: no value depends on it
      const double ms = batched_ms(src, dst, bytes, pieces, s, reps);
      if (ms > 0) batched[std::to_string(pieces)] = gbps(static_cast<double>(bytes), ms);
    } catch (const CudaError& e) {
      batched[std::to_string(pieces)] = std::string("failed: ") + e.what();
      TIDE_CUDA_CHECK(cudaStreamSynchronize(s));
    }
  }
  copies["batched_gbps_by_copies"] = batched;
  copies["batched_available"] = TIDE_HAS_CUDA_MEMCPY_BATCH == 1;
  c.say("copies: 1-D " + std::to_string(static_cast<int>(gbps(static_cast<double>(bytes), one_d))) +
        " GB/s, 2-D " +
        std::to_string(static_cast<int>(gbps(static_cast<double>(width * rows), two_d))) + " GB/s");

  // Peer: device -> each other peer-capable device, one direction, copy engines.
  nlohmann::json peers = nlohmann::json::array();
  std::vector<double> peer_rates;
  for (int d = 0; d < c.device_count; ++d) {
    if (d == c.device) continue;
    int can = 0;
    TIDE_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, c.device, d));
    if (!can) continue;
    const cudaError_t e = cudaDeviceEnablePeerAccess(d, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) TIDE_CUDA_CHECK(e);
    (void)cudaGetLastError();
    TIDE_CUDA_CHECK(cudaSetDevice(d));
    DeviceBuffer remote(bytes);
    TIDE_CUDA_CHECK(cudaSetDevice(c.device));
    const double ms = median_ms(s, 2, reps, [&](int i) {
      TIDE_CUDA_CHECK(cudaMemcpyPeerAsync(remote.get(), d, src[i % 2].get(), c.device, bytes, s));
    });
    peer_rates.push_back(gbps(static_cast<double>(bytes), ms));
    peers.push_back({{"to_device", d}, {"gbps", peer_rates.back()}});
  }
  copies["peer"] = peers;
  if (!peer_rates.empty()) {
    c.measured("nvlink_gbps", median(peer_rates),
               "cudaMemcpyPeerAsync to " + std::to_string(peer_rates.size()) +
                   " peer GPU(s), one at a time, median over peers");
  }
  c.out.details["copies"] = copies;
}

}  // namespace tide::calibrate::detail
