// Static checks (NOTE [reference execution semantics] 4): program::validate() reports
// malformed ops and waits that can never be satisfied; the reference keeps running the rest.
#include "static_checks.hpp"

#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "tide/program/validate.hpp"

namespace tide::exec::detail {
namespace {

// NOTE [call identities]: a wait in call i of rank r on a counter that a peer q adds to, where
// q's call i is another call, is a call-order mismatch. One error per (r, i, q).
void check_call_order(const program::Program& program, ErrorSink& sink) {
  if (program.calls.empty()) return;
  const auto ranks = static_cast<std::size_t>(program.ranks);
  if (program.calls.size() != ranks) {
    ExecError e;
    e.kind = ErrorKind::kCallOrderMismatch;
    e.message = "malformed program: call identities for " + std::to_string(program.calls.size()) +
                " ranks, the program has " + std::to_string(program.ranks);
    sink.add(std::move(e));
    return;
  }
  // (rank, counter) -> the other ranks that add to it.
  std::unordered_map<std::int64_t, std::set<int>> adders;
  auto key = [&](const program::Counter& c) {
    return static_cast<std::int64_t>(c.rank) * (std::int64_t{1} << 32) + c.id;
  };
  for (const program::Op& op : program.ops) {
    const std::optional<program::CounterUse> add = program::addition_of(op);
    if (add && add->counter.rank != op.rank) adders[key(add->counter)].insert(op.rank);
  }
  std::set<std::tuple<int, int, int>> reported;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const program::Op& op = program.ops[i];
    const auto* wait = op.get_if<program::WaitOp>();
    if (wait == nullptr || op.call < 0 || op.rank < 0 ||
        static_cast<std::size_t>(op.rank) >= ranks) {
      continue;
    }
    const auto& mine = program.calls[static_cast<std::size_t>(op.rank)];
    if (static_cast<std::size_t>(op.call) >= mine.size()) continue;
    const program::CallIdentity& call = mine[static_cast<std::size_t>(op.call)];
    const auto found = adders.find(key(wait->counter));
    if (found == adders.end()) continue;
    for (int peer : found->second) {
      if (peer < 0 || static_cast<std::size_t>(peer) >= ranks) continue;
      const auto& theirs = program.calls[static_cast<std::size_t>(peer)];
      const bool has = static_cast<std::size_t>(op.call) < theirs.size();
      if (has && theirs[static_cast<std::size_t>(op.call)].same_call(call)) continue;
      if (!reported.insert({op.rank, op.call, peer}).second) continue;
      ExecError e;
      e.kind = ErrorKind::kCallOrderMismatch;
      e.op = static_cast<int>(i);
      e.rank = op.rank;
      e.message = "call-order mismatch: " + describe_op(program, static_cast<int>(i)) +
                  " waits in call " + std::to_string(op.call) + ", " +
                  program::describe_call(call) + ", on counter " +
                  std::to_string(wait->counter.id) + ", which rank " + std::to_string(peer) +
                  " adds to; rank " + std::to_string(peer) + " issues " +
                  (has ? program::describe_call(theirs[static_cast<std::size_t>(op.call)])
                       : std::string("no call")) +
                  " as call " + std::to_string(op.call);
      sink.add(std::move(e));
    }
  }
}

}  // namespace

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
  check_call_order(program, sink);
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
