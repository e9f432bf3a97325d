// Static checks: each op's geometry, buffers, counters and events; and every wait's
// threshold against everything the program ever adds to its counter.
#include "static_checks.hpp"

#include <cstdint>
#include <string>

namespace tide::exec::detail {
namespace {

using program::Op;
using program::OpKind;
using program::Region;

// Why `op` is malformed, or "" if it is not.
std::string malformed(const program::Program& program, const BufferTable& table, const Op& op) {
  if (op.rank < 0 || op.rank >= program.ranks) return "its rank is out of range";
  if (op.stream < 0 || op.stream >= static_cast<int>(program.stream_names.size()))
    return "its stream is not in Program::stream_names";
  auto bad_region = [&](const Region& r) { return !region_in_bounds(table, r); };
  auto counter_ok = [&](const program::Counter& c) {
    return c.rank >= 0 && c.rank < program.ranks && c.id >= 0 && c.id < program.counters;
  };
  switch (op.kind) {
    case OpKind::kCopy:
    case OpKind::kRailPut:
      for (const program::CopyDescriptor& c : op.copies) {
        if (bad_region(c.src) || bad_region(c.dst)) return "a copy region lies outside its buffer";
        if (c.src.width != c.dst.width || c.src.rows != c.dst.rows)
          return "a copy's source and destination differ in width or rows";
      }
      if (op.kind == OpKind::kRailPut && (!counter_ok(op.counter) || op.value < 0))
        return "its counter is out of range or its value negative";
      return "";
    case OpKind::kSum: {
      if (bad_region(op.dst) || op.dst.width % 4 != 0) return "dst is out of bounds or not fp32";
      const std::int64_t row_elems = op.dst.width / 4;
      const std::int64_t item = item_bytes(op.in_dtype);
      for (const Region& s : op.staged) {
        if (bad_region(s)) return "a staged input lies outside its buffer";
        if (s.rows != op.dst.rows || s.width != row_elems * item)
          return "a staged input does not have dst's row/element geometry";
      }
      for (const program::SumSegment& s : op.segments) {
        if (s.row < 0 || s.row >= op.dst.rows || s.out_elem < 0 || s.elems < 0 ||
            s.out_elem + s.elems > row_elems)
          return "a segment lies outside dst";
        if (table.index(program::Buffer{op.rank, program::Space::kTensor, s.param}) < 0)
          return "a segment names an unknown parameter";
      }
      for (const Region& r : program::reads_of(op))
        if (bad_region(r)) return "a segment reads outside its gradient tensor";
      return "";
    }
    case OpKind::kLand:
      if (bad_region(op.dst) || op.dst.width % 4 != 0) return "dst is out of bounds or not fp32";
      if (op.sources.empty()) return "a landing needs at least one source";
      for (const Region& s : op.sources)
        if (bad_region(s) || s.bytes() != op.dst.bytes() || s.width % 4 != 0)
          return "a source is out of bounds or differs from dst in length";
      if (op.wave_index < 0) return "wave_index is negative";
      return "";
    case OpKind::kCast:
      if (op.sources.size() != 1) return "a cast takes exactly one source";
      if (bad_region(op.dst) || bad_region(op.sources[0]) || op.dst.width % 2 != 0 ||
          op.sources[0].width % 4 != 0 || op.sources[0].bytes() != 2 * op.dst.bytes())
        return "source (fp32) and dst (bf16) are out of bounds or differ in elements";
      return "";
    case OpKind::kZero:
    case OpKind::kRelease:
      if (bad_region(op.dst)) return "dst lies outside its buffer";
      return "";
    case OpKind::kSignal:
      if (!counter_ok(op.counter) || op.value < 0)
        return "its counter is out of range or its value negative";
      return "";
    case OpKind::kWait:
      if (!counter_ok(op.counter)) return "its counter is out of range";
      if (op.counter.rank != op.rank) return "it waits on another rank's counter";
      return "";
    case OpKind::kEventRecord:
    case OpKind::kEventWait:
      if (op.event < 0 || op.event >= program.events) return "its event is out of range";
      return "";
  }
  return "unknown op kind";
}

ExecError error(ErrorKind kind, const program::Program& program, int op, std::string why) {
  ExecError e;
  e.kind = kind;
  e.op = op;
  e.rank = program.ops[static_cast<std::size_t>(op)].rank;
  e.message = describe_op(program, op) + ": " + why;
  return e;
}

}  // namespace

StaticFacts check_program(const program::Program& program, const BufferTable& table,
                          ErrorSink& sink) {
  StaticFacts facts;
  const std::size_t n = program.ops.size();
  const std::size_t counters =
      static_cast<std::size_t>(program.ranks) * static_cast<std::size_t>(program.counters);
  facts.valid.assign(n, 0);
  facts.event_record.assign(
      static_cast<std::size_t>(program.ranks) * static_cast<std::size_t>(program.events), -1);
  auto event_of = [&](const Op& op) {
    return static_cast<std::size_t>(op.rank) * static_cast<std::size_t>(program.events) +
           static_cast<std::size_t>(op.event);
  };
  std::vector<std::int64_t> total(counters, 0);

  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = program.ops[i];
    const int id = static_cast<int>(i);
    std::string why = malformed(program, table, op);
    if (why.empty() && op.kind == OpKind::kEventRecord) {
      int& record = facts.event_record[event_of(op)];
      if (record >= 0) {
        why = "event " + std::to_string(op.event) + " of rank " + std::to_string(op.rank) +
              " is already recorded by " + describe_op(program, record);
      } else {
        record = id;
      }
    }
    if (!why.empty()) {
      sink.add(error(ErrorKind::kInvalidOp, program, id, "malformed op: " + why));
      continue;
    }
    facts.valid[i] = 1;
    if (op.kind == OpKind::kSignal || op.kind == OpKind::kRailPut) {
      const std::size_t c =
          static_cast<std::size_t>(op.counter.rank) * static_cast<std::size_t>(program.counters) +
          static_cast<std::size_t>(op.counter.id);
      total[c] += op.value;
    }
  }

  for (std::size_t i = 0; i < n; ++i) {
    if (!facts.valid[i]) continue;
    const Op& op = program.ops[i];
    const int id = static_cast<int>(i);
    if (op.kind == OpKind::kWait) {
      const std::size_t c =
          static_cast<std::size_t>(op.counter.rank) * static_cast<std::size_t>(program.counters) +
          static_cast<std::size_t>(op.counter.id);
      if (op.value > total[c]) {
        sink.add(error(ErrorKind::kUnsatisfiableWait, program, id,
                       "a wait that can never be satisfied: counter " +
                           std::to_string(op.counter.id) + " on rank " +
                           std::to_string(op.counter.rank) + " must reach " +
                           std::to_string(op.value) + " but the program adds only " +
                           std::to_string(total[c]) + " to it"));
      }
    } else if (op.kind == OpKind::kEventWait) {
      if (facts.event_record[event_of(op)] < 0) {
        sink.add(error(ErrorKind::kUnsatisfiableWait, program, id,
                       "a wait that can never be satisfied: event " + std::to_string(op.event) +
                           " is never recorded on rank " + std::to_string(op.rank)));
      }
    }
  }
  return facts;
}

}  // namespace tide::exec::detail
