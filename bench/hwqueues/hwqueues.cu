// Do TIDE's device-side waits stall independent work on other streams? (paper App. E: the
// paper's runs needed CUDA_DEVICE_MAX_CONNECTIONS=32.) A GPU has a fixed number of hardware
// queues (connections) and streams are dealt onto them round-robin at creation; work behind a
// wait in one queue waits with it, whichever stream it came from.
//
// Steps, per number of held streams K (one process per CUDA_DEVICE_MAX_CONNECTIONS setting:
// the driver reads it when the context is created):
//   1. K streams, then one probe stream (created last: the round-robin has passed the K).
//   2. Per trial: each held stream waits for a gate word (in mapped host memory, so that the
//      host opens it with a store, through no GPU queue) to reach the trial's number, then
//      runs a small kernel behind the wait (TIDE's copies and kernels behind its waits). The
//      wait is TIDE's stream-path wait (`memop`: cuStreamWaitValue64, GEQ) or its graph wait
//      (`kernel`: a 1-warp kernel spinning on the word, as generation_wait.cu does).
//   3. The probe stream then runs independent work (`kernel`: a 1-block kernel; `copy`: a 1 MiB
//      device-to-device copy) between two events; the host polls its end event for `hold` ms.
//   4. The host opens the gate and synchronises. The probe stalled when its work completed only
//      after the gate opened; its latency is from its enqueue to its completion seen by the host.
// Writes one JSON object (--json) with a row per (K, wait, work). bench/hwqueues/run.py runs
// it at 8 and 32 connections and writes bench/results/hwqueues/{results.json,README.md}.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "hwqueues: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(CUresult e, const char* what) {
  if (e != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(e, &s);
    std::fprintf(stderr, "hwqueues: %s: %s\n", what, s != nullptr ? s : "?");
    std::exit(1);
  }
}

__global__ void spin_wait(const volatile unsigned long long* word, unsigned long long value) {
  unsigned backoff = 32;
  while (*word < value) {
    __nanosleep(backoff);
    backoff = backoff < 1024 ? backoff * 2 : 1024;
  }
}

__global__ void small_kernel(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = x[i] * 0.5f + 1.0f;
}

struct Row {
  int held = 0;
  std::string wait, work;
  int trials = 0;
  int stalled = 0;
  std::vector<double> latency_us;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  std::vector<int> held = {0, 1, 4, 7, 8, 9, 15, 16, 24, 31, 32, 33, 48, 64};
  int trials = 5;
  double hold_ms = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--trials" && i + 1 < argc) {
      trials = std::atoi(argv[++i]);
    } else if (a == "--hold-ms" && i + 1 < argc) {
      hold_ms = std::atof(argv[++i]);
    } else if (a == "--held" && i + 1 < argc) {
      held.clear();
      for (std::string list = argv[++i]; !list.empty();) {
        const std::size_t comma = list.find(',');
        held.push_back(std::atoi(list.substr(0, comma).c_str()));
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
      }
    } else {
      std::fprintf(stderr, "usage: %s [--json FILE] [--trials N] [--hold-ms MS] [--held 0,8,32]\n",
                   argv[0]);
      return 2;
    }
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "context");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  int driver = 0;
  check(cudaDriverGetVersion(&driver), "driver version");
  const char* env = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");

  void* gate_host = nullptr;
  check(cudaHostAlloc(&gate_host, 8, cudaHostAllocMapped), "gate");
  auto* gate = static_cast<volatile unsigned long long*>(gate_host);
  *gate = 0;
  void* gate_dev = nullptr;
  check(cudaHostGetDevicePointer(&gate_dev, gate_host, 0), "gate mapping");
  const std::size_t copy_bytes = std::size_t{1} << 20;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, copy_bytes), "copy src");
  check(cudaMalloc(&b, copy_bytes), "copy dst");
  check(cudaMemset(a, 1, copy_bytes), "memset");
  float* x = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&x), 1024 * sizeof(float) * 65), "kernel data");
  check(cudaMemset(x, 0, 1024 * sizeof(float) * 65), "memset");

  unsigned long long trial_id = 0;
  std::vector<Row> rows;
  for (const int k : held) {
    for (const char* wait : {"memop", "kernel"}) {
      for (const char* work : {"kernel", "copy"}) {
        std::vector<cudaStream_t> streams(static_cast<std::size_t>(k));
        for (cudaStream_t& s : streams)
          check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
        cudaStream_t probe = nullptr;
        check(cudaStreamCreateWithFlags(&probe, cudaStreamNonBlocking), "probe stream");
        cudaEvent_t begin = nullptr, end = nullptr;
        check(cudaEventCreate(&begin), "event");
        check(cudaEventCreate(&end), "event");
        Row row;
        row.held = k;
        row.wait = wait;
        row.work = work;
        row.trials = trials;
        for (int t = 0; t < trials; ++t) {
          ++trial_id;
          for (int i = 0; i < k; ++i) {
            cudaStream_t s = streams[static_cast<std::size_t>(i)];
            if (row.wait == "memop") {
              check(cuStreamWaitValue64(reinterpret_cast<CUstream>(s),
                                        reinterpret_cast<CUdeviceptr>(gate_dev), trial_id,
                                        CU_STREAM_WAIT_VALUE_GEQ),
                    "cuStreamWaitValue64");
            } else {
              spin_wait<<<1, 32, 0, s>>>(static_cast<const unsigned long long*>(gate_dev),
                                         trial_id);
              check(cudaGetLastError(), "spin launch");
            }
            small_kernel<<<4, 256, 0, s>>>(x + 1024 * (i % 64), 1024);
            check(cudaGetLastError(), "behind launch");
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the waits reach the GPU
          const auto enqueued = Clock::now();
          check(cudaEventRecord(begin, probe), "record");
          if (row.work == "kernel") {
            small_kernel<<<1, 256, 0, probe>>>(x + 1024 * 64, 256);
            check(cudaGetLastError(), "probe launch");
          } else {
            check(cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice, probe), "copy");
          }
          check(cudaEventRecord(end, probe), "record");
          const auto deadline =
              enqueued + std::chrono::microseconds(static_cast<std::int64_t>(hold_ms * 1000.0));
          cudaError_t q = cudaErrorNotReady;
          while ((q = cudaEventQuery(end)) == cudaErrorNotReady && Clock::now() < deadline) {
          }
          const bool before_release = q == cudaSuccess;
          *gate = trial_id;  // open: every held stream drains
          std::atomic_thread_fence(std::memory_order_seq_cst);
          while ((q = cudaEventQuery(end)) == cudaErrorNotReady) {
          }
          check(q, "probe");
          const double us =
              std::chrono::duration<double, std::micro>(Clock::now() - enqueued).count();
          row.latency_us.push_back(us);
          if (!before_release) ++row.stalled;
          check(cudaDeviceSynchronize(), "sync");
        }
        rows.push_back(row);
        std::printf("connections %s held %2d wait %-6s work %-6s stalled %d/%d median %.1f us\n",
                    env != nullptr ? env : "default", k, wait, work, row.stalled, row.trials,
                    median(row.latency_us));
        std::fflush(stdout);
        check(cudaEventDestroy(begin), "event");
        check(cudaEventDestroy(end), "event");
        check(cudaStreamDestroy(probe), "stream");
        for (cudaStream_t s : streams)
          check(cudaStreamDestroy(s), "stream");
      }
    }
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "hwqueues: cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"device\": \"%s\", \"driver\": %d, \"connections_env\": %s%s%s, "
                 "\"hold_ms\": %g, \"rows\": [",
                 prop.name, driver, env != nullptr ? "\"" : "", env != nullptr ? env : "null",
                 env != nullptr ? "\"" : "", hold_ms);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "%s\n  {\"held\": %d, \"wait\": \"%s\", \"work\": \"%s\", \"trials\": %d, "
                   "\"stalled\": %d, \"median_us\": %.1f, \"max_us\": %.1f, \"latency_us\": [",
                   i == 0 ? "" : ",", r.held, r.wait.c_str(), r.work.c_str(), r.trials, r.stalled,
                   median(r.latency_us),
                   *std::max_element(r.latency_us.begin(), r.latency_us.end()));
      for (std::size_t j = 0; j < r.latency_us.size(); ++j)
        std::fprintf(f, "%s%.1f", j == 0 ? "" : ", ", r.latency_us[j]);
      std::fprintf(f, "]}");
    }
    std::fprintf(f, "\n]}\n");
    std::fclose(f);
  }
  return 0;
}
