// NOTE [call sequences]: templates of a group's open-ended call sequence.
#include "tide/program/call_sequence.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

#include "tide/core/error.hpp"
#include "tide/program/validate.hpp"

namespace tide::program {
namespace {

constexpr std::int64_t kAlign = 256;  // every area on a 256-byte boundary
std::int64_t aligned(std::int64_t x) {
  return (x + kAlign - 1) / kAlign * kAlign;
}

// A call as its builder made it, with the counter and event ids it was given.
struct BuiltCall {
  Program program;
  int counter_base = 0;
  int event_base = 0;
};

// A call with physical counters, relative thresholds and (age, local) events.
struct NormalCall {
  Program program;
  std::vector<int> event_age;
};

// Keys are built with std::to_string rather than iostreams: this code also runs inside the
// Python module, where the process's libstdc++ may be older than the one it was built with,
// and iostream locale facets are where two libstdc++ versions disagree.
void append(std::string& out, std::int64_t v, char sep) {
  out += std::to_string(v);
  out += sep;
}

void append_region(std::string& out, const Region& r) {
  append(out, r.buffer.rank, ':');
  append(out, static_cast<int>(r.buffer.space), ':');
  append(out, r.buffer.index, '@');
  append(out, r.offset, '/');
  append(out, r.width, '/');
  append(out, r.pitch, '/');
  append(out, r.rows, ';');
}

// Everything about an op but its label (labels carry bank and wave numbers only for people).
std::string op_key(const Op& op, int age) {
  std::string out;
  append(out, static_cast<int>(op.kind()), ' ');
  append(out, op.rank, ' ');
  append(out, op.stream, ' ');
  append(out, op.inside_kernel, 'r');
  for_each_region(op, [&](const Region& r) { append_region(out, r); });
  std::visit(
      [&](const auto& p) {
        if constexpr (requires { p.segments; }) {
          out += 'g';
          for (const SumSegment& s : p.segments) {
            append(out, s.row, ',');
            append(out, s.out_elem, ',');
            append(out, s.param, ',');
            append(out, s.src_elem, ',');
            append(out, s.elems, ',');
            append(out, static_cast<int>(s.space), ';');
          }
        }
        if constexpr (requires { p.in_dtype; }) append(out, static_cast<int>(p.in_dtype), ' ');
        if constexpr (requires { p.alpha; }) {
          std::uint32_t alpha_bits = 0;
          static_assert(sizeof alpha_bits == sizeof p.alpha);
          std::memcpy(&alpha_bits, &p.alpha, sizeof alpha_bits);
          append(out, alpha_bits, ' ');
        }
        if constexpr (requires { p.accumulate; }) append(out, p.accumulate, ' ');
        if constexpr (requires { p.wave_index; }) append(out, p.wave_index, ' ');
        if constexpr (requires { p.ctas; }) append(out, p.ctas, ' ');
        if constexpr (requires { p.counter; }) {
          append(out, p.counter.rank, ':');
          append(out, p.counter.id, ' ');
        }
        if constexpr (requires { p.value; }) append(out, p.value, ' ');
        if constexpr (requires { p.network_round; }) append(out, p.network_round, ' ');
        if constexpr (requires { p.event; }) append(out, p.event, '/');
      },
      op.payload);
  append(out, age, ';');
  return out;
}

bool same_call(const NormalCall& a, const NormalCall& b) {
  if (a.program.stream_names != b.program.stream_names) return false;
  if (a.program.ops.size() != b.program.ops.size()) return false;
  for (std::size_t i = 0; i < a.program.ops.size(); ++i) {
    if (op_key(a.program.ops[i], a.event_age[i]) != op_key(b.program.ops[i], b.event_age[i]))
      return false;
  }
  return true;
}

std::size_t slot(int ranks_counters, int rank, int id) {
  return static_cast<std::size_t>(rank) * static_cast<std::size_t>(ranks_counters) +
         static_cast<std::size_t>(id);
}

// Normalises calls 0 .. calls.size() - 1 for period `period`; empty when some reference does
// not fit it (a private counter or event older than the period allows).
std::vector<NormalCall> normalise(const std::vector<BuiltCall>& calls, int first_private,
                                  int private_per_call, int events_per_call, int period) {
  const int ranks = calls.front().program.ranks;
  const int counters = first_private + period * private_per_call;
  auto physical = [&](int id, int call, bool* ok) {
    if (id < first_private) return id;
    const int owner = (id - first_private) / private_per_call;
    if (owner > call || call - owner >= period) *ok = false;
    return first_private + (owner % period) * private_per_call +
           (id - first_private) % private_per_call;
  };
  std::vector<std::int64_t> totals(static_cast<std::size_t>(ranks) * counters, 0);
  std::vector<std::vector<std::int64_t>> before;  // per call: totals before it
  std::vector<NormalCall> out;
  for (std::size_t e = 0; e < calls.size(); ++e) {
    before.push_back(totals);
    const int call = static_cast<int>(e);
    NormalCall n;
    n.program = calls[e].program;
    n.program.counters = counters;
    n.program.events = events_per_call;
    n.event_age.assign(n.program.ops.size(), 0);
    bool ok = true;
    for (std::size_t i = 0; i < n.program.ops.size(); ++i) {
      Op& op = n.program.ops[i];
      if (Counter* counter = counter_of(op)) {
        const int builder_id = counter->id;
        counter->id = physical(builder_id, call, &ok);
        if (!ok) return {};
        if (auto* wait = op.get_if<WaitOp>()) {
          // Builder thresholds count from 0 on a fresh private counter, and from the start of
          // the sequence on a shared one.
          std::int64_t absolute = wait->value;
          if (builder_id >= first_private) {
            const int owner = (builder_id - first_private) / private_per_call;
            absolute +=
                before[static_cast<std::size_t>(owner)][slot(counters, counter->rank, counter->id)];
          }
          wait->value = absolute - totals[slot(counters, counter->rank, counter->id)];
        }
      }
      if (int* event = event_of(op)) {
        const int owner = (*event - calls.front().event_base) / events_per_call;
        const int local = (*event - calls.front().event_base) % events_per_call;
        if (owner > call || (op.is<EventRecordOp>() && owner != call)) return {};
        n.event_age[i] = call - owner;
        *event = local;
      }
    }
    for (const Op& op : calls[e].program.ops) {
      const auto add = addition_of(op);
      if (!add) continue;
      bool ignored = true;
      totals[slot(counters, add->counter.rank, physical(add->counter.id, call, &ignored))] +=
          add->value;
    }
    out.push_back(std::move(n));
  }
  return out;
}

CallTemplate make_template(NormalCall&& call, const BufferSizes& sizes) {
  CallTemplate t;
  t.program = std::move(call.program);
  t.program.buffers.assign(static_cast<std::size_t>(t.program.ranks), sizes);
  t.event_age = std::move(call.event_age);
  // NOTE [program validity]: earlier calls' additions and records are not in a template.
  ValidateOptions checks;
  checks.whole_program = false;
  if (const std::vector<Defect> defects = validate(t.program, checks); !defects.empty()) {
    throw InternalError("call template: " + describe_op(t.program, defects.front().op) + ": " +
                        defects.front().what);
  }
  t.additions = counter_additions(t.program);
  // The legal order, with earlier calls' events as recorded and their additions as made: an
  // event wait of age a > 0 gets id events_per_call * a + local (recorded from the start), and
  // relative thresholds need only this call's additions.
  Program sim = t.program;
  int max_age = 0;
  for (int age : t.event_age)
    max_age = std::max(max_age, age);
  sim.events = t.program.events * (max_age + 1);
  for (std::size_t i = 0; i < sim.ops.size(); ++i) {
    if (int* event = event_of(sim.ops[i])) *event += t.program.events * t.event_age[i];
  }
  SyncStart start;
  start.recorded_events_from = t.program.events;
  t.order = legal_order(sim, start);
  if (!t.order.unplaced.empty()) {
    throw InternalError("call template: op '" +
                        t.program.ops[static_cast<std::size_t>(t.order.unplaced.front())].label +
                        "' has no legal place");
  }
  return t;
}

}  // namespace

CallSequence make_call_sequence(const CallBuilder& build, int first_private_counter,
                                const BufferSizes& sizes, const SequenceOptions& options) {
  if (options.max_period < 1 || options.warmup < 0) {
    throw InvalidArgument("call sequence: max_period must be >= 1 and warmup >= 0");
  }
  const int total_calls = options.warmup + 3 * options.max_period;
  std::vector<BuiltCall> calls;
  int next_counter = first_private_counter, next_event = 0;
  int private_per_call = -1, events_per_call = -1;
  for (int e = 0; e < total_calls; ++e) {
    CallPlacement at;
    at.counter_base = next_counter;
    at.event_base = next_event;
    BuiltCall c{build(e, at), next_counter, next_event};
    const int privates = c.program.counters - next_counter;
    const int events = c.program.events - next_event;
    if ((private_per_call >= 0 && privates != private_per_call) ||
        (events_per_call >= 0 && events != events_per_call) || privates < 0 || events < 0) {
      throw Unsupported("calls of this group use varying numbers of counters or events");
    }
    private_per_call = privates;
    events_per_call = events;
    next_counter = c.program.counters;
    next_event = c.program.events;
    calls.push_back(std::move(c));
  }
  for (int period = 1; period <= options.max_period; ++period) {
    const int first = (options.warmup + period - 1) / period * period;
    std::vector<NormalCall> normal =
        normalise(calls, first_private_counter, private_per_call, events_per_call, period);
    if (normal.empty()) continue;
    bool periodic = true;
    for (int e = first + period; e < first + 2 * period && periodic; ++e) {
      periodic = same_call(normal[static_cast<std::size_t>(e)],
                           normal[static_cast<std::size_t>(e - period)]);
    }
    if (!periodic) continue;
    CallSequence s;
    s.period = period;
    s.counters = first_private_counter + period * private_per_call;
    s.events_per_call = events_per_call;
    for (int j = 0; j < period; ++j) {
      s.templates.push_back(
          make_template(std::move(normal[static_cast<std::size_t>(first + j)]), sizes));
      for (int age : s.templates.back().event_age)
        s.max_event_age = std::max(s.max_event_age, age);
    }
    return s;
  }
  throw Unsupported("this group's calls do not repeat with a period of at most " +
                    std::to_string(options.max_period) + " calls");
}

AgSequenceAreas ag_sequence_areas(const AgPlan& plan, std::int64_t at) {
  AgSequenceAreas a;
  a.resident = at;
  if (!plan.options().shard_in_stage()) at = aligned(at + plan.layout().shard_bytes());
  a.stage[0] = at;
  a.stage[1] = aligned(a.stage[0] + plan.stage_bytes());
  a.landing = aligned(a.stage[1] + plan.stage_bytes());
  a.bytes = aligned(a.landing + plan.layout().unsharded_bytes());
  return a;
}

CallSequence ag_call_sequence(const AgPlan& plan, const AgSequenceAreas& areas,
                              const SequenceOptions& options, Fault fault) {
  const int rounds = static_cast<int>(plan.rounds().size());
  // One AgShared per receive stage, each with its own stage-credit counters (as in a step).
  std::vector<AgShared> stages(2);
  stages[0].stage_credit = 0;
  stages[1].stage_credit = rounds;
  CallBuilder build = [&plan, &areas, stages, fault](int call, const CallPlacement& at) mutable {
    AgArenaLayout layout;
    layout.resident = areas.resident;
    layout.stage = areas.stage[call % 2];
    layout.landing = areas.landing;
    layout.arena_bytes = areas.bytes;
    AgProgramOptions o;
    o.consumer = false;  // the caller's stream orders the landing's users (runtime)
    o.fault = fault;
    // One node casts or copies into the landing itself (NOTE [one-node TIDE-AG]): every call
    // follows the previous one's scatter, so the calls share one AgShared.
    const int stage = plan.one_node() ? 0 : call % 2;
    return build_ag_call(plan, o, at, layout, stages[static_cast<std::size_t>(stage)]);
  };
  BufferSizes sizes;
  sizes.arena_bytes = areas.bytes;
  sizes.tensor_bytes = ag_input_bytes(plan);
  return make_call_sequence(build, 2 * rounds, sizes, options);
}

CallSequence rs_call_sequence(const RsPlan& plan, const RsProgramOptions& rs,
                              const RsArenaLayout& areas, const SequenceOptions& options) {
  RsShared shared = rs_shared_state({&plan}, 0, rs.landing);
  shared.areas = areas;
  const int first_private = shared.landings_done + 1;
  CallBuilder build = [&plan, rs, shared](int, const CallPlacement& at) mutable {
    return build_rs_call(plan, rs, at, shared);
  };
  const GroupLayout& layout = plan.layout();
  BufferSizes sizes;
  sizes.arena_bytes = areas.arena_bytes;
  for (const ParamLayout& pl : layout.params())
    sizes.tensor_bytes.push_back(pl.rows * pl.cols * item_bytes(layout.grad_dtype()));
  sizes.output_bytes = {layout.fp32_shard_bytes()};
  return make_call_sequence(build, first_private, sizes, options);
}

Program expand_calls(const CallSequence& sequence, int calls) {
  if (calls < 1) throw InvalidArgument("expand_calls: at least one call");
  const Program& first = sequence.templates.front().program;
  Program out;
  out.ranks = first.ranks;
  out.stream_names = first.stream_names;
  out.counters = sequence.counters;
  out.events = sequence.events_per_call * calls;
  out.buffers.resize(static_cast<std::size_t>(first.ranks));
  const BufferSizes& one = first.buffers.front();
  const int tensors = static_cast<int>(one.tensor_bytes.size());
  for (BufferSizes& b : out.buffers) {
    b.arena_bytes = one.arena_bytes;
    for (int e = 0; e < calls; ++e) {
      b.tensor_bytes.insert(b.tensor_bytes.end(), one.tensor_bytes.begin(), one.tensor_bytes.end());
      b.output_bytes.insert(b.output_bytes.end(), one.output_bytes.begin(), one.output_bytes.end());
    }
  }
  std::vector<std::int64_t> totals(
      static_cast<std::size_t>(out.ranks) * static_cast<std::size_t>(out.counters), 0);
  auto rebase = [&](Region& r, int e) {
    if (r.buffer.space == Space::kTensor) r.buffer.index += e * tensors;
    if (r.buffer.space == Space::kOutput) r.buffer.index += e;
  };
  for (int e = 0; e < calls; ++e) {
    const CallTemplate& t = sequence.for_call(e);
    if (t.program.stream_names != out.stream_names) {
      throw InternalError("expand_calls: templates name their streams differently");
    }
    for (std::size_t i = 0; i < t.program.ops.size(); ++i) {
      Op op = t.program.ops[i];
      if (auto* wait = op.get_if<WaitOp>())
        wait->value += totals[slot(out.counters, op.rank, wait->counter.id)];
      if (int* event = event_of(op)) {
        const int owner = e - t.event_age[i];
        if (owner < 0) continue;  // waits for a call before the first: nothing to order
        *event += owner * sequence.events_per_call;
      }
      for_each_region(op, [&](Region& r) { rebase(r, e); });
      if (auto* sum = op.get_if<SumOp>()) {
        for (SumSegment& s : sum->segments)
          if (s.space == Space::kTensor) s.param += e * tensors;
      }
      out.ops.push_back(std::move(op));
    }
    for (std::size_t k = 0; k < totals.size(); ++k)
      totals[k] += t.additions[k];
  }
  return out;
}

}  // namespace tide::program
