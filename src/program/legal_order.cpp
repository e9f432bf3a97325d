// NOTE [legal order]: the host simulation of counters and events.
#include "tide/program/legal_order.hpp"

#include <deque>
#include <map>
#include <utility>

#include "tide/core/error.hpp"

namespace tide::program {
namespace {

std::size_t counter_slot(const Program& program, const Counter& c) {
  if (c.rank < 0 || c.rank >= program.ranks || c.id < 0 || c.id >= program.counters) {
    throw InvalidArgument("counter (rank " + std::to_string(c.rank) + ", id " +
                          std::to_string(c.id) + ") lies outside the program's " +
                          std::to_string(program.ranks) + " ranks x " +
                          std::to_string(program.counters) + " counters");
  }
  return static_cast<std::size_t>(c.rank) * static_cast<std::size_t>(program.counters) +
         static_cast<std::size_t>(c.id);
}

std::size_t event_slot(const Program& program, const Op& op, int event) {
  if (event < 0 || event >= program.events) {
    throw InvalidArgument("event id " + std::to_string(event) + " of op '" + op.label +
                          "' lies outside the program's " + std::to_string(program.events) +
                          " events");
  }
  return static_cast<std::size_t>(op.rank) * static_cast<std::size_t>(program.events) +
         static_cast<std::size_t>(event);
}

}  // namespace

std::vector<std::int64_t> counter_additions(const Program& program) {
  std::vector<std::int64_t> total(
      static_cast<std::size_t>(program.ranks) * static_cast<std::size_t>(program.counters), 0);
  for (const Op& op : program.ops) {
    if (const auto add = addition_of(op)) total[counter_slot(program, add->counter)] += add->value;
  }
  return total;
}

LegalOrder legal_order(const Program& program, const SyncStart& start) {
  const std::size_t n = program.ops.size();
  std::map<std::pair<int, int>, std::size_t> queue_of;
  std::vector<std::deque<int>> heads;
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = program.ops[i];
    const auto [it, fresh] = queue_of.emplace(std::pair{op.rank, op.stream}, heads.size());
    if (fresh) heads.emplace_back();
    heads[it->second].push_back(static_cast<int>(i));
  }
  std::vector<std::int64_t> total = start.counter_totals;
  total.resize(static_cast<std::size_t>(program.ranks) * static_cast<std::size_t>(program.counters),
               0);
  std::vector<bool> recorded(
      static_cast<std::size_t>(program.ranks) * static_cast<std::size_t>(program.events), false);
  std::vector<bool> placed(n, false);
  LegalOrder out;
  out.order.reserve(n);
  for (bool moved = true; moved;) {
    moved = false;
    for (auto& q : heads) {
      while (!q.empty()) {
        const Op& op = program.ops[static_cast<std::size_t>(q.front())];
        bool ready = true;
        if (const auto* wait = op.get_if<WaitOp>()) {
          ready = total[counter_slot(program, wait->counter)] >= wait->value;
        } else if (const auto* event_wait = op.get_if<EventWaitOp>()) {
          ready = event_wait->event >= start.recorded_events_from ||
                  recorded[event_slot(program, op, event_wait->event)];
        }
        if (!ready) break;
        if (const auto add = addition_of(op))
          total[counter_slot(program, add->counter)] += add->value;
        if (const auto* record = op.get_if<EventRecordOp>())
          recorded[event_slot(program, op, record->event)] = true;
        placed[static_cast<std::size_t>(q.front())] = true;
        out.order.push_back(q.front());
        q.pop_front();
        moved = true;
      }
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!placed[i]) out.unplaced.push_back(static_cast<int>(i));
  }
  return out;
}

}  // namespace tide::program
