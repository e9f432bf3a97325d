// The CUDA sequence runner's construction, step 1 of NOTE [CUDA call sequences]
// (docs/executor.md). The runner's parts, one job each (sequence_state.hpp): the devices, the
// mapping (sequence_mapping.cpp: templates to pointer slots and words, messages and their
// transport), the abort words (sequence_abort_words.cpp), the enqueue (sequence_enqueue.cpp and
// sequence_waits.cpp, with the fusion and the copy-engine pool), the watch
// (sequence_watcher.cpp) and the slot graphs (sequence_slot_graph_runner.cpp); read-outs in
// sequence_readouts.cpp.
// Steps of set_up():
//   1. checks: the options; the sequence against the fabric and the place (signal words, the
//      abort and call-tag words, every local rank's arena); every template as
//      CudaExecutor::check() takes it (checkable_template).
//   2. Q event slots, a multiple of P above the oldest event age, so e mod Q fixes the template.
//   3. per local rank: its context, a private setup stream (NOTE [CUDA call sequences] 1),
//      whether waits go batched, every kernel loaded (NOTE [preloaded kernels]), the
//      sequence's counters zeroed on the setup stream.
//   4. the event slots' events, the entry event and the capture origin stream.
//   5. the transport (mapping.choose_transport), the abort tokens (NOTE [abort relay]) and the
//      mapping of every template (mapping.map_templates).
//   6. graph waits and slot graphs (graph_runner.set_up), the call-order event.
//   7. the abort words (aborts.set_up) and the watch (watcher.create; NOTE [CUDA call
//      sequences] 5).
//   8. the host waits for its own setup streams only, never for the device.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "graph_wait_budget.hpp"
#include "program_checks.hpp"
#include "sequence_state.hpp"
#include "sequence_watch.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/cast.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"
#include "tide/kernels/signal/abort_check.hpp"
#include "tide/kernels/signal/counter_add.hpp"
#include "tide/kernels/signal/generation_wait.hpp"

namespace tide::exec {

using program::Buffer;
using program::Space;

namespace sequence_detail {

program::Program checkable_template(const program::Program& t) {
  program::Program p = t;
  for (program::Op& op : p.ops) {
    if (auto* wait = op.get_if<program::WaitOp>(); wait != nullptr && wait->value < 0)
      wait->value = 0;
  }
  return p;
}

}  // namespace sequence_detail

void sequence_detail::Devices::use_device_of(int rank) {
  const int d = fixed_.fabric.device_of(rank);
  if (d == current_device) return;
  TIDE_CUDA_CHECK(cudaSetDevice(d));
  current_device = d;
}

int sequence_detail::Devices::stream(int rank, int name) {
  const auto it = stream_of.find({rank, name});
  if (it != stream_of.end()) return it->second;
  use_device_of(rank);
  cudaStream_t s = nullptr;
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  streams.push_back(s);
  stream_rank.push_back(rank);
  stream_name.push_back(name);
  cudaEvent_t e = nullptr;
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  done.push_back(e);
  const int index = static_cast<int>(streams.size()) - 1;
  stream_of.emplace(std::make_pair(rank, name), index);
  return index;
}

cudaEvent_t sequence_detail::Devices::event(std::int64_t e, int rank, int id) const {
  const auto slot = static_cast<std::size_t>(e % fixed_.q);
  return events[(slot * static_cast<std::size_t>(fixed_.ranks) + static_cast<std::size_t>(rank)) *
                    static_cast<std::size_t>(fixed_.sequence.events_per_call) +
                static_cast<std::size_t>(id)];
}

CudaSequenceRunner::CudaSequenceRunner(const program::CallSequence& sequence,
                                       fabric::Fabric& fabric, const CudaSequencePlace& place,
                                       const CudaSequenceOptions& options)
    : state_(std::make_unique<State>(sequence, fabric, place, options)) {
  set_up();
}

CudaSequenceRunner::CudaSequenceRunner(const program::CallSequence& sequence,
                                       fabric::Fabric& fabric, const CudaSequencePlace& place,
                                       const CudaSequenceOptions& options, OneShot)
    : state_(std::make_unique<State>(sequence, fabric, place, options)) {
  state_->one_shot = true;
  set_up();
}

void CudaSequenceRunner::set_up() {
  State& s = *state_;
  const program::CallSequence& sequence = s.sequence;
  fabric::Fabric& fabric = s.fabric;
  const CudaSequencePlace& place = s.place;
  const CudaSequenceOptions& options = s.options;
  // 1.
  if (options.copy_streams < 1 || options.copy_streams > 16) {
    throw InvalidArgument("CudaSequenceRunner: copy_streams = " +
                          std::to_string(options.copy_streams) + " (need 1..16)");
  }
  if (sequence.period < 1 ||
      sequence.templates.size() != static_cast<std::size_t>(sequence.period)) {
    throw InvalidArgument("CudaSequenceRunner: a sequence needs period >= 1 templates");
  }
  s.ranks = sequence.templates[0].program.ranks;
  s.counters = sequence.counters;
  if (s.ranks != fabric.ranks()) {
    throw InvalidArgument("CudaSequenceRunner: the fabric serves " +
                          std::to_string(fabric.ranks()) + " ranks, the sequence " +
                          std::to_string(s.ranks));
  }
  if (place.first_signal_word < 0 ||
      place.first_signal_word + sequence.counters > fabric.signal_words()) {
    throw InvalidArgument("CudaSequenceRunner: the fabric has " +
                          std::to_string(fabric.signal_words()) +
                          " signal words per rank; the sequence needs words " +
                          std::to_string(place.first_signal_word) + " .. " +
                          std::to_string(place.first_signal_word + sequence.counters - 1));
  }
  if (place.abort_word >= 0 && (place.abort_word >= fabric.signal_words() ||
                                (place.abort_word >= place.first_signal_word &&
                                 place.abort_word < place.first_signal_word + sequence.counters))) {
    throw InvalidArgument("CudaSequenceRunner: abort word " + std::to_string(place.abort_word) +
                          " is not a signal word outside the sequence's counters " +
                          std::to_string(place.first_signal_word) + " .. " +
                          std::to_string(place.first_signal_word + sequence.counters - 1));
  }
  const auto outside_counters = [&](int word) {
    return word < fabric.signal_words() &&
           (word < place.first_signal_word ||
            word >= place.first_signal_word + sequence.counters) &&
           word != place.abort_word;
  };
  if (place.call_tag_word >= 0 && !outside_counters(place.call_tag_word)) {
    throw InvalidArgument(
        "CudaSequenceRunner: call-tag word " + std::to_string(place.call_tag_word) +
        " is not a signal word outside the sequence's counters " +
        std::to_string(place.first_signal_word) + " .. " +
        std::to_string(place.first_signal_word + sequence.counters - 1) + " and its abort word");
  }
  for (int r = 0; r < s.ranks; ++r) {
    if (!fabric.local(r)) continue;
    s.local_ranks.push_back(r);
    const std::int64_t need =
        place.region_offset +
        sequence.templates[0].program.buffers[static_cast<std::size_t>(r)].arena_bytes;
    if (need > fabric.bytes(Buffer{r, Space::kArena, 0})) {
      throw InvalidArgument("CudaSequenceRunner: rank " + std::to_string(r) +
                            "'s arena is smaller than the region needs (" + std::to_string(need) +
                            " bytes)");
    }
  }
  for (const program::CallTemplate& t : sequence.templates)
    cuda_detail::check_program(sequence_detail::checkable_template(t.program));
  // 2.
  const int p = sequence.period;
  s.q = p * ((sequence.max_event_age + 1 + p - 1) / p);
  s.devices.context.assign(static_cast<std::size_t>(s.ranks), nullptr);  // 3.
  for (const int r : s.local_ranks) {
    s.devices.use_device_of(r);
    TIDE_CUDA_CHECK(cudaFree(nullptr));  // the primary context
    CUcontext ctx = nullptr;
    const CUresult got = sequence_detail::graph_driver().ctx_get_current(&ctx);
    if (got != CUDA_SUCCESS) throw CudaError("cuCtxGetCurrent failed");
    s.devices.context[static_cast<std::size_t>(r)] = ctx;
    // NOTE [CUDA call sequences] 1: the device's setup work goes on a private stream.
    cudaStream_t& setup = s.devices.setup[fabric.device_of(r)];
    if (setup == nullptr) TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&setup, cudaStreamNonBlocking));
    // Fused waits go as one cuStreamBatchMemOp where the device takes 64-bit stream memory
    // operations in batches (cudaDevAttrReserved122 is CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_
    // STREAM_MEM_OPS), else one cuStreamWaitValue64 each.
    const int device = fabric.device_of(r);
    if (!s.enqueue.batch_waits.contains(device)) {
      int can = 0;
      if (cudaDeviceGetAttribute(&can, cudaDevAttrReserved122, device) != cudaSuccess) {
        (void)cudaGetLastError();
        can = 0;
      }
      s.enqueue.batch_waits[device] =
          can != 0 && sequence_detail::graph_driver().stream_batch_mem_op != nullptr;
    }
    // NOTE [preloaded kernels]
    // Every kernel a call can launch is loaded here, before any stream of the context can
    // wait. Under CUDA's lazy loading (the default since CUDA 12.2) a kernel's first launch
    // loads it, and a load may synchronise the context: wait for every stream, including one
    // held by a cuStreamWaitValue64 for a peer. The first reduce-scatter launches its Level 1
    // sum after the sum stream's wait for the peer's push; where the peer issued another call
    // there (or stalled or died), the host spun inside that launch forever, before
    // watcher.record, so the watchdog saw no unfinished call, and after a few seconds its own
    // CUDA calls blocked in the driver as well (measured on the H200 with 2 ipc ranks and
    // --misorder-rank: both hung until their launcher killed them). A first launch behind a
    // pending cuStreamWaitValue64 does not return; after cudaFuncGetAttributes of that
    // kernel it returns at once. Each kernel (each template instance) is loaded on its own.
    kernels::prepare_generation_waits();
    kernels::prepare_counter_adds();
    kernels::prepare_level1_sum();
    kernels::prepare_landing();
    kernels::prepare_cast();
    kernels::prepare_abort_check();
    for (transport::MessageTransport* t :
         {place.messages.two_sided.get(),
          static_cast<transport::MessageTransport*>(place.messages.one_sided.get())})
      if (t != nullptr) t->prepare();
    TIDE_CUDA_CHECK(cudaMemsetAsync(fabric.signals(r) + place.first_signal_word, 0,
                                    static_cast<std::size_t>(sequence.counters) * 8, setup));
  }
  // 4.
  s.devices.events.assign(static_cast<std::size_t>(s.q) * static_cast<std::size_t>(s.ranks) *
                              static_cast<std::size_t>(sequence.events_per_call),
                          nullptr);
  for (int slot = 0; slot < s.q; ++slot) {
    for (const int r : s.local_ranks) {
      s.devices.use_device_of(r);
      for (int id = 0; id < sequence.events_per_call; ++id) {
        cudaEvent_t& e =
            s.devices.events[(static_cast<std::size_t>(slot) * static_cast<std::size_t>(s.ranks) +
                              static_cast<std::size_t>(r)) *
                                 static_cast<std::size_t>(sequence.events_per_call) +
                             static_cast<std::size_t>(id)];
        TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      }
    }
  }
  s.devices.use_device_of(s.local_ranks.empty() ? 0 : s.local_ranks[0]);
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&s.devices.entry, cudaEventDisableTiming));
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.slot_graphs.origin, cudaStreamNonBlocking));
  s.mapping.choose_transport();        // 5.
  for (const int r : s.local_ranks) {  // NOTE [abort relay]: send and receive tokens
    s.devices.use_device_of(r);
    TIDE_CUDA_CHECK(
        cudaMalloc(reinterpret_cast<void**>(&s.aborts.tokens[r]), 2 * sizeof(std::uint64_t)));
  }
  s.mapping.map_templates(s.slot_graphs.repoint_failure);
  s.totals.assign(static_cast<std::size_t>(s.ranks) * static_cast<std::size_t>(s.counters), 0);
  s.graph_runner.set_up();  // 6.
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&s.enqueue.last_done, cudaEventDisableTiming));
  s.aborts.set_up(s, s.devices, s.mapping.has_messages);  // 7.
  s.watcher.create();
  // 8. NOTE [CUDA call sequences] 1: the host waits for the runner's own setup work only, never
  // for the device (other runners' calls, the caller's compute).
  for (auto& [device, setup] : s.devices.setup) {
    TIDE_CUDA_CHECK(cudaSetDevice(device));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(setup));
    TIDE_CUDA_CHECK(cudaStreamDestroy(setup));
    setup = nullptr;
  }
  s.devices.setup.clear();
  s.devices.current_device = -1;
}

cudaStream_t sequence_detail::Devices::setup_stream(int rank) {
  use_device_of(rank);
  return setup.at(fixed_.fabric.device_of(rank));
}

CudaSequenceRunner::State::~State() {
  // NOTE [CUDA call sequences] 5: streams an abort could not drain would hang every
  // synchronising free below; everything is left to the end of the process.
  const std::unique_ptr<sequence_detail::Watch>& watch = watcher.watch;
  if (watch && watch->released) {
    std::lock_guard lock(watch->mutex);
    for (const sequence_detail::Watch::Entry& e : watch->entries) {
      if (cudaEventQuery(watch->events[static_cast<std::size_t>(e.slot)]) != cudaSuccess) {
        // The Level 1 tables' device memory: its cudaFree would wait for the held streams.
        static_cast<void>(new std::vector<sequence_detail::Template>(std::move(mapping.templates)));
        return;
      }
    }
  }
  for (cudaStream_t st : devices.streams)
    (void)cudaStreamSynchronize(st);
  if (slot_graphs.budget_claimed)
    sequence_detail::GraphWaitBudget::process().release(slot_graphs.budget_id);
  for (sequence_detail::SlotGraph& g : slot_graphs.graphs)
    sequence_detail::SlotGraphRunner::drop(g);
  watcher.destroy();
  mapping.templates.clear();  // Level 1 tables
  for (cudaEvent_t e : devices.events)
    if (e != nullptr) (void)cudaEventDestroy(e);
  for (cudaEvent_t e : devices.done)
    (void)cudaEventDestroy(e);
  if (devices.entry != nullptr) (void)cudaEventDestroy(devices.entry);
  if (enqueue.last_done != nullptr) (void)cudaEventDestroy(enqueue.last_done);
  if (slot_graphs.generations != nullptr) (void)cudaFree(slot_graphs.generations);
  for (const auto& [device, word] : aborts.private_words)
    (void)cudaFree(word);
  for (const auto& [rank, words] : aborts.tokens)
    (void)cudaFree(words);
  if (aborts.relay_word != nullptr) (void)cudaFree(aborts.relay_word);
  mapping.transport.reset();
  if (aborts.check_tables != nullptr) (void)cudaFree(aborts.check_tables);
  for (cudaStream_t st : devices.streams)
    (void)cudaStreamDestroy(st);
  if (slot_graphs.origin != nullptr) (void)cudaStreamDestroy(slot_graphs.origin);
  for (const auto& [device, st] : slot_graphs.scratch)
    (void)cudaStreamDestroy(st);
  for (const auto& [device, st] : devices.setup)  // a constructor that threw
    if (st != nullptr) (void)cudaStreamDestroy(st);
  for (cudaEvent_t e : mapping.pool_events)
    (void)cudaEventDestroy(e);
  for (const auto* list : {&enqueue.profile.ops, &enqueue.profile.streams}) {
    for (const auto& [a, b] : *list) {
      if (a != nullptr) (void)cudaEventDestroy(a);
      if (b != nullptr) (void)cudaEventDestroy(b);
    }
  }
}

CudaSequenceRunner::~CudaSequenceRunner() = default;

}  // namespace tide::exec
