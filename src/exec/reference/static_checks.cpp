// Static checks (NOTE [reference execution semantics] 4): program::validate() reports
// malformed ops and waits that can never be satisfied; the reference keeps running the rest.
#include "static_checks.hpp"

#include "tide/program/validate.hpp"

namespace tide::exec::detail {

StaticFacts check_program(const program::Program& program, const BufferTable&, ErrorSink& sink) {
  StaticFacts facts;
  facts.valid.assign(program.ops.size(), 1);
  facts.event_record.assign(
      static_cast<std::size_t>(program.ranks) * static_cast<std::size_t>(program.events), -1);
  for (const program::Defect& d : program::validate(program)) {
    if (d.op < 0) {
      facts.valid.assign(program.ops.size(), 0);
      ExecError e;
      e.kind = ErrorKind::kInvalidOp;
      e.message = "malformed program: " + d.what;
      sink.add(std::move(e));
      continue;
    }
    ExecError e;
    e.op = d.op;
    e.rank = program.ops[static_cast<std::size_t>(d.op)].rank;
    if (d.kind == program::DefectKind::kMalformed) {
      facts.valid[static_cast<std::size_t>(d.op)] = 0;
      e.kind = ErrorKind::kInvalidOp;
      e.message = describe_op(program, d.op) + ": malformed op: " + d.what;
    } else {
      e.kind = ErrorKind::kUnsatisfiableWait;
      e.message = describe_op(program, d.op) + ": " + d.what;
    }
    sink.add(std::move(e));
  }
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const program::Op& op = program.ops[i];
    const auto* record = op.get_if<program::EventRecordOp>();
    if (facts.valid[i] && record != nullptr) {
      facts.event_record[static_cast<std::size_t>(op.rank) *
                             static_cast<std::size_t>(program.events) +
                         static_cast<std::size_t>(record->event)] = static_cast<int>(i);
    }
  }
  return facts;
}

}  // namespace tide::exec::detail
