// RaceChecker: the happens-before checks on each op's reads_of / writes_of regions.
#include "races.hpp"

#include <algorithm>
#include <string>

namespace tide::exec::detail {
namespace {

// Adds [begin, end) to the conflict with the same kind and other op, or starts one.
template <class C>
void note(std::vector<C>& conflicts, ErrorKind kind, int other, std::int64_t begin,
          std::int64_t end) {
  for (C& c : conflicts) {
    if (c.kind == kind && c.other_op == other) {
      c.begin = std::min(c.begin, begin);
      c.end = std::max(c.end, end);
      return;
    }
  }
  conflicts.push_back(C{kind, other, begin, end});
}

}  // namespace

bool RaceChecker::written_by_zero(const Access& writer) const {
  return writer.op >= 0 && program_.ops[static_cast<std::size_t>(writer.op)].is<program::ZeroOp>();
}

RaceChecker::RaceChecker(const program::Program& program, const BufferTable& table, ErrorSink& sink)
    : program_(program), table_(table), sink_(sink) {
  shadow_.reserve(static_cast<std::size_t>(table.count()));
  for (int i = 0; i < table.count(); ++i)
    shadow_.emplace_back(table.size(i));
}

void RaceChecker::mark_input(int index, std::int64_t begin, std::int64_t end) {
  Shadow s;
  s.state = ByteState::kWritten;
  shadow_[static_cast<std::size_t>(index)].assign(begin, end, s);
}

void RaceChecker::on_complete(int op, const ClockRef& clock) {
  const program::Op& o = program_.ops[static_cast<std::size_t>(op)];
  const Access me{clock.comp, clock.seq, op};
  // reads_of lists a landing's sources first, then its output when it folds into it.
  const auto* land = o.get_if<program::LandOp>();
  const std::size_t sources = land != nullptr ? land->sources.size() : 0;
  const std::vector<program::Region> reads = program::reads_of(o);
  for (std::size_t i = 0; i < reads.size(); ++i)
    check_read(op, me, clock, reads[i], i < sources);
  const bool release = o.is<program::ReleaseOp>();
  for (const program::Region& r : program::writes_of(o))
    check_write(op, me, clock, r, release);
}

void RaceChecker::check_read(int op, const Access& me, const ClockRef& clock,
                             const program::Region& region, bool consume) {
  ShadowMap& map = shadow_[static_cast<std::size_t>(table_.index(region.buffer))];
  std::vector<Conflict> conflicts;
  for_each_run(region, [&](std::int64_t offset, std::int64_t bytes) {
    map.visit(offset, offset + bytes, [&](std::int64_t b, std::int64_t e, Shadow& s) {
      switch (s.state) {
        case ByteState::kUnwritten:
          note(conflicts, ErrorKind::kUnwrittenRead, -1, b, e);
          break;
        case ByteState::kReleased:
          note(conflicts, ErrorKind::kReleasedRead, s.writer.op, b, e);
          break;
        case ByteState::kWritten:
          if (!happens_before(s.writer, clock)) {
            note(conflicts, ErrorKind::kUnorderedRead, s.writer.op, b, e);
          } else if (consume && s.consumed_by >= 0 && s.consumed_by != op &&
                     !written_by_zero(s.writer)) {
            // A partial summed twice: stale (NOTE [stale-block zeroing]). Zeros are exempt:
            // they add nothing, and a zeroed block may stand for several waves.
            note(conflicts, ErrorKind::kConsumedRead, s.consumed_by, b, e);
          }
          if (consume) s.consumed_by = op;
          break;
      }
      auto it = std::find_if(s.readers.begin(), s.readers.end(),
                             [&](const Access& a) { return a.comp == me.comp; });
      if (it != s.readers.end()) {
        *it = me;
      } else {
        s.readers.push_back(me);
      }
    });
  });
  report(op, region, conflicts, false);
}

void RaceChecker::check_write(int op, const Access& me, const ClockRef& clock,
                              const program::Region& region, bool release) {
  ShadowMap& map = shadow_[static_cast<std::size_t>(table_.index(region.buffer))];
  std::vector<Conflict> conflicts;
  Shadow after;
  after.state = release ? ByteState::kReleased : ByteState::kWritten;
  after.writer = me;
  for_each_run(region, [&](std::int64_t offset, std::int64_t bytes) {
    map.visit(offset, offset + bytes, [&](std::int64_t b, std::int64_t e, Shadow& s) {
      for (const Access& reader : s.readers) {
        if (reader.op != op && !happens_before(reader, clock))
          note(conflicts, ErrorKind::kUnorderedWrite, reader.op, b, e);
      }
      if (s.state != ByteState::kUnwritten && s.writer.op != op && !happens_before(s.writer, clock))
        note(conflicts, ErrorKind::kUnorderedWrite, s.writer.op, b, e);
    });
    map.assign(offset, offset + bytes, after);
  });
  report(op, region, conflicts, release);
}

void RaceChecker::report(int op, const program::Region& region,
                         const std::vector<Conflict>& conflicts, bool release) {
  for (const Conflict& c : conflicts) {
    ExecError e;
    e.kind = c.kind;
    e.op = op;
    e.other_op = c.other_op;
    e.rank = program_.ops[static_cast<std::size_t>(op)].rank;
    e.buffer = region.buffer;
    e.begin = c.begin;
    e.end = c.end;
    const std::string me = describe_op(program_, op);
    const std::string bytes = describe_bytes(region.buffer, c.begin, c.end);
    const std::string other = describe_op(program_, c.other_op);
    switch (c.kind) {
      case ErrorKind::kUnwrittenRead:
        e.message = me + " reads " + bytes + ", which were never written";
        break;
      case ErrorKind::kReleasedRead:
        e.message = me + " reads " + bytes + ", released by " + other;
        break;
      case ErrorKind::kConsumedRead:
        e.message = me + " sums " + bytes + ", a partial that " + other +
                    " already summed and nothing rewrote since (a stale block)";
        break;
      case ErrorKind::kUnorderedRead:
        e.message = me + " reads " + bytes + " last written by " + other +
                    ", with no happens-before edge from that write to the read";
        break;
      default: {
        const program::Op& o = program_.ops[static_cast<std::size_t>(c.other_op)];
        const bool other_reads = [&] {
          for (const program::Region& r : program::reads_of(o))
            if (r.buffer == region.buffer) return true;
          return false;
        }();
        e.message = me + (release ? " releases " : " writes ") + bytes +
                    (other_reads ? " still to be read by " : " still being written by ") + other +
                    ", with no happens-before edge from it to this " +
                    (release ? "release" : "write");
        break;
      }
    }
    sink_.add(std::move(e));
  }
}

}  // namespace tide::exec::detail
