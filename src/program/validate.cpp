// NOTE [program validity]: the one check of a program's ops that every executor relies on.
#include "tide/program/validate.hpp"

#include <string>
#include <variant>

namespace tide::program {
namespace {

std::string space_name(Space s) {
  return s == Space::kArena ? "arena" : s == Space::kTensor ? "tensor" : "output";
}

std::string describe(const Region& r) {
  return "rank " + std::to_string(r.buffer.rank) + " " + space_name(r.buffer.space) + " " +
         std::to_string(r.buffer.index) + " [offset " + std::to_string(r.offset) + ", " +
         std::to_string(r.rows) + " x " + std::to_string(r.width) + " bytes, pitch " +
         std::to_string(r.pitch) + "]";
}

class Checker {
 public:
  Checker(const Program& p, std::vector<Defect>& out) : p_(p), out_(out) {}

  // Why `op` is malformed, or "".
  std::string malformed(const Op& op) const {
    if (op.rank < 0 || op.rank >= p_.ranks) return "its rank is outside [0, ranks)";
    if (op.stream < 0 || op.stream >= static_cast<int>(p_.stream_names.size()))
      return "its stream is not one of the program's stream names";
    return std::visit([&](const auto& payload) { return check(op, payload); }, op.payload);
  }

 private:
  std::string check(const Op&, const CopyOp& copy) const { return copies(copy.copies); }
  std::string check(const Op&, const RailPutOp& put) const {
    if (std::string why = copies(put.copies); !why.empty()) return why;
    return addition(put.counter, put.value);
  }
  std::string check(const Op&, const SignalOp& signal) const {
    return addition(signal.counter, signal.value);
  }
  std::string check(const Op& op, const WaitOp& wait) const {
    if (std::string why = counter(wait.counter); !why.empty()) return why;
    if (wait.counter.rank != op.rank) return "it waits on another rank's counter";
    return "";
  }
  std::string check(const Op&, const EventRecordOp& record) const { return event(record.event); }
  std::string check(const Op&, const EventWaitOp& wait) const { return event(wait.event); }
  std::string check(const Op& op, const SumOp& sum) const { return this->sum(op, sum); }
  std::string check(const Op&, const LandOp& land) const { return this->land(land); }
  std::string check(const Op&, const CastOp& cast) const { return this->cast(cast); }
  std::string check(const Op&, const ZeroOp& zero) const { return region(zero.dst, "dst"); }
  std::string check(const Op&, const ReleaseOp& release) const {
    return region(release.dst, "dst");
  }

  std::string region(const Region& r, const std::string& what) const {
    const std::int64_t size = buffer_size(p_, r.buffer);
    if (size < 0) return what + " names a buffer the program does not have: " + describe(r);
    if (r.offset < 0 || r.width < 0 || r.rows < 1)
      return what + " has a negative offset or width, or no rows: " + describe(r);
    if (r.rows > 1 && r.pitch < r.width) return what + " has pitch < width: " + describe(r);
    const std::int64_t end = r.offset + (r.rows - 1) * r.pitch + r.width;
    if (end > size) {
      return what + " ends at byte " + std::to_string(end) + " past the buffer's " +
             std::to_string(size) + " bytes: " + describe(r);
    }
    return "";
  }

  std::string event(int id) const {
    if (id < 0 || id >= p_.events)
      return "event id " + std::to_string(id) + " outside [0, " + std::to_string(p_.events) + ")";
    return "";
  }

  std::string counter(const Counter& c) const {
    if (c.rank < 0 || c.rank >= p_.ranks)
      return "counter rank " + std::to_string(c.rank) + " outside [0, ranks)";
    if (c.id < 0 || c.id >= p_.counters)
      return "counter id " + std::to_string(c.id) + " outside [0, " + std::to_string(p_.counters) +
             ")";
    return "";
  }

  std::string addition(const Counter& c, std::int64_t value) const {
    if (std::string why = counter(c); !why.empty()) return why;
    if (value < 0) return "negative counter addition " + std::to_string(value);
    return "";
  }

  std::string copies(const std::vector<CopyDescriptor>& copies) const {
    for (std::size_t k = 0; k < copies.size(); ++k) {
      const CopyDescriptor& c = copies[k];
      const std::string what = "copy " + std::to_string(k);
      if (std::string why = region(c.src, what + " source"); !why.empty()) return why;
      if (std::string why = region(c.dst, what + " destination"); !why.empty()) return why;
      if (c.src.width != c.dst.width || c.src.rows != c.dst.rows) {
        return what + ": source and destination differ in shape: " + describe(c.src) + " vs " +
               describe(c.dst);
      }
    }
    return "";
  }

  std::string sum(const Op& op, const SumOp& sum) const {
    if (std::string why = region(sum.dst, "dst"); !why.empty()) return why;
    if (sum.dst.width % 4 != 0) return "dst is not fp32 rows: " + describe(sum.dst);
    const std::int64_t width = sum.dst.width / 4;
    if (!is_reduction_dtype(sum.in_dtype)) {  // NOTE [1-byte all-gather items]
      return "the sum reads " + std::string(dtype_name(sum.in_dtype)) +
             " items; a sum reads bf16 or fp32";
    }
    const std::int64_t item = item_bytes(sum.in_dtype);
    for (std::size_t k = 0; k < sum.staged.size(); ++k) {
      const Region& s = sum.staged[k];
      if (std::string why = region(s, "staged " + std::to_string(k)); !why.empty()) return why;
      if (s.rows != sum.dst.rows || s.width != width * item)
        return "staged " + std::to_string(k) +
               " does not have dst's rows x elements: " + describe(s);
    }
    for (std::size_t k = 0; k < sum.segments.size(); ++k) {
      const SumSegment& s = sum.segments[k];
      const std::string what = "segment " + std::to_string(k);
      if (s.row < 0 || s.row >= sum.dst.rows || s.out_elem < 0 || s.elems < 0 ||
          s.out_elem + s.elems > width)
        return what + " lies outside dst";
      if (s.space != Space::kTensor && s.space != Space::kArena)
        return what + ": an own contribution lies in a gradient tensor or the arena";
      const std::int64_t size = buffer_size(p_, s.source(op.rank));
      if (size < 0) return what + ": tensor " + std::to_string(s.param) + " does not exist";
      if (s.src_elem < 0 || (s.src_elem + s.elems) * item > size)
        return what + ": elements outside tensor " + std::to_string(s.param);
    }
    return "";
  }

  std::string land(const LandOp& land) const {
    if (std::string why = region(land.dst, "dst"); !why.empty()) return why;
    if (land.dst.width % 4 != 0) return "dst is not fp32: " + describe(land.dst);
    if (land.sources.empty()) return "a landing needs at least one source";
    for (std::size_t k = 0; k < land.sources.size(); ++k) {
      const Region& s = land.sources[k];
      if (std::string why = region(s, "source " + std::to_string(k)); !why.empty()) return why;
      if (s.bytes() != land.dst.bytes() || s.width % 4 != 0)
        return "source " + std::to_string(k) +
               " is not an fp32 range of dst's length: " + describe(s);
    }
    if (land.wave_index < 0) return "negative wave index";
    return "";
  }

  std::string cast(const CastOp& cast) const {
    if (std::string why = region(cast.dst, "dst"); !why.empty()) return why;
    const Region& s = cast.src;
    if (std::string why = region(s, "source"); !why.empty()) return why;
    if (cast.dst.width % 2 != 0 || s.width % 4 != 0 || s.bytes() != 2 * cast.dst.bytes())
      return "needs an fp32 source of twice the bytes of its bf16 dst: " + describe(s) + " -> " +
             describe(cast.dst);
    return "";
  }

  const Program& p_;
  std::vector<Defect>& out_;
};

}  // namespace

std::int64_t buffer_size(const Program& program, const Buffer& b) {
  if (b.rank < 0 || b.rank >= program.ranks ||
      static_cast<std::size_t>(b.rank) >= program.buffers.size()) {
    return -1;
  }
  const BufferSizes& s = program.buffers[static_cast<std::size_t>(b.rank)];
  switch (b.space) {
    case Space::kArena:
      return b.index == 0 ? s.arena_bytes : -1;
    case Space::kTensor:
      return b.index >= 0 && b.index < static_cast<int>(s.tensor_bytes.size())
                 ? s.tensor_bytes[static_cast<std::size_t>(b.index)]
                 : -1;
    case Space::kOutput:
      if (b.index == 0 && s.output_bytes.empty()) return 0;
      return b.index >= 0 && b.index < static_cast<int>(s.output_bytes.size())
                 ? s.output_bytes[static_cast<std::size_t>(b.index)]
                 : -1;
  }
  return -1;
}

std::string describe_op(const Program& program, int op) {
  if (op < 0 || op >= static_cast<int>(program.ops.size())) return "the caller's input";
  const Op& o = program.ops[static_cast<std::size_t>(op)];
  std::string stream = std::to_string(o.stream);
  if (o.stream >= 0 && o.stream < static_cast<int>(program.stream_names.size()))
    stream = "'" + program.stream_names[static_cast<std::size_t>(o.stream)] + "'";
  return "'" + o.label + "' (" + std::string(op_kind_name(o.kind())) + ", rank " +
         std::to_string(o.rank) + ", stream " + stream + ", op #" + std::to_string(op) + ")";
}

std::vector<Defect> validate(const Program& program, const ValidateOptions& options) {
  std::vector<Defect> out;
  if (program.ranks < 1) {
    out.push_back({DefectKind::kMalformed, -1, "the program has no ranks"});
    return out;
  }
  if (static_cast<int>(program.buffers.size()) != program.ranks) {
    out.push_back({DefectKind::kMalformed, -1,
                   "the program sizes buffers for " + std::to_string(program.buffers.size()) +
                       " ranks, not " + std::to_string(program.ranks)});
    return out;
  }
  if (program.counters < 0 || program.events < 0) {
    out.push_back({DefectKind::kMalformed, -1, "negative counter or event count"});
    return out;
  }
  const Checker checker(program, out);
  const auto slot = [&](int rank, int id, int per_rank) {
    return static_cast<std::size_t>(rank) * static_cast<std::size_t>(per_rank) +
           static_cast<std::size_t>(id);
  };
  std::vector<int> recorded(slot(program.ranks, 0, program.events), -1);
  std::vector<std::int64_t> total(slot(program.ranks, 0, program.counters), 0);
  std::vector<bool> valid(program.ops.size(), false);
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Op& op = program.ops[i];
    std::string why = checker.malformed(op);
    if (const auto* record = op.get_if<EventRecordOp>(); why.empty() && record != nullptr) {
      int& at = recorded[slot(op.rank, record->event, program.events)];
      if (at >= 0) {
        why = "event " + std::to_string(record->event) + " of rank " + std::to_string(op.rank) +
              " is already recorded by " + describe_op(program, at) + "; record it once";
      } else {
        at = static_cast<int>(i);
      }
    }
    if (!why.empty()) {
      out.push_back({DefectKind::kMalformed, static_cast<int>(i), std::move(why)});
      continue;
    }
    valid[i] = true;
    if (const auto add = addition_of(op))
      total[slot(add->counter.rank, add->counter.id, program.counters)] += add->value;
  }
  if (!options.whole_program && !options.event_records) return out;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    if (!valid[i]) continue;
    const Op& op = program.ops[i];
    const auto* wait = op.get_if<WaitOp>();
    const auto* event_wait = op.get_if<EventWaitOp>();
    if (wait != nullptr && options.whole_program) {
      const std::int64_t adds = total[slot(wait->counter.rank, wait->counter.id, program.counters)];
      if (wait->value > adds) {
        out.push_back({DefectKind::kUnsatisfiableWait, static_cast<int>(i),
                       "a wait that can never be satisfied: counter " +
                           std::to_string(wait->counter.id) + " on rank " +
                           std::to_string(wait->counter.rank) + " must reach " +
                           std::to_string(wait->value) + " but the program adds only " +
                           std::to_string(adds) + " to it"});
      }
    } else if (event_wait != nullptr &&
               recorded[slot(op.rank, event_wait->event, program.events)] < 0) {
      out.push_back({DefectKind::kUnsatisfiableWait, static_cast<int>(i),
                     "a wait that can never be satisfied: event " +
                         std::to_string(event_wait->event) + " is never recorded on rank " +
                         std::to_string(op.rank)});
    }
  }
  return out;
}

}  // namespace tide::program
