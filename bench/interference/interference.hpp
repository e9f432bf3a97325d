// The interference benchmark (paper Sec. 2.2, Eq. 4, Fig. 3-4, App. A Tables 4-5) on one GPU:
// victims (a one-wave GEMM, the SM-id probe with the GEMM's cluster shape, a memory-bound
// elementwise kernel) timed alone and next to loads on another stream (resident spin kernels,
// an NCCL-style persistent reduction, TIDE's short-lived Level 1 sum CTAs). docs/interference.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tide::bench {

// What each CTA of a load or of the probe writes: its SM and %globaltimer at entry and exit.
struct CtaRecord {
  std::uint32_t smid;
  std::uint32_t cluster;  // cluster index (probe) or 0
  std::uint64_t start_ns;
  std::uint64_t end_ns;
};

// Device-memory flags shared by a load and the streams around it (never host memory: see
// architecture.md "Seen on the lent H200"). No stream ever waits on them (no
// cuStreamWaitValue32): every wait is a kernel's poll bounded by kSpinBoundNs, so nothing on
// the GPU can wait for work queued behind it, and the host never waits on an unbounded wait
// (docs/interference.md "Why nothing can hang").
struct LoadFlags {
  std::uint32_t* started;       // +1 by each load CTA once resident
  std::uint32_t* stop;          // nonzero: resident spin CTAs leave
  unsigned long long* t0;       // persistent reduction: first CTA's entry %globaltimer
  std::uint32_t* gate_timeout;  // set by a gate whose wait hit its bound
};

// Bounds every device-side spin (style.md habit 8): 1 s, then the CTA records and leaves.
inline constexpr std::uint64_t kSpinBoundNs = 1'000'000'000ull;

// ---- loads (loads.cu) ----
// `ctas` CTAs of 128 threads in clusters of `cluster` that stay resident until *stop != 0
// (at most kSpinBoundNs).
void launch_spin(int ctas, int cluster, LoadFlags flags, CtaRecord* records, cudaStream_t stream);
// NCCL-style persistent reduction: `ctas` CTAs of 512 threads (clusters of `cluster`) that stay
// resident for the whole transfer: chunk k is "delivered" at t0 + k * gap_ns (t0: the first
// CTA's entry; a device-side clock, so no host or stream has to release it); each CTA waits
// for it on %globaltimer, then sums 8 bf16 inputs into fp32 for its share of the chunk.
struct ReduceArgs {
  const std::uint16_t* in = nullptr;  // 8 inputs, `stride` elements apart
  std::int64_t stride = 0;
  float* out = nullptr;
  std::int64_t chunk_elems = 0;
  int chunks = 0;
  std::uint64_t gap_ns = 0;
};
void launch_persistent_reduce(int ctas, int cluster, const ReduceArgs& args, LoadFlags flags,
                              CtaRecord* records, cudaStream_t stream);
// One CTA of 32 threads that polls *counter >= target, bounded by kSpinBoundNs; on timeout it
// sets *flags.gate_timeout. Put on the victim stream after a resident load's launch (which is
// on another stream, launched first), it lets the victims start only once the load is
// resident, without a stream wait that could block a hardware queue forever.
void launch_gate(const std::uint32_t* counter, std::uint32_t target, LoadFlags flags,
                 cudaStream_t stream);

// ---- the SM-id probe (probe.cu) ----
struct ProbeShape {
  int clusters = 32;  // the paper's GEMM: 32 four-CTA clusters (the driver uses n_slot - 1)
  int cluster_size = 4;
  int threads = 128;
  double work_us = 50;  // each CTA's residence (about the GEMM's wave)
};
struct ProbeWindow {
  int ctas = 0;
  int first_wave_ctas = 0;      // started before the first CTA finished
  int first_wave_clusters = 0;  // clusters all of whose CTAs did
  int displaced = 0;            // ctas - first_wave_ctas
  double span_us = 0;           // first start to last end
};
class Probe {
 public:
  Probe(const ProbeShape& shape, int max_windows);
  ~Probe();
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;
  void launch(int window, cudaStream_t stream);
  // Sets every record to zero (so a window the GPU never ran reads as such).
  void clear();
  std::vector<ProbeWindow> read(int windows) const;
  std::vector<CtaRecord> records(int window) const;
  // cudaOccupancyMaxActiveClusters for this shape: the slots the runtime predicts.
  int predicted_slots() const;
  int smem_bytes() const { return smem_; }
  const ProbeShape& shape() const { return shape_; }

 private:
  ProbeShape shape_;
  int smem_ = 0;
  int max_windows_ = 0;
  CtaRecord* records_ = nullptr;
};

// ---- victims (victims.cu) ----
// The grid of the algorithm cuBLASLt picked, from its algo config (tile, split-k, cluster
// shape ids mapped through cublaslt_shapes.inc): ctas = ceil(m / tile_m) * ceil(n / tile_n) *
// splitk. An estimate: cuBLASLt may launch a persistent grid or choose the cluster shape at
// run time (cluster id AUTO), and its CTAs per SM are not visible (taken as 1).
struct GemmGrid {
  int tile_m = 0, tile_n = 0;  // 0: tile id unknown
  int splitk = 1;
  int cluster_x = 1, cluster_y = 1;
  bool tile_known = false;
  bool cluster_known = false;  // false: AUTO or unknown id, cluster size taken as 1
  int ctas = 0;
  int cluster_ctas() const { return cluster_x * cluster_y; }
  int clusters() const { return (ctas + cluster_ctas() - 1) / cluster_ctas(); }
};

class Victim {
 public:
  virtual ~Victim() = default;
  virtual std::string name() const = 0;
  virtual void launch(int rep, cudaStream_t stream) = 0;
  virtual std::string describe() const = 0;
  // The GEMM victim's grid; nullptr for the others.
  virtual const GemmGrid* grid() const { return nullptr; }
};
// The paper's 256 x 8192 x 8192 bf16 GEMM through cuBLASLt (fp32 accumulate), heuristic 0.
std::unique_ptr<Victim> make_gemm_victim(int m, int n, int k);
// y = a * x + y over `bytes` of fp32 per operand, one float4 per thread (many waves).
std::unique_ptr<Victim> make_elementwise_victim(std::size_t bytes);
// The probe as a victim (its windows are kept for displacement counts).
std::unique_ptr<Victim> make_probe_victim(Probe& probe);

}  // namespace tide::bench
