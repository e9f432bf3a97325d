#include "tide/program/program.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <variant>

namespace tide::program {

// An op's kind is the index of its payload (Op::kind).
template <OpKind kind, class Payload>
constexpr bool kind_indexes =
    std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(kind), OpPayload>, Payload>;
static_assert(kind_indexes<OpKind::kCopy, CopyOp> && kind_indexes<OpKind::kSum, SumOp> &&
              kind_indexes<OpKind::kLand, LandOp> && kind_indexes<OpKind::kCast, CastOp> &&
              kind_indexes<OpKind::kZero, ZeroOp> && kind_indexes<OpKind::kSignal, SignalOp> &&
              kind_indexes<OpKind::kWait, WaitOp> && kind_indexes<OpKind::kRailPut, RailPutOp> &&
              kind_indexes<OpKind::kEventRecord, EventRecordOp> &&
              kind_indexes<OpKind::kEventWait, EventWaitOp> &&
              kind_indexes<OpKind::kRelease, ReleaseOp> &&
              std::variant_size_v<OpPayload> == static_cast<std::size_t>(OpKind::kRelease) + 1);

std::string describe_call(const CallIdentity& call) {
  const std::string group = "group " + std::to_string(call.group);
  return call.collective + " of " + group +
         (call.name.empty() || call.name == group ? "" : " ('" + call.name + "')");
}

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kCopy:
      return "copy";
    case OpKind::kSum:
      return "sum";
    case OpKind::kLand:
      return "land";
    case OpKind::kCast:
      return "cast";
    case OpKind::kZero:
      return "zero";
    case OpKind::kSignal:
      return "signal";
    case OpKind::kWait:
      return "wait";
    case OpKind::kRailPut:
      return "rail-put";
    case OpKind::kEventRecord:
      return "event-record";
    case OpKind::kEventWait:
      return "event-wait";
    case OpKind::kRelease:
      return "release";
  }
  return "?";
}

int Program::stream(const std::string& name) {
  const auto it = std::find(stream_names.begin(), stream_names.end(), name);
  if (it != stream_names.end()) return static_cast<int>(it - stream_names.begin());
  stream_names.push_back(name);
  return static_cast<int>(stream_names.size()) - 1;
}

int ctas_of(const Op& op) {
  return std::visit(
      [](const auto& p) {
        if constexpr (requires { p.ctas; })
          return p.ctas;
        else
          return 0;
      },
      op.payload);
}

std::span<const CopyDescriptor> copies_of(const Op& op) {
  if (const auto* copy = op.get_if<CopyOp>()) return copy->copies;
  if (const auto* put = op.get_if<RailPutOp>()) return put->copies;
  return {};
}

namespace {

// The payload's member `counter` / `event` where its kind has one (C: T or const T).
template <class C, class OpT>
C* counter_in(OpT& op) {
  return std::visit(
      [](auto& p) -> C* {
        if constexpr (requires { p.counter; })
          return &p.counter;
        else
          return nullptr;
      },
      op.payload);
}

template <class C, class OpT>
C* event_in(OpT& op) {
  return std::visit(
      [](auto& p) -> C* {
        if constexpr (requires { p.event; })
          return &p.event;
        else
          return nullptr;
      },
      op.payload);
}

}  // namespace

Counter* counter_of(Op& op) {
  return counter_in<Counter>(op);
}

const Counter* counter_of(const Op& op) {
  return counter_in<const Counter>(op);
}

std::optional<CounterUse> addition_of(const Op& op) {
  if (const auto* signal = op.get_if<SignalOp>()) return CounterUse{signal->counter, signal->value};
  if (const auto* put = op.get_if<RailPutOp>()) return CounterUse{put->counter, put->value};
  return std::nullopt;
}

std::optional<CounterUse> counter_use_of(const Op& op) {
  if (const auto* wait = op.get_if<WaitOp>()) return CounterUse{wait->counter, wait->value};
  return addition_of(op);
}

int* event_of(Op& op) {
  return event_in<int>(op);
}

const int* event_of(const Op& op) {
  return event_in<const int>(op);
}

std::vector<Region> reads_of(const Op& op) {
  std::vector<Region> reads;
  for (const CopyDescriptor& c : copies_of(op))
    reads.push_back(c.src);
  if (const auto* sum = op.get_if<SumOp>()) {
    // Staged inputs are read only on the runs the segments name; a run covers the same
    // elements of every staged input's row.
    const std::int64_t item = item_bytes(sum->in_dtype);
    for (const SumSegment& s : sum->segments) {
      for (const Region& staged : sum->staged) {
        reads.push_back(Region{staged.buffer,
                               staged.offset + s.row * staged.pitch + s.out_elem * item,
                               s.elems * item, s.elems * item, 1});
      }
      reads.push_back(
          Region{s.source(op.rank), s.src_elem * item, s.elems * item, s.elems * item, 1});
    }
    if (sum->accumulate) reads.push_back(sum->dst);
  } else if (const auto* land = op.get_if<LandOp>()) {
    reads = land->sources;
    if (land->accumulate || land->wave_index > 0) reads.push_back(land->dst);
  } else if (const auto* cast = op.get_if<CastOp>()) {
    reads.push_back(cast->src);
  }
  return reads;
}

std::vector<Region> writes_of(const Op& op) {
  std::vector<Region> writes;
  for (const CopyDescriptor& c : copies_of(op))
    writes.push_back(c.dst);
  std::visit(
      [&](const auto& p) {
        if constexpr (requires { p.dst; }) writes.push_back(p.dst);
      },
      op.payload);
  return writes;
}

}  // namespace tide::program
