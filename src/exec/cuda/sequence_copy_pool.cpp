// The copy-engine pool of the CUDA executor (NOTE [copy-engine pool]): a copy op's descriptors
// dealt over a few streams of its rank, at construction, and enqueued with a fork and joins.
#include <algorithm>
#include <set>
#include <vector>

#include "op_resolution.hpp"
#include "sequence_state.hpp"
#include "tide/cuda/check.hpp"

namespace tide::exec {

using program::OpKind;
using sequence_detail::Copy;
using sequence_detail::SeqOp;

// NOTE [copy-engine pool]
// Paper Sec. 6.2: descriptor batches over a small stream pool, so that several copy engines
// work on one op. With CudaSequenceOptions::copy_streams = k > 1 (CudaExecutorOptions for a
// one-shot program), a copy op (kCopy, kRailPut) of two or more descriptors deals them over
// its own stream and up to k - 1 pool streams of its rank, largest first, each to the
// least-loaded lane by bytes (decided once, at construction). Steps and synchronisation, per
// call:
//   1. the op's stream records `fork`; each pool stream used waits for it (so a pool copy
//      follows everything before the op on its stream, the entry event included);
//   2. each lane issues its copies in descriptor order;
//   3. each pool stream records its `join`, and the op's stream waits for every join before
//      anything that follows the op (a kRailPut's counter addition included).
// A rank's pool streams are shared by its program streams and fed in the one enqueue order
// (NOTE [enqueue order]), so a pool stream only ever waits for forks already enqueued. The
// pool streams are streams of the call like any other (they wait for the entry event and the
// caller waits for their done events), so captured calls hold them too. Re-recording `fork`
// and the joins in the next call is safe: a wait takes the event as it was when enqueued.
void sequence_detail::Mapping::map_copy_pool(sequence_detail::Template& t, std::set<int>& used) {
  if (fixed_.options.copy_streams < 2) return;
  for (SeqOp& m : t.ops) {
    if (m.empty || m.message || (m.kind != OpKind::kCopy && m.kind != OpKind::kRailPut)) continue;
    const int lanes = std::min<int>(fixed_.options.copy_streams, static_cast<int>(m.copies.size()));
    if (lanes < 2) continue;
    std::vector<std::size_t> by_size(m.copies.size());
    for (std::size_t i = 0; i < by_size.size(); ++i)
      by_size[i] = i;
    const auto bytes = [&](std::size_t i) { return m.copies[i].width * m.copies[i].rows; };
    std::stable_sort(by_size.begin(), by_size.end(),
                     [&](std::size_t a, std::size_t b) { return bytes(a) > bytes(b); });
    std::vector<std::size_t> load(static_cast<std::size_t>(lanes), 0);
    m.lane.assign(m.copies.size(), 0);
    for (const std::size_t i : by_size) {
      const auto lightest =
          static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      m.lane[i] = static_cast<int>(lightest);
      load[lightest] += bytes(i);
    }
    devices_.use_device_of(m.rank);
    TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&m.fork, cudaEventDisableTiming));
    pool_events.push_back(m.fork);
    for (int j = 1; j < lanes; ++j) {
      const int pool_stream = devices_.stream(m.rank, sequence_detail::kPoolStreamName - (j - 1));
      m.pool.push_back(pool_stream);
      used.insert(pool_stream);
      devices_.use_device_of(m.rank);
      cudaEvent_t e = nullptr;
      TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      pool_events.push_back(e);
      m.joins.push_back(e);
    }
  }
}

// The copies of a kCopy / kRailPut on `s`, or dealt over its pool (steps 1-3 above). Under the
// capture of a slot graph, the node of every copy of caller memory is recorded on the stream
// it went to (NOTE [CUDA call sequences] 3).
void sequence_detail::Enqueue::enqueue_copies(const SeqOp& m, std::size_t index,
                                              const CudaCallBindings& b, cudaStream_t s,
                                              sequence_detail::Capture* capture) {
  const bool pooled = !m.lane.empty();
  if (pooled) {
    TIDE_CUDA_CHECK(cudaEventRecord(m.fork, s));
    for (const int p : m.pool)
      TIDE_CUDA_CHECK(
          cudaStreamWaitEvent(devices_.streams[static_cast<std::size_t>(p)], m.fork, 0));
  }
  for (std::size_t k = 0; k < m.copies.size(); ++k) {
    const Copy& c = m.copies[k];
    const int lane = pooled ? m.lane[k] : 0;
    cudaStream_t on =
        lane == 0
            ? s
            : devices_
                  .streams[static_cast<std::size_t>(m.pool[static_cast<std::size_t>(lane - 1)])];
    const bool slotted =
        c.dst.slot != sequence_detail::kFixed || c.src.slot != sequence_detail::kFixed;
    if (slotted && !c.flat && capture != nullptr && capture->repoints != nullptr &&
        capture->repointable) {
      // CUDA updates only 1-D copy nodes; a 2-D copy's node, on its own or as a child
      // graph, is refused (measured on the H200, NOTE [CUDA call sequences] 3).
      slot_graphs_.repoint_failure =
          "copy: a 2-D copy of caller memory (CUDA updates only 1-D copy nodes)";
      capture->repointable = false;
    }
    cuda_detail::enqueue_copy(c, sequence_detail::at(c.dst, b), sequence_detail::at(c.src, b), on);
    if (slotted) record_node(on, m, index, static_cast<int>(k), capture);
  }
  if (pooled) {
    for (std::size_t j = 0; j < m.pool.size(); ++j) {
      TIDE_CUDA_CHECK(
          cudaEventRecord(m.joins[j], devices_.streams[static_cast<std::size_t>(m.pool[j])]));
      TIDE_CUDA_CHECK(cudaStreamWaitEvent(s, m.joins[j], 0));
    }
  }
}

}  // namespace tide::exec
