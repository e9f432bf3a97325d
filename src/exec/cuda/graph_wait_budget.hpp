// The per-device budget of graph waits (NOTE [graph wait budget]): plain host logic, no CUDA,
// checked on the CPU (tests/exec/graph_wait_budget_test.cpp). The sequence runner claims its
// streams per device at construction and releases them at destruction
// (sequence_runner.cpp); a claim that does not fit keeps that runner off graphs, with the
// reason.
//
// NOTE [graph wait budget]
// Part of NOTE [CUDA call sequences] 3. In a graph (a slot graph or a caller's), a wait is a
// 1-warp kernel that spins until its counter is reached (tide/kernels/signal/generation_wait.hpp),
// and at most one spins per stream at a time. A GPU keeps at most kMaxResidentGrids = 128 grids
// resident at once (CUDA's limit on concurrent kernels per device, compute capability 9.0, and in
// this process: other processes' contexts time-slice, without MPS). Where spinners held them all,
// the kernels they wait for (a counter addition, a Level 1 sum, another rank's landing on the
// same GPU) could never start: a hang. So spinners may take at most kMaxGraphWaitStreams = 64
// of them, half, leaving the rest to the kernels they wait for and to the caller's (NCCL's
// kernels, for one, spin too).
// That bound is per DEVICE, not per runner: every runner whose calls may overlap (FSDP2's
// all-gathers and reduce-scatters run at once) can have a spinner on each of its streams.
// The process keeps one registry: per device, each runner's claim (its streams there) under a
// lane. Runners of one lane promise that their calls never run at once on the device (each
// call starts after the lane's previous call completed: the runtime's lane handoffs, NOTE
// [lane handoff]), so a lane needs its largest runner's streams, not their sum; a runner
// without a lane (lane 0) is a lane of its own. A device's resident spinners are then at most
//   sum over lanes of (the largest claim of that lane on the device),
// and a runner whose claim would take that above kMaxGraphWaitStreams on some device gets no
// graphs (its calls run on the stream path, a caller's capture of them is refused), with a
// reason naming the counts, the limits and what to do. Claims are made in construction order
// and released at destruction (not where a runner's streams could not drain after an abort:
// their spinners stay resident); a runner refused graphs keeps to the stream path for its life.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tide::exec::sequence_detail {

class GraphWaitBudget {
 public:
  explicit GraphWaitBudget(int limit) : limit_(limit) {}

  // The registry of this process (limit CudaSequenceRunner::kMaxGraphWaitStreams).
  static GraphWaitBudget& process();

  // Claims `streams` (device -> streams) for runner `id` under `lane` (0: its own). Returns ""
  // and records the claim where every device stays within the limit; else records nothing
  // and returns why, naming the first device that would not.
  std::string claim(std::uint64_t id, std::uint64_t lane, const std::map<int, int>& streams);
  void release(std::uint64_t id);
  // The spinners device `device` may hold at once under the recorded claims.
  int resident(int device) const;
  int limit() const { return limit_; }

 private:
  struct Claim {
    std::uint64_t id = 0;
    std::uint64_t lane = 0;
    int device = 0;
    int streams = 0;
  };
  int resident_locked(int device, const Claim* extra, int* lanes) const;

  int limit_;
  mutable std::mutex mutex_;
  std::vector<Claim> claims_;
};

}  // namespace tide::exec::sequence_detail
