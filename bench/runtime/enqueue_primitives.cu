// Host and device cost of the primitives a TIDE call enqueues, on one GPU: what the CUDA
// sequence runner's design choices rest on (NOTE [CUDA call sequences]). A probe, not a test.
//   A. host time per enqueue on a stream: cudaMemcpyAsync, cudaMemcpy2DAsync (8 rows),
//      cudaMemcpyBatchAsync (8 copies), cudaMemcpy3DBatchAsync (8 2-D copies, and 1), a 1-thread
//      kernel, a cuStreamBatchMemOp wait (met);
//   B. a graph of `chains` streams x `links` (wait, copy, signal) links, the waits either
//      explicit batch-mem-op nodes (patched before each launch) or 1-thread wait kernels whose
//      thresholds come from a device generation word (nothing patched): host time of the
//      patches and of cudaGraphLaunch, GPU time of a launch;
//   C. cudaGraphExecMemcpyNodeSetParams1D per node;
//   D. re-pointing 2-D copy nodes (8 rows) among 1-thread kernel nodes: the per-node setter
//      (expected refused), and the whole-graph route (node parameters set in the graph, then
//      cudaGraphExecUpdate): its result, host time, and the bytes the re-pointed copies moved.
// Output: one JSON object on stdout. Medians (and p10/p90) over repeats.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* m = "?";
    cuGetErrorString(r, &m);
    std::fprintf(stderr, "%s: %s\n", what, m);
    std::exit(1);
  }
}

struct Stats {
  double p10, median, p90;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
  };
  return {at(0.1), at(0.5), at(0.9)};
}
std::string json(const char* name, const Stats& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "\"%s\": {\"p10\": %.3f, \"median\": %.3f, \"p90\": %.3f}", name,
                s.p10, s.median, s.p90);
  return buf;
}

__global__ void add_kernel(unsigned long long* word, unsigned long long add) {
  __threadfence_system();
  atomicAdd_system(word, add);
}

__global__ void bump_kernel(unsigned long long* generation) {
  *generation += 1;
}

// Waits until *word >= first + step * *generation (a generation-relative threshold).
__global__ void wait_kernel(const unsigned long long* word, long long first, long long step,
                            const unsigned long long* generation) {
  const long long threshold = first + step * static_cast<long long>(*generation);
  while (static_cast<long long>(*reinterpret_cast<const volatile unsigned long long*>(word)) <
         threshold)
    __nanosleep(64);
  __threadfence_system();
}

// Host microseconds per call of `enqueue`, `per_batch` calls then a synchronise (not timed).
template <class F>
Stats host_cost(cudaStream_t s, int batches, int per_batch, F enqueue) {
  std::vector<double> v;
  for (int b = 0; b < batches; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < per_batch; ++i)
      enqueue();
    const auto t1 = Clock::now();
    check(cudaStreamSynchronize(s), "sync");
    if (b > 0) v.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / per_batch);
  }
  return stats(v);
}

}  // namespace

int main(int argc, char** argv) {
  const int chains = argc > 1 ? std::atoi(argv[1]) : 8;
  const int links = argc > 2 ? std::atoi(argv[2]) : 10;
  check(cudaSetDevice(0), "device");
  check(cudaFree(nullptr), "init");
  check(cuInit(0), "cuInit");
  CUcontext ctx = nullptr;
  check(cuCtxGetCurrent(&ctx), "ctx");
  const std::size_t bytes = std::size_t{64} << 20;
  char *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "malloc");
  check(cudaMalloc(&b, bytes), "malloc");
  unsigned long long* words = nullptr;
  check(cudaMalloc(&words, 4096), "malloc");
  check(cudaMemset(words, 0, 4096), "memset");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  std::vector<std::string> out;

  // A. Stream enqueue costs.
  const std::size_t row = 16 << 10;
  out.push_back(json("memcpy_1d_us", host_cost(s, 20, 200, [&] {
                       check(cudaMemcpyAsync(b, a, 8 * row, cudaMemcpyDeviceToDevice, s), "memcpy");
                     })));
  out.push_back(json(
      "memcpy_2d_8rows_us", host_cost(s, 20, 200, [&] {
        check(cudaMemcpy2DAsync(b, 2 * row, a, 4 * row, row, 8, cudaMemcpyDeviceToDevice, s), "2d");
      })));
  {
    std::vector<void*> dsts(8);
    std::vector<const void*> srcs(8);
    std::vector<std::size_t> sizes(8, row);
    for (int i = 0; i < 8; ++i) {
      dsts[static_cast<std::size_t>(i)] = b + i * 2 * row;
      srcs[static_cast<std::size_t>(i)] = a + i * 4 * row;
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    std::size_t idx = 0;
    out.push_back(json("batch_1d_8copies_us", host_cost(s, 20, 200, [&] {
                         check(cudaMemcpyBatchAsync(dsts.data(),
                                                    const_cast<const void* const*>(srcs.data()),
                                                    sizes.data(), 8, &attr, &idx, 1, s),
                               "batch1d");
                       })));
  }
  auto op3d = [&](int i) {
    cudaMemcpy3DBatchOp op{};
    op.src.type = cudaMemcpyOperandTypePointer;
    op.src.op.ptr.ptr = a + i * 32 * row;
    op.src.op.ptr.rowLength = 4 * row;  // pitch in elements (bytes)
    op.src.op.ptr.layerHeight = 8;
    op.dst.type = cudaMemcpyOperandTypePointer;
    op.dst.op.ptr.ptr = b + i * 16 * row;
    op.dst.op.ptr.rowLength = 2 * row;
    op.dst.op.ptr.layerHeight = 8;
    op.extent = make_cudaExtent(row, 8, 1);
    op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    return op;
  };
  {
    std::vector<cudaMemcpy3DBatchOp> ops;
    for (int i = 0; i < 8; ++i)
      ops.push_back(op3d(i));
    out.push_back(json("batch_3d_8copies_us", host_cost(s, 20, 200, [&] {
                         check(cudaMemcpy3DBatchAsync(8, ops.data(), 0, s), "batch3d");
                       })));
    out.push_back(json("batch_3d_1copy_us", host_cost(s, 20, 200, [&] {
                         check(cudaMemcpy3DBatchAsync(1, ops.data(), 0, s), "batch3d");
                       })));
    // The batch's data equals 2-D copies' (checked once).
    check(cudaMemset(b, 0x5a, bytes), "memset");
    std::vector<char> ha(bytes), hb(bytes);
    for (std::size_t i = 0; i < bytes; ++i)
      ha[i] = static_cast<char>(i * 131 + 7);
    check(cudaMemcpy(a, ha.data(), bytes, cudaMemcpyHostToDevice), "h2d");
    check(cudaMemcpy3DBatchAsync(8, ops.data(), 0, s), "batch3d");
    check(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDeviceToHost), "d2h");
    long bad = 0;
    for (int i = 0; i < 8; ++i)
      for (int r = 0; r < 8; ++r)
        for (std::size_t c = 0; c < row; ++c)
          bad += hb[static_cast<std::size_t>(i) * 16 * row + static_cast<std::size_t>(r) * 2 * row +
                    c] != ha[static_cast<std::size_t>(i) * 32 * row +
                             static_cast<std::size_t>(r) * 4 * row + c];
    out.push_back("\"batch_3d_mismatched_bytes\": " + std::to_string(bad));
  }
  out.push_back(json("kernel_1thread_us",
                     host_cost(s, 20, 200, [&] { add_kernel<<<1, 1, 0, s>>>(words + 1, 1); })));
  out.push_back(json("stream_wait_met_us", host_cost(s, 20, 200, [&] {
                       CUstreamBatchMemOpParams op{};
                       op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
                       op.waitValue.address = reinterpret_cast<CUdeviceptr>(words + 2);
                       op.waitValue.value64 = 0;
                       op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
                       check(cuStreamBatchMemOp(reinterpret_cast<CUstream>(s), 1, &op, 0),
                             "batchmemop");
                     })));

  // B. Graphs of chains x links (wait, copy, signal); chain c signals word 8 + c, which its
  // own next link waits for (met by the time it runs: a dependency through the counter).
  for (const bool kernel_waits : {false, true}) {
    cudaGraph_t g = nullptr;
    check(cudaGraphCreate(&g, 0), "graph");
    unsigned long long* generation = words + 100;
    cudaGraphNode_t root = nullptr;
    {
      cudaKernelNodeParams p{};
      void* args[] = {&generation};
      p.func = reinterpret_cast<void*>(bump_kernel);
      p.gridDim = dim3(1);
      p.blockDim = dim3(1);
      p.kernelParams = args;
      check(cudaGraphAddKernelNode(&root, g, nullptr, 0, &p), "root");
    }
    std::vector<CUgraphNode> wait_nodes;
    std::vector<cudaGraphNode_t> copy_nodes;
    std::vector<long long> wait_value;
    for (int c = 0; c < chains; ++c) {
      cudaGraphNode_t prev = root;
      unsigned long long* word = words + 8 + c;
      for (int k = 0; k < links; ++k) {
        cudaGraphNode_t w = nullptr;
        // Link k waits for the chain's k earlier signals of this launch.
        if (kernel_waits) {
          cudaKernelNodeParams p{};
          long long first = k - links;  // threshold = k + links * (generation - 1)
          long long step = links;
          void* args[] = {&word, &first, &step, &generation};
          p.func = reinterpret_cast<void*>(wait_kernel);
          p.gridDim = dim3(1);
          p.blockDim = dim3(1);
          p.kernelParams = args;
          check(cudaGraphAddKernelNode(&w, g, &prev, 1, &p), "wait kernel");
        } else {
          CUstreamBatchMemOpParams op{};
          op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
          op.waitValue.address = reinterpret_cast<CUdeviceptr>(word);
          op.waitValue.value64 = static_cast<cuuint64_t>(k);
          op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
          CUDA_BATCH_MEM_OP_NODE_PARAMS prm{};
          prm.ctx = ctx;
          prm.count = 1;
          prm.paramArray = &op;
          CUgraphNode n = nullptr;
          check(cuGraphAddBatchMemOpNode(&n, reinterpret_cast<CUgraph>(g),
                                         reinterpret_cast<const CUgraphNode*>(&prev), 1, &prm),
                "memop node");
          wait_nodes.push_back(n);
          wait_value.push_back(k);
          w = reinterpret_cast<cudaGraphNode_t>(n);
        }
        cudaGraphNode_t copy = nullptr;
        check(cudaGraphAddMemcpyNode1D(&copy, g, &w, 1, b + ((c * links + k) % 1024) * row,
                                       a + ((c * links + k) % 1024) * row, row,
                                       cudaMemcpyDeviceToDevice),
              "copy");
        copy_nodes.push_back(copy);
        cudaGraphNode_t sig = nullptr;
        cudaKernelNodeParams p{};
        unsigned long long one = 1;
        void* args[] = {&word, &one};
        p.func = reinterpret_cast<void*>(add_kernel);
        p.gridDim = dim3(1);
        p.blockDim = dim3(1);
        p.kernelParams = args;
        check(cudaGraphAddKernelNode(&sig, g, &copy, 1, &p), "signal");
        prev = sig;
      }
    }
    cudaGraphExec_t exec = nullptr;
    check(cudaGraphInstantiate(&exec, g, 0), "instantiate");
    check(cudaMemset(words, 0, 4096), "reset");
    std::vector<double> patch, launch, gpu, repoint;
    cudaEvent_t e0, e1;
    check(cudaEventCreate(&e0), "event");
    check(cudaEventCreate(&e1), "event");
    for (int rep = 0; rep < 60; ++rep) {
      const auto t0 = Clock::now();
      for (std::size_t i = 0; i < wait_nodes.size(); ++i) {
        CUstreamBatchMemOpParams op{};
        op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
        op.waitValue.address =
            reinterpret_cast<CUdeviceptr>(words + 8 + i / static_cast<std::size_t>(links));
        op.waitValue.value64 =
            static_cast<cuuint64_t>(wait_value[i] + static_cast<long long>(rep) * links);
        op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
        CUDA_BATCH_MEM_OP_NODE_PARAMS prm{};
        prm.ctx = ctx;
        prm.count = 1;
        prm.paramArray = &op;
        check(cuGraphExecBatchMemOpNodeSetParams(reinterpret_cast<CUgraphExec>(exec), wait_nodes[i],
                                                 &prm),
              "patch");
      }
      const auto t1 = Clock::now();
      check(cudaEventRecord(e0, s), "record");
      const auto t2 = Clock::now();
      check(cudaGraphLaunch(exec, s), "launch");
      const auto t3 = Clock::now();
      check(cudaEventRecord(e1, s), "record");
      check(cudaStreamSynchronize(s), "sync");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
      if (rep >= 5) {
        patch.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        launch.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
        gpu.push_back(ms * 1000.0);
      }
    }
    // C. Re-pointing every copy node (1-D), then a launch (not timed).
    for (int rep = 0; rep < 20; ++rep) {
      const auto t0 = Clock::now();
      for (std::size_t i = 0; i < copy_nodes.size(); ++i)
        check(cudaGraphExecMemcpyNodeSetParams1D(
                  exec, copy_nodes[i], b + ((i + rep % 2) % 1024) * row, a + (i % 1024) * row, row,
                  cudaMemcpyDeviceToDevice),
              "setparams1d");
      const auto t1 = Clock::now();
      repoint.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() /
                        static_cast<double>(copy_nodes.size()));
    }
    // The final counters prove the waits ordered every link: each chain signalled once per link.
    std::vector<unsigned long long> final(static_cast<std::size_t>(chains));
    check(cudaMemcpy(final.data(), words + 8, final.size() * 8, cudaMemcpyDeviceToHost), "d2h");
    const std::string tag = kernel_waits ? "kernel_waits" : "memop_waits";
    out.push_back(json((tag + "_patch_us").c_str(), stats(patch)));
    out.push_back(json((tag + "_launch_us").c_str(), stats(launch)));
    out.push_back(json((tag + "_gpu_us").c_str(), stats(gpu)));
    out.push_back(json((tag + "_setparams1d_per_node_us").c_str(), stats(repoint)));
    out.push_back("\"" + tag + "_chain0_signals\": " + std::to_string(final[0]));
    check(cudaGraphExecDestroy(exec), "destroy");
    check(cudaGraphDestroy(g), "destroy");
  }
  // D. 2-D copies re-pointed: 256 2-D copies of 8 rows (about a TIDE-RS call's gradient reads
  // at 8 x 8, P = 30), each after a 1-thread kernel, in 8 chains of 32.
  {
    const int d_chains = 8, d_links = 32, copies = d_chains * d_links;
    const std::size_t width = 4096, spitch = 4 * width, dpitch = 2 * width, rows = 8;
    auto src_at = [&](int i, int flip) {
      return a + (static_cast<std::size_t>(i) * 2 + flip) * width;
    };
    auto dst_at = [&](int i) { return b + static_cast<std::size_t>(i) * rows * dpitch; };
    auto params = [&](int i, int flip) {
      cudaMemcpy3DParms p{};
      p.srcPtr = make_cudaPitchedPtr(src_at(i, flip), spitch, width, rows);
      p.dstPtr = make_cudaPitchedPtr(dst_at(i), dpitch, width, rows);
      p.extent = make_cudaExtent(width, rows, 1);
      p.kind = cudaMemcpyDeviceToDevice;
      return p;
    };
    if (static_cast<std::size_t>(copies) * rows * dpitch > bytes ||
        (static_cast<std::size_t>(copies) * 2 + 1) * width + rows * spitch > bytes) {
      std::fprintf(stderr, "D: too many copies for the buffers\n");
      std::exit(1);
    }
    cudaGraph_t g = nullptr;
    check(cudaGraphCreate(&g, 0), "graph");
    std::vector<cudaGraphNode_t> nodes;
    for (int c = 0; c < d_chains; ++c) {
      cudaGraphNode_t prev = nullptr;
      for (int k = 0; k < d_links; ++k) {
        cudaGraphNode_t kn = nullptr, cp = nullptr;
        cudaKernelNodeParams kp{};
        unsigned long long* word = words + 200 + c;
        unsigned long long one = 1;
        void* args[] = {&word, &one};
        kp.func = reinterpret_cast<void*>(add_kernel);
        kp.gridDim = dim3(1);
        kp.blockDim = dim3(1);
        kp.kernelParams = args;
        check(cudaGraphAddKernelNode(&kn, g, prev ? &prev : nullptr, prev ? 1 : 0, &kp), "kernel");
        const cudaMemcpy3DParms p = params(c * d_links + k, 0);
        check(cudaGraphAddMemcpyNode(&cp, g, &kn, 1, &p), "2-D copy node");
        nodes.push_back(cp);
        prev = cp;
      }
    }
    cudaGraphExec_t exec = nullptr;
    check(cudaGraphInstantiate(&exec, g, 0), "instantiate");
    // D1. The per-node setter on a 2-D node.
    {
      const cudaMemcpy3DParms p = params(0, 1);
      const cudaError_t e = cudaGraphExecMemcpyNodeSetParams(exec, nodes[0], &p);
      out.push_back(std::string("\"setparams_2d_result\": \"") + cudaGetErrorName(e) + "\"");
      (void)cudaGetLastError();
    }
    // D2. Whole-graph update, alternating the sources; checked after the last launch.
    std::vector<double> set_us, update_us, launch_us;
    std::string update_result = "cudaSuccess";
    int flip = 0;
    for (int rep = 0; rep < 30 && update_result == "cudaSuccess"; ++rep) {
      flip = rep % 2 == 0 ? 1 : 0;
      const auto t0 = Clock::now();
      for (int i = 0; i < copies; ++i) {
        const cudaMemcpy3DParms p = params(i, flip);
        check(cudaGraphMemcpyNodeSetParams(nodes[static_cast<std::size_t>(i)], &p), "graph set");
      }
      const auto t1 = Clock::now();
      cudaGraphExecUpdateResultInfo info{};
      const cudaError_t e = cudaGraphExecUpdate(exec, g, &info);
      const auto t2 = Clock::now();
      if (e != cudaSuccess) {
        update_result = std::string(cudaGetErrorName(e)) + " (result " +
                        std::to_string(static_cast<int>(info.result)) + ")";
        (void)cudaGetLastError();
        break;
      }
      check(cudaGraphLaunch(exec, s), "launch");
      const auto t3 = Clock::now();
      check(cudaStreamSynchronize(s), "sync");
      if (rep >= 3) {
        set_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        update_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
        launch_us.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
      }
    }
    out.push_back("\"exec_update_2d_result\": \"" + update_result + "\"");
    out.push_back("\"exec_update_2d_copies\": " + std::to_string(copies));
    out.push_back("\"exec_update_graph_nodes\": " + std::to_string(2 * copies));
    if (update_result == "cudaSuccess") {
      out.push_back(json("graph_set_2d_total_us", stats(set_us)));
      out.push_back(json("exec_update_total_us", stats(update_us)));
      out.push_back(json("exec_update_launch_us", stats(launch_us)));
      // The last launch read the sources of `flip`: every destination row must hold them.
      std::vector<char> ha(bytes), hb(bytes);
      for (std::size_t i = 0; i < bytes; ++i)
        ha[i] = static_cast<char>(i * 197 + 3);
      check(cudaMemcpy(a, ha.data(), bytes, cudaMemcpyHostToDevice), "h2d");
      check(cudaMemset(b, 0x5a, bytes), "poison");
      check(cudaGraphLaunch(exec, s), "launch");
      check(cudaStreamSynchronize(s), "sync");
      check(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDeviceToHost), "d2h");
      long bad = 0;
      for (int i = 0; i < copies; ++i)
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t col = 0; col < width; ++col)
            bad += hb[static_cast<std::size_t>(dst_at(i) - b) + r * dpitch + col] !=
                   ha[static_cast<std::size_t>(src_at(i, flip) - a) + r * spitch + col];
      out.push_back("\"exec_update_mismatched_bytes\": " + std::to_string(bad));
    }
    // D3. For comparison: the same copies enqueued on a stream (the stream path's cost).
    out.push_back(json("stream_2d_copies_total_us", host_cost(s, 10, 1, [&] {
                         for (int i = 0; i < copies; ++i) {
                           const cudaMemcpy3DParms p = params(i, 0);
                           check(cudaMemcpy2DAsync(p.dstPtr.ptr, dpitch, p.srcPtr.ptr, spitch,
                                                   width, rows, cudaMemcpyDeviceToDevice, s),
                                 "2d");
                         }
                       })));
    check(cudaGraphExecDestroy(exec), "destroy");
    check(cudaGraphDestroy(g), "destroy");
  }
  std::printf("{\"chains\": %d, \"links\": %d", chains, links);
  for (const std::string& line : out)
    std::printf(",\n  %s", line.c_str());
  std::printf("}\n");
  return 0;
}
