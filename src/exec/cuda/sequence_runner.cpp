// The CUDA sequence runner, step 1 of NOTE [CUDA call sequences]: every template resolved once
// to pointer slots, counter words, tables and kernel arguments, then fused (sequence_fusion.hpp);
// streams and event slots.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "enqueue_order.hpp"
#include "graph_wait_budget.hpp"
#include "op_resolution.hpp"
#include "program_checks.hpp"
#include "sequence_fusion.hpp"
#include "sequence_generations.hpp"
#include "sequence_state.hpp"
#include "sequence_watch.hpp"
#include "tide/core/dtype.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
#include "tide/kernels/cast.hpp"
#include "tide/kernels/landing.hpp"
#include "tide/kernels/level1_sum.hpp"
#include "tide/kernels/signal/abort_check.hpp"
#include "tide/kernels/signal/counter_add.hpp"
#include "tide/version_gates.hpp"
#include "transport/one_sided.hpp"

namespace tide::exec {

using program::Buffer;
using program::Op;
using program::OpKind;
using program::Region;
using program::Space;
using sequence_detail::Copy;
using sequence_detail::Ptr;
using sequence_detail::SeqOp;

namespace sequence_detail {
namespace {

// The entry point `name`, or null where the driver lacks it.
template <typename Fn>
void resolve_optional_entry(Fn& fn, const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if TIDE_HAS_DRIVER_ENTRY_POINT_BY_VERSION
  TIDE_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found));
#else
  TIDE_CUDA_CHECK(cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &found));
#endif
  fn = found == cudaDriverEntryPointSuccess ? reinterpret_cast<Fn>(p) : nullptr;
}

template <typename Fn>
void resolve_entry(Fn& fn, const char* name) {
  resolve_optional_entry(fn, name);
  if (fn == nullptr) throw CudaError(std::string("CUDA driver entry point ") + name + " not found");
}

}  // namespace

program::Program checkable_template(const program::Program& t) {
  program::Program p = t;
  for (program::Op& op : p.ops) {
    if (auto* wait = op.get_if<program::WaitOp>(); wait != nullptr && wait->value < 0)
      wait->value = 0;
  }
  return p;
}

const GraphDriver& graph_driver() {
  static const GraphDriver d = [] {
    GraphDriver g;
    resolve_entry(g.ctx_get_current, "cuCtxGetCurrent");
    resolve_optional_entry(g.stream_batch_mem_op, "cuStreamBatchMemOp");
    return g;
  }();
  return d;
}

}  // namespace sequence_detail

void CudaSequenceRunner::State::use_device_of(int rank) {
  const int d = fabric.device_of(rank);
  if (d == current_device) return;
  TIDE_CUDA_CHECK(cudaSetDevice(d));
  current_device = d;
}

int CudaSequenceRunner::State::stream(int rank, int name) {
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

Ptr CudaSequenceRunner::State::resolve(const Region& r) const {
  Ptr p;
  p.offset = r.offset;
  switch (r.buffer.space) {
    case Space::kArena: {
      auto* base = static_cast<std::byte*>(fabric.pointer(Buffer{r.buffer.rank, Space::kArena, 0}));
      if (base == nullptr) {
        throw Unsupported("CudaSequenceRunner: the arena of rank " + std::to_string(r.buffer.rank) +
                          " is not load/store reachable from this process (only puts and "
                          "signals to it travel as messages)");
      }
      p.fixed = base + place.region_offset + r.offset;
      break;
    }
    case Space::kTensor:
    case Space::kOutput:
      if (one_shot) {  // NOTE [one-shot programs]: the fabric's buffers, bound now
        auto* base = static_cast<std::byte*>(fabric.pointer(r.buffer));
        if (base == nullptr && r.bytes() > 0) {
          throw Unsupported("CudaExecutor: a buffer of rank " + std::to_string(r.buffer.rank) +
                            " is not addressable from this process");
        }
        p.fixed = base + r.offset;
      } else if (r.buffer.space == Space::kTensor) {
        p.slot = r.buffer.index;
      } else {
        if (r.buffer.index != 0) throw InvalidArgument("CudaSequenceRunner: a call has one output");
        p.slot = sequence_detail::kOutputSlot;
      }
      break;
  }
  return p;
}

std::uint64_t* CudaSequenceRunner::State::word(const program::Counter& c) const {
  std::uint64_t* words = fabric.signals(c.rank);
  if (words == nullptr) {
    throw Unsupported("CudaSequenceRunner: the signal words of rank " + std::to_string(c.rank) +
                      " are not load/store reachable from this process");
  }
  return words + place.first_signal_word + c.id;
}

cudaEvent_t CudaSequenceRunner::State::event(std::int64_t e, int rank, int id) const {
  const auto slot = static_cast<std::size_t>(e % q);
  return events[(slot * static_cast<std::size_t>(ranks) + static_cast<std::size_t>(rank)) *
                    static_cast<std::size_t>(sequence.events_per_call) +
                static_cast<std::size_t>(id)];
}

void CudaSequenceRunner::State::map_op(const Op& op, int age, SeqOp& m) {
  use_device_of(op.rank);  // Level 1 tables live on the rank's device
  m.kind = op.kind();
  m.rank = op.rank;
  m.stream = stream(op.rank, op.stream);
  // NOTE [CUDA op resolution] with pointer slots: arenas fixed now, tensors and the output
  // bound per call.
  struct SlotResolver {
    const State& st;
    SeqOp& m;
    Ptr address(const Region& r) const { return st.resolve(r); }
    std::byte* fixed(const Region& r) const {
      const Ptr p = st.resolve(r);
      if (p.slot != sequence_detail::kFixed) {
        throw Unsupported("CudaSequenceRunner: a landing reads only arenas");
      }
      return p.fixed;
    }
    void gradient(int param) const {
      m.gradient_slots.push_back(param);
      if (st.one_shot)  // NOTE [one-shot programs]
        m.fixed_gradients.push_back(st.fabric.pointer(Buffer{m.rank, Space::kTensor, param}));
    }
    cudaStream_t upload_stream() const { return st.setup.at(st.fabric.device_of(m.rank)); }
  } resolver{*this, m};
  cuda_detail::resolve_payload(op, resolver, m);
  if (one_shot) {  // NOTE [one-shot programs]: the program's own scalars
    if (const auto* sum = op.get_if<program::SumOp>()) m.sum.alpha = sum->alpha;
    if (const auto* land = op.get_if<program::LandOp>()) m.land.accumulate = land->accumulate;
  }
  if (const auto use = program::counter_use_of(op)) {
    m.word = word(use->counter);
    m.total = static_cast<std::size_t>(use->counter.rank) * static_cast<std::size_t>(counters) +
              static_cast<std::size_t>(use->counter.id);
    m.value = use->value;
  } else if (const int* event = program::event_of(op)) {
    m.event = *event;
    m.age = age;
  }
}

bool CudaSequenceRunner::State::is_message(const Op& op) const {
  int from = 0, to = 0;
  if (!transport::crosses_ranks(op, from, to)) return false;
  return !fabric.load_store(from, to);
}

// NOTE [CUDA call sequences] 6: the sides of a message op this process holds, at the op's
// place: the sender's (its op stream, its rail stream), then the receiver's (its rail stream).
void CudaSequenceRunner::State::map_message(const Op& op, std::set<int>& used,
                                            std::vector<SeqOp>& out) {
  transport::MessageAddresses at;
  std::vector<Ptr> slots;  // per part of the side being mapped
  at.region = [this, &slots](const Region& r) -> std::byte* {
    const Ptr p = resolve(r);
    slots.push_back(p);
    // Caller memory: bound per call (enqueue_op); a non-null placeholder until then.
    if (p.slot != sequence_detail::kFixed) return reinterpret_cast<std::byte*>(alignof(Ptr));
    return p.fixed;
  };
  at.counter = [this](const program::Counter& c) { return word(c); };
  const int to = program::addition_of(op).value().counter.rank;
  const auto release = [](transport::Message* m) {
    transport::release_message(*m);
    delete m;
  };
  for (const bool sender : {true, false}) {
    const int rank = sender ? op.rank : to;
    if (!fabric.local(rank)) continue;
    use_device_of(rank);
    SeqOp m;
    m.kind = op.kind();
    m.rank = rank;
    m.rail = stream(rank, sequence_detail::kRailStreamName);
    m.stream = sender ? stream(rank, op.stream) : m.rail;
    slots.clear();
    m.message = std::shared_ptr<transport::Message>(
        new transport::Message(transport::map_message(op, sender, at, !one_sided)), release);
    if (one_sided) transport::route_one_sided(op, place.region_offset, *m.message);
    m.message_slots = slots;
    used.insert(m.stream);
    used.insert(m.rail);
    out.push_back(std::move(m));
  }
}

void CudaSequenceRunner::State::map_template(const program::CallTemplate& t,
                                             sequence_detail::Template& out) {
  const program::Program& p = t.program;
  if (!t.order.unplaced.empty() && !one_shot) {
    throw InvalidArgument("CudaSequenceRunner: a template has ops no legal order reaches");
  }
  // NOTE [enqueue order]: the ops this process holds, the legal order then (one-shot programs
  // only) the unplaced ops, event waits deferred behind their records.
  std::vector<int> held;
  for (const std::vector<int>* part : {&t.order.order, &t.order.unplaced}) {
    for (const int i : *part) {
      const Op& op = p.ops[static_cast<std::size_t>(i)];
      if (is_message(op) || fabric.local(op.rank)) held.push_back(i);
    }
  }
  const cuda_detail::EnqueueOrder order = cuda_detail::enqueue_order(
      p, held, t.event_age, [this](const Op& op) { return is_message(op); });
  out.deferred = order.deferred;
  std::set<int> used;
  for (const int i : order.ops) {
    const Op& op = p.ops[static_cast<std::size_t>(i)];
    const std::size_t first = out.ops.size();
    if (is_message(op)) {
      // Every process answers alike (the same ops, the same load_store): graphs_unavailable()
      // agrees across processes.
      has_messages = true;
      map_message(op, used, out.ops);
    } else {
      SeqOp m;
      map_op(op, t.event_age.empty() ? 0 : t.event_age[static_cast<std::size_t>(i)], m);
      used.insert(m.stream);
      out.ops.push_back(std::move(m));
    }
    for (std::size_t k = first; k < out.ops.size(); ++k)
      out.ops[k].op = i;
  }
  out.ops = sequence_detail::fuse_waits_and_signals(std::move(out.ops));
  map_copy_pool(out, used);
  out.streams.assign(used.begin(), used.end());
  out.additions = t.additions;
  out.tensors.assign(static_cast<std::size_t>(ranks), 0);
  for (int r = 0; r < ranks && !one_shot; ++r)  // one-shot programs bind nothing per call
    out.tensors[static_cast<std::size_t>(r)] =
        static_cast<int>(p.buffers[static_cast<std::size_t>(r)].tensor_bytes.size());
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
  // Event slots: a multiple of P above the oldest age, so e mod Q fixes the template.
  const int p = sequence.period;
  s.q = p * ((sequence.max_event_age + 1 + p - 1) / p);
  s.context.assign(static_cast<std::size_t>(s.ranks), nullptr);
  for (const int r : s.local_ranks) {
    s.use_device_of(r);
    TIDE_CUDA_CHECK(cudaFree(nullptr));  // the primary context
    CUcontext ctx = nullptr;
    const CUresult got = sequence_detail::graph_driver().ctx_get_current(&ctx);
    if (got != CUDA_SUCCESS) throw CudaError("cuCtxGetCurrent failed");
    s.context[static_cast<std::size_t>(r)] = ctx;
    // NOTE [CUDA call sequences] 1: the device's setup work goes on a private stream.
    cudaStream_t& setup = s.setup[fabric.device_of(r)];
    if (setup == nullptr) TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&setup, cudaStreamNonBlocking));
    // Fused waits go as one cuStreamBatchMemOp where the device takes 64-bit stream memory
    // operations in batches (cudaDevAttrReserved122 is CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_
    // STREAM_MEM_OPS), else one cuStreamWaitValue64 each.
    const int device = fabric.device_of(r);
    if (!s.batch_waits.contains(device)) {
      int can = 0;
      if (cudaDeviceGetAttribute(&can, cudaDevAttrReserved122, device) != cudaSuccess) {
        (void)cudaGetLastError();
        can = 0;
      }
      s.batch_waits[device] =
          can != 0 && sequence_detail::graph_driver().stream_batch_mem_op != nullptr;
    }
    // NOTE [preloaded kernels]
    // Every kernel a call can launch is loaded here, before any stream of the context can
    // wait. Under CUDA's lazy loading (the default since CUDA 12.2) a kernel's first launch
    // loads it, and a load may synchronise the context: wait for every stream, including one
    // held by a cuStreamWaitValue64 for a peer. The first reduce-scatter launches its Level 1
    // sum after the sum stream's wait for the peer's push; where the peer issued another call
    // there (or stalled or died), the host spun inside that launch forever, before
    // watch_call, so the watchdog saw no unfinished call, and after a few seconds its own
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
  s.events.assign(static_cast<std::size_t>(s.q) * static_cast<std::size_t>(s.ranks) *
                      static_cast<std::size_t>(sequence.events_per_call),
                  nullptr);
  for (int slot = 0; slot < s.q; ++slot) {
    for (const int r : s.local_ranks) {
      s.use_device_of(r);
      for (int id = 0; id < sequence.events_per_call; ++id) {
        cudaEvent_t& e =
            s.events[(static_cast<std::size_t>(slot) * static_cast<std::size_t>(s.ranks) +
                      static_cast<std::size_t>(r)) *
                         static_cast<std::size_t>(sequence.events_per_call) +
                     static_cast<std::size_t>(id)];
        TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      }
    }
  }
  s.use_device_of(s.local_ranks.empty() ? 0 : s.local_ranks[0]);
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&s.entry, cudaEventDisableTiming));
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.origin, cudaStreamNonBlocking));
  // NOTE [CUDA call sequences] 6: the transport messages take, the place's (NOTE [one-sided
  // messages]: one-sided where given and every template plans).
  if (place.messages.one_sided)
    s.choose_one_sided();
  else
    s.one_sided_refusal = place.messages.no_one_sided;
  if (s.one_sided)
    s.transport = place.messages.one_sided;
  else
    s.transport = place.messages.two_sided;
  for (const int r : s.local_ranks) {  // NOTE [abort relay]: send and receive tokens
    s.use_device_of(r);
    TIDE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s.tokens[r]), 2 * sizeof(std::uint64_t)));
  }
  s.templates.resize(sequence.templates.size());
  for (std::size_t t = 0; t < sequence.templates.size(); ++t)
    s.map_template(sequence.templates[t], s.templates[t]);
  if (s.has_messages && !s.transport) {
    throw Unsupported(
        "CudaSequenceRunner: some ranks are not load/store reachable and the place names no "
        "message transport (CudaSequencePlace::messages)");
  }
  for (sequence_detail::Template& t : s.templates) {  // messages_sent() per call of t
    for (const SeqOp& m : t.ops) {
      if (!m.message || !m.message->sender) continue;
      ++t.message_sends;
      std::size_t bytes = sizeof(std::uint64_t);  // the abort token (NOTE [abort relay])
      for (const transport::MessagePart& part : m.message->parts)
        bytes += part.bytes;
      t.message_bytes += static_cast<std::int64_t>(bytes);
    }
  }
  // NOTE [slot graph policy]: a template that copies caller memory in 2-D cannot re-point (the
  // same rule enqueue_op applies at capture), so its slots capture only unchanged calls.
  for (const sequence_detail::Template& t : s.templates) {
    bool repointable = true;
    for (const SeqOp& m : t.ops) {
      if (m.empty || (m.kind != OpKind::kCopy && m.kind != OpKind::kRailPut)) continue;
      for (const Copy& c : m.copies)
        if (!c.flat &&
            (c.dst.slot != sequence_detail::kFixed || c.src.slot != sequence_detail::kFixed))
          repointable = false;
    }
    bool message_of_caller = false;  // NOTE [CUDA call sequences] 3: not re-pointed
    for (const SeqOp& m : t.ops)
      for (const sequence_detail::Ptr& slot : m.message_slots)
        message_of_caller = message_of_caller || slot.slot != sequence_detail::kFixed;
    s.template_repointable.push_back(repointable && !message_of_caller ? 1 : 0);
    if (s.options.replay_graphs && s.options.repoint_graphs) {
      if (!repointable)
        s.repoint_failure = "copy: a 2-D copy of caller memory (CUDA updates only 1-D copy nodes)";
      else if (message_of_caller)
        s.repoint_failure = sequence_detail::kMessageNotRepointed;
    }
  }
  s.totals.assign(static_cast<std::size_t>(s.ranks) * static_cast<std::size_t>(s.counters), 0);
  // NOTE [graph wait budget]: graph waits spin in kernels, one per stream at a time; the
  // streams of every runner whose calls may overlap on a device share one budget there.
  std::map<int, int> streams_per_device;
  for (const int r : s.stream_rank)
    ++streams_per_device[fabric.device_of(r)];
  s.budget_id = reinterpret_cast<std::uintptr_t>(&s);
  if (s.one_shot) {
    // NOTE [one-shot programs]: every call on the stream path; no claim on the budget.
    s.no_graph_waits = "a one-shot program (CudaExecutor) runs on the stream path";
  } else if (s.has_messages && !s.transport->capture_refusal().empty()) {
    // NOTE [CUDA call sequences] 6: messages a graph cannot hold.
    s.no_graph_waits =
        "its calls send rail messages (NOTE [CUDA call sequences] 6) that cannot "
        "be captured: " +
        s.transport->capture_refusal();
  } else {
    s.no_graph_waits = sequence_detail::GraphWaitBudget::process().claim(
        s.budget_id, options.graph_lane, streams_per_device);
  }
  if (s.no_graph_waits.empty()) {
    s.budget_claimed = true;
    // NOTE [CUDA call sequences] 6: slot graphs are decided per process; a caller's capture
    // is the caller's, alike on every rank.
    if (s.has_messages && !s.transport->per_process_refusal().empty()) {
      s.no_slot_graphs =
          "no slot graphs (a caller's capture is taken): " + s.transport->per_process_refusal();
      s.options.replay_graphs = false;
    }
  } else {
    s.options.replay_graphs = false;
  }
  // Graph waits (NOTE [CUDA call sequences] 3): what Q calls add, the slots' generations.
  std::vector<std::vector<std::int64_t>> additions;
  for (const sequence_detail::Template& t : s.templates)
    additions.push_back(t.additions);
  s.slot_period_additions = cuda_detail::slot_period_additions(additions, s.q);
  s.use_device_of(s.local_ranks.empty() ? 0 : s.local_ranks[0]);
  TIDE_CUDA_CHECK(
      cudaMalloc(reinterpret_cast<void**>(&s.generations), static_cast<std::size_t>(s.q) * 8));
  TIDE_CUDA_CHECK(cudaMemsetAsync(s.generations, 0, static_cast<std::size_t>(s.q) * 8,
                                  s.setup_stream(s.local_ranks.empty() ? 0 : s.local_ranks[0])));
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&s.last_done, cudaEventDisableTiming));
  s.graphs.resize(static_cast<std::size_t>(s.q));
  s.set_up_abort_words();
  s.create_watch();
  // NOTE [CUDA call sequences] 1: the host waits for the runner's own setup work only, never
  // for the device (other runners' calls, the caller's compute).
  for (auto& [device, setup] : s.setup) {
    TIDE_CUDA_CHECK(cudaSetDevice(device));
    TIDE_CUDA_CHECK(cudaStreamSynchronize(setup));
    TIDE_CUDA_CHECK(cudaStreamDestroy(setup));
    setup = nullptr;
  }
  s.setup.clear();
  s.current_device = -1;
}

cudaStream_t CudaSequenceRunner::State::setup_stream(int rank) {
  use_device_of(rank);
  return setup.at(fabric.device_of(rank));
}

CudaSequenceRunner::State::~State() {
  // NOTE [CUDA call sequences] 5: streams an abort could not drain would hang every
  // synchronising free below; everything is left to the end of the process.
  if (watch && watch->released) {
    std::lock_guard lock(watch->mutex);
    for (const sequence_detail::Watch::Entry& e : watch->entries) {
      if (cudaEventQuery(watch->events[static_cast<std::size_t>(e.slot)]) != cudaSuccess) {
        // The Level 1 tables' device memory: its cudaFree would wait for the held streams.
        static_cast<void>(new std::vector<sequence_detail::Template>(std::move(templates)));
        return;
      }
    }
  }
  for (cudaStream_t st : streams)
    (void)cudaStreamSynchronize(st);
  if (budget_claimed) sequence_detail::GraphWaitBudget::process().release(budget_id);
  for (sequence_detail::SlotGraph& g : graphs)
    drop(g);
  destroy_watch();
  templates.clear();  // Level 1 tables
  for (cudaEvent_t e : events)
    if (e != nullptr) (void)cudaEventDestroy(e);
  for (cudaEvent_t e : done)
    (void)cudaEventDestroy(e);
  if (entry != nullptr) (void)cudaEventDestroy(entry);
  if (last_done != nullptr) (void)cudaEventDestroy(last_done);
  if (generations != nullptr) (void)cudaFree(generations);
  for (const auto& [device, word] : private_abort)
    (void)cudaFree(word);
  for (const auto& [rank, words] : tokens)
    (void)cudaFree(words);
  if (relay_word != nullptr) (void)cudaFree(relay_word);
  transport.reset();
  if (check_tables != nullptr) (void)cudaFree(check_tables);
  for (cudaStream_t st : streams)
    (void)cudaStreamDestroy(st);
  if (origin != nullptr) (void)cudaStreamDestroy(origin);
  for (const auto& [device, st] : scratch)
    (void)cudaStreamDestroy(st);
  for (const auto& [device, st] : setup)  // a constructor that threw
    if (st != nullptr) (void)cudaStreamDestroy(st);
  for (cudaEvent_t e : pool_events)
    (void)cudaEventDestroy(e);
  for (const auto* list : {&profile.ops, &profile.streams}) {
    for (const auto& [a, b] : *list) {
      if (a != nullptr) (void)cudaEventDestroy(a);
      if (b != nullptr) (void)cudaEventDestroy(b);
    }
  }
}

CudaSequenceRunner::~CudaSequenceRunner() = default;

std::uint64_t new_graph_lane() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1);
}

int CudaSequenceRunner::graph_wait_streams(int device) {
  return sequence_detail::GraphWaitBudget::process().resident(device);
}

// NOTE [CUDA call sequences] 6: what calls change is read under the runner's lock.
std::int64_t CudaSequenceRunner::calls() const {
  std::lock_guard lock(state_->mutex);
  return state_->call;
}
int CudaSequenceRunner::event_slots() const {
  return state_->q;  // fixed at construction
}
std::int64_t CudaSequenceRunner::graph_launches() const {
  std::lock_guard lock(state_->mutex);
  return state_->graph_launches;
}
std::int64_t CudaSequenceRunner::graph_captures() const {
  std::lock_guard lock(state_->mutex);
  return state_->graph_captures;
}
std::int64_t CudaSequenceRunner::messages_sent() const {
  std::lock_guard lock(state_->mutex);
  return state_->messages_sent;
}
std::int64_t CudaSequenceRunner::message_bytes_sent() const {
  std::lock_guard lock(state_->mutex);
  return state_->message_bytes_sent;
}
std::string CudaSequenceRunner::one_sided_refusal() const {
  return state_->one_sided_refusal;  // fixed at construction
}
std::string CudaSequenceRunner::message_path() const {
  return state_->has_messages ? state_->transport->path() : "";  // fixed at construction
}

// NOTE [one-sided messages]: every template's messages planned on the place's lane; every
// process decides alike (the same programs, the same one-sided transport on every rank).
void CudaSequenceRunner::State::choose_one_sided() {
  // Each rank's window: its arena where this process knows it, else this process's own (the
  // NCCL window fabric's arenas are the same size on every rank).
  const std::int64_t own =
      fabric.bytes(Buffer{local_ranks.empty() ? 0 : local_ranks[0], Space::kArena, 0});
  std::vector<std::int64_t> window(static_cast<std::size_t>(ranks), own);
  for (int r = 0; r < ranks; ++r) {
    const std::int64_t bytes = fabric.bytes(Buffer{r, Space::kArena, 0});
    if (bytes > 0) window[static_cast<std::size_t>(r)] = bytes;
  }
  const int lanes = place.message_channels + 1;
  try {
    for (const program::CallTemplate& t : sequence.templates) {
      std::vector<int> ops;
      for (const std::vector<int>* part : {&t.order.order, &t.order.unplaced})
        for (const int i : *part)
          if (is_message(t.program.ops[static_cast<std::size_t>(i)])) ops.push_back(i);
      const auto input =
          transport::one_sided_input(t.program, ops, place.region_offset, place.message_channels);
      (void)transport::plan_one_sided(input, {ranks, lanes, window, /*token=*/true});
    }
  } catch (const std::exception& e) {
    one_sided_refusal = std::string("its messages cannot travel one-sided: ") + e.what();
    return;
  }
  one_sided = true;
}

std::string CudaSequenceRunner::graphs_unavailable() const {
  // Fixed at construction.
  return state_->no_graph_waits.empty() ? state_->no_slot_graphs : state_->no_graph_waits;
}
std::string CudaSequenceRunner::repoint_failure() const {
  std::lock_guard lock(state_->mutex);
  return state_->repoint_failure;
}
std::int64_t CudaSequenceRunner::nodes_repointed() const {
  std::lock_guard lock(state_->mutex);
  return state_->nodes_repointed;
}
std::int64_t CudaSequenceRunner::repointed_launches() const {
  std::lock_guard lock(state_->mutex);
  return state_->repointed_launches;
}

double CudaSequenceRunner::message_ops() const {
  double n = 0;
  for (const sequence_detail::Template& t : state_->templates)
    for (const SeqOp& m : t.ops)
      n += m.message ? 1 : 0;
  return n / static_cast<double>(std::max<std::size_t>(1, state_->templates.size()));
}

CudaSequenceCounts CudaSequenceRunner::counts() const {
  CudaSequenceCounts c;
  for (const sequence_detail::Template& t : state_->templates) {
    for (const SeqOp& m : t.ops) {
      if (m.empty) continue;
      c.ops += 1;
      c.copies += static_cast<double>(m.copies.size());
      switch (m.kind) {
        case OpKind::kWait:
          c.wait_ops += 1;
          c.wait_terms += static_cast<double>(std::max<std::size_t>(1, m.waits.size()));
          break;
        case OpKind::kSignal:
        case OpKind::kRailPut:
          c.signal_ops += 1;
          c.signal_terms += static_cast<double>(std::max<std::size_t>(1, m.adds.size()));
          break;
        case OpKind::kSum:
        case OpKind::kLand:
        case OpKind::kCast:
          c.kernels += 1;
          break;
        case OpKind::kEventRecord:
        case OpKind::kEventWait:
          c.events += 1;
          break;
        default:
          break;
      }
    }
  }
  const auto n = static_cast<double>(std::max<std::size_t>(1, state_->templates.size()));
  for (double* v : {&c.ops, &c.copies, &c.wait_ops, &c.wait_terms, &c.signal_ops, &c.signal_terms,
                    &c.kernels, &c.events})
    *v /= n;
  return c;
}

}  // namespace tide::exec
