// What every part of the CUDA sequence runner reads (NOTE [CUDA call sequences] 1,
// docs/executor.md): the facts construction fixes (Fixed) and the runner's devices, streams and
// events (Devices). Both are filled by the runner's construction (sequence_runner.cpp); the
// mapping creates streams, the enqueue, the slot graphs and the watch use them.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "tide/exec/cuda_sequence.hpp"
#include "tide/program/program.hpp"

namespace tide::exec::sequence_detail {

// What construction fixes; the runner's State is one, and its parts read it.
struct Fixed {
  Fixed(const program::CallSequence& s, fabric::Fabric& f, const CudaSequencePlace& p,
        const CudaSequenceOptions& o)
      : sequence(s), fabric(f), place(p), options(o) {}

  const program::CallSequence& sequence;
  fabric::Fabric& fabric;
  CudaSequencePlace place;
  CudaSequenceOptions options;
  int ranks = 0;
  int counters = 0;
  int q = 1;  // event slots
  std::vector<int> local_ranks;
  // NOTE [one-shot programs] (executor.cpp): kTensor and kOutput regions are the fabric's
  // buffers, kSum and kLand keep the program's alpha and accumulate, and ops no legal order
  // reaches follow in program order.
  bool one_shot = false;
};

// The runner's devices, streams and events: per rank its context, the streams by (rank, stream
// name) with their done events, the event slots of calls, the entry event, and during
// construction the setup streams (NOTE [CUDA call sequences] 1).
struct Devices {
  explicit Devices(const Fixed& fixed) : fixed_(fixed) {}

  std::vector<CUcontext> context;  // per rank (local ones set)
  std::vector<cudaStream_t> streams;
  std::vector<int> stream_rank;
  std::vector<int> stream_name;   // per stream: the program's name index, or kRail/kPoolStreamName
  std::vector<cudaEvent_t> done;  // per stream
  std::map<std::pair<int, int>, int> stream_of;
  cudaEvent_t entry = nullptr;
  std::vector<cudaEvent_t> events;  // (slot * ranks + rank) * events_per_call + id
  int current_device = -1;  // this thread's, as last set (reset at every entry: threads differ)
  // Construction only (NOTE [CUDA call sequences] 1): per device the private stream that runs
  // the runner's setup work (zeroing, table uploads); synchronised and destroyed at its end.
  std::map<int, cudaStream_t> setup;

  void use_device_of(int rank);
  cudaStream_t setup_stream(int rank);  // the setup stream of rank's device, made current
  int stream(int rank, int name);       // the index of rank's stream `name`, made on first use
  cudaEvent_t event(std::int64_t call, int rank, int id) const;

 private:
  const Fixed& fixed_;
};

}  // namespace tide::exec::sequence_detail
