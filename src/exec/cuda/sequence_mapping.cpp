// The CUDA sequence runner's mapping, step 1 of NOTE [CUDA call sequences] (docs/executor.md):
// every template resolved once to pointer slots, counter words, tables and kernel arguments,
// then fused (sequence_fusion.hpp); the sides of its messages and the transport they take.
// Steps, at construction:
//   1. choose_transport(): the place's one-sided transport where every template's messages
//      plan on its lane (NOTE [one-sided messages]), else its two-sided one (step 6).
//   2. map_templates(): per template, in its legal order (NOTE [enqueue order]), each op this
//      process holds mapped (map_op; a message's sides, map_message), the waits and
//      additions fused, the copies dealt over the copy-engine pool (NOTE [copy-engine pool]);
//      then the messages each call sends and whether its slots may re-point (NOTE [slot
//      graph policy]).
// Nothing here touches a stream: the mapping allocates only the Level 1 tables and a
// message's staging and events.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "enqueue_order.hpp"
#include "op_resolution.hpp"
#include "program_checks.hpp"
#include "sequence_fusion.hpp"
#include "sequence_state.hpp"
#include "tide/core/error.hpp"
#include "tide/cuda/check.hpp"
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

Ptr sequence_detail::Mapping::resolve(const Region& r) const {
  Ptr p;
  p.offset = r.offset;
  switch (r.buffer.space) {
    case Space::kArena: {
      auto* base =
          static_cast<std::byte*>(fixed_.fabric.pointer(Buffer{r.buffer.rank, Space::kArena, 0}));
      if (base == nullptr) {
        throw Unsupported("CudaSequenceRunner: the arena of rank " + std::to_string(r.buffer.rank) +
                          " is not load/store reachable from this process (only puts and "
                          "signals to it travel as messages)");
      }
      p.fixed = base + fixed_.place.region_offset + r.offset;
      break;
    }
    case Space::kTensor:
    case Space::kOutput:
      if (fixed_.one_shot) {  // NOTE [one-shot programs]: the fabric's buffers, bound now
        auto* base = static_cast<std::byte*>(fixed_.fabric.pointer(r.buffer));
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

std::uint64_t* sequence_detail::Mapping::word(const program::Counter& c) const {
  std::uint64_t* words = fixed_.fabric.signals(c.rank);
  if (words == nullptr) {
    throw Unsupported("CudaSequenceRunner: the signal words of rank " + std::to_string(c.rank) +
                      " are not load/store reachable from this process");
  }
  return words + fixed_.place.first_signal_word + c.id;
}

void sequence_detail::Mapping::map_op(const Op& op, int age, SeqOp& m) {
  devices_.use_device_of(op.rank);  // Level 1 tables live on the rank's device
  m.kind = op.kind();
  m.rank = op.rank;
  m.stream = devices_.stream(op.rank, op.stream);
  // NOTE [CUDA op resolution] with pointer slots: arenas fixed now, tensors and the output
  // bound per call.
  struct SlotResolver {
    const sequence_detail::Mapping& st;
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
      if (st.fixed_.one_shot)  // NOTE [one-shot programs]
        m.fixed_gradients.push_back(
            st.fixed_.fabric.pointer(Buffer{m.rank, Space::kTensor, param}));
    }
    cudaStream_t upload_stream() const {
      return st.devices_.setup.at(st.fixed_.fabric.device_of(m.rank));
    }
  } resolver{*this, m};
  cuda_detail::resolve_payload(op, resolver, m);
  if (fixed_.one_shot) {  // NOTE [one-shot programs]: the program's own scalars
    if (const auto* sum = op.get_if<program::SumOp>()) m.sum.alpha = sum->alpha;
    if (const auto* land = op.get_if<program::LandOp>()) m.land.accumulate = land->accumulate;
  }
  if (const auto use = program::counter_use_of(op)) {
    m.word = word(use->counter);
    m.total =
        static_cast<std::size_t>(use->counter.rank) * static_cast<std::size_t>(fixed_.counters) +
        static_cast<std::size_t>(use->counter.id);
    m.value = use->value;
  } else if (const int* event = program::event_of(op)) {
    m.event = *event;
    m.age = age;
  }
}

bool sequence_detail::Mapping::is_message(const Op& op) const {
  int from = 0, to = 0;
  if (!transport::crosses_ranks(op, from, to)) return false;
  return !fixed_.fabric.load_store(from, to);
}

// NOTE [CUDA call sequences] 6: the sides of a message op this process holds, at the op's
// place: the sender's (its op stream, its rail stream), then the receiver's (its rail stream).
void sequence_detail::Mapping::map_message(const Op& op, std::set<int>& used,
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
    if (!fixed_.fabric.local(rank)) continue;
    devices_.use_device_of(rank);
    SeqOp m;
    m.kind = op.kind();
    m.rank = rank;
    m.rail = devices_.stream(rank, sequence_detail::kRailStreamName);
    m.stream = sender ? devices_.stream(rank, op.stream) : m.rail;
    slots.clear();
    m.message = std::shared_ptr<transport::Message>(
        new transport::Message(transport::map_message(op, sender, at, !one_sided)), release);
    if (one_sided) transport::route_one_sided(op, fixed_.place.region_offset, *m.message);
    m.message_slots = slots;
    used.insert(m.stream);
    used.insert(m.rail);
    out.push_back(std::move(m));
  }
}

void sequence_detail::Mapping::map_template(const program::CallTemplate& t,
                                            sequence_detail::Template& out) {
  const program::Program& p = t.program;
  if (!t.order.unplaced.empty() && !fixed_.one_shot) {
    throw InvalidArgument("CudaSequenceRunner: a template has ops no legal order reaches");
  }
  // NOTE [enqueue order]: the ops this process holds, the legal order then (one-shot programs
  // only) the unplaced ops, event waits deferred behind their records.
  std::vector<int> held;
  for (const std::vector<int>* part : {&t.order.order, &t.order.unplaced}) {
    for (const int i : *part) {
      const Op& op = p.ops[static_cast<std::size_t>(i)];
      if (is_message(op) || fixed_.fabric.local(op.rank)) held.push_back(i);
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
  out.tensors.assign(static_cast<std::size_t>(fixed_.ranks), 0);
  for (int r = 0; r < fixed_.ranks && !fixed_.one_shot;
       ++r)  // one-shot programs bind nothing per call
    out.tensors[static_cast<std::size_t>(r)] =
        static_cast<int>(p.buffers[static_cast<std::size_t>(r)].tensor_bytes.size());
}

namespace sequence_detail {

std::byte* at(const Ptr& p, const CudaCallBindings& b) {
  if (p.slot == kFixed) return p.fixed;
  const void* base = p.slot == kOutputSlot ? b.output : b.tensors[static_cast<std::size_t>(p.slot)];
  return const_cast<std::byte*>(static_cast<const std::byte*>(base)) + p.offset;
}

bool carries_bindings(const SeqOp& m) {
  switch (m.kind) {
    case OpKind::kSum:
    case OpKind::kLand:
      return true;  // alpha, accumulate (and gradients, output)
    case OpKind::kCast:
      return m.out.slot != kFixed || m.in.slot != kFixed;
    case OpKind::kZero:
      return m.out.slot != kFixed;
    default:
      return false;  // copies: per copy
  }
}

}  // namespace sequence_detail

// Step 2.
void sequence_detail::Mapping::map_templates(std::string& repoint_failure) {
  templates.resize(fixed_.sequence.templates.size());
  for (std::size_t t = 0; t < fixed_.sequence.templates.size(); ++t)
    map_template(fixed_.sequence.templates[t], templates[t]);
  if (has_messages && !transport) {
    throw Unsupported(
        "CudaSequenceRunner: some ranks are not load/store reachable and the place names no "
        "message transport (CudaSequencePlace::messages)");
  }
  for (sequence_detail::Template& t : templates) {  // messages_sent() per call of t
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
  for (const sequence_detail::Template& t : templates) {
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
    template_repointable.push_back(repointable && !message_of_caller ? 1 : 0);
    if (fixed_.options.replay_graphs && fixed_.options.repoint_graphs) {
      if (!repointable)
        repoint_failure = "copy: a 2-D copy of caller memory (CUDA updates only 1-D copy nodes)";
      else if (message_of_caller)
        repoint_failure = sequence_detail::kMessageNotRepointed;
    }
  }
}

void sequence_detail::Mapping::check_bindings(std::span<const CudaCallBindings> bindings,
                                              std::int64_t e) const {
  if (bindings.size() < static_cast<std::size_t>(fixed_.ranks)) {
    throw InvalidArgument("CudaSequenceRunner: " + std::to_string(bindings.size()) +
                          " bindings for " + std::to_string(fixed_.ranks) + " ranks");
  }
  const sequence_detail::Template& t = of_call(e);
  for (const int r : fixed_.local_ranks) {
    const CudaCallBindings& b = bindings[static_cast<std::size_t>(r)];
    const int need = t.tensors[static_cast<std::size_t>(r)];
    if (static_cast<int>(b.tensors.size()) < need) {
      throw InvalidArgument("CudaSequenceRunner: rank " + std::to_string(r) + " binds " +
                            std::to_string(b.tensors.size()) + " tensors; the call reads " +
                            std::to_string(need));
    }
  }
}

void sequence_detail::Mapping::advance(std::vector<std::int64_t>& base, std::int64_t e) const {
  const std::vector<std::int64_t>& add = of_call(e).additions;
  for (std::size_t i = 0; i < base.size(); ++i)
    base[i] += add[i];
}

// Step 1 (NOTE [CUDA call sequences] 6).
void sequence_detail::Mapping::choose_transport() {
  if (fixed_.place.messages.one_sided)
    choose_one_sided();
  else
    one_sided_refusal = fixed_.place.messages.no_one_sided;
  if (one_sided)
    transport = fixed_.place.messages.one_sided;
  else
    transport = fixed_.place.messages.two_sided;
}

// NOTE [one-sided messages]: every template's messages planned on the place's lane; every
// process decides alike (the same programs, the same one-sided transport on every rank).
void sequence_detail::Mapping::choose_one_sided() {
  // Each rank's window: its arena where this process knows it, else this process's own (the
  // NCCL window fabric's arenas are the same size on every rank).
  const std::int64_t own = fixed_.fabric.bytes(
      Buffer{fixed_.local_ranks.empty() ? 0 : fixed_.local_ranks[0], Space::kArena, 0});
  std::vector<std::int64_t> window(static_cast<std::size_t>(fixed_.ranks), own);
  for (int r = 0; r < fixed_.ranks; ++r) {
    const std::int64_t bytes = fixed_.fabric.bytes(Buffer{r, Space::kArena, 0});
    if (bytes > 0) window[static_cast<std::size_t>(r)] = bytes;
  }
  const int lanes = fixed_.place.message_channels + 1;
  try {
    for (const program::CallTemplate& t : fixed_.sequence.templates) {
      std::vector<int> ops;
      for (const std::vector<int>* part : {&t.order.order, &t.order.unplaced})
        for (const int i : *part)
          if (is_message(t.program.ops[static_cast<std::size_t>(i)])) ops.push_back(i);
      const auto input = transport::one_sided_input(t.program, ops, fixed_.place.region_offset,
                                                    fixed_.place.message_channels);
      (void)transport::plan_one_sided(input, {fixed_.ranks, lanes, window, /*token=*/true});
    }
  } catch (const std::exception& e) {
    one_sided_refusal = std::string("its messages cannot travel one-sided: ") + e.what();
    return;
  }
  one_sided = true;
}

}  // namespace tide::exec
