// The discrete-event loop. Each (rank, stream) runs its ops in order; an op starts once its
// predecessor completed, its host issued it, and (waits) its condition holds. Completions
// are popped in (time, seeded tie-break) order; after each, newly startable stream heads
// start in a seeded order. With data, each completion is race-checked and then applied.
// On a virtual-fabric machine (NOTE [virtual-fabric machine]) one host thread issues every
// rank's ops in a legal order, streams share hardware queues, and transfers and kernels are
// flows sharing one GPU's HBM and copy engines: their completions are recomputed whenever a
// flow starts or ends.
#include "scheduler.hpp"

#include <algorithm>
#include <memory>
#include <queue>
#include <string>
#include <utility>

#include "clock.hpp"
#include "races.hpp"
#include "semantics.hpp"
#include "tide/core/dtype.hpp"
#include "tide/program/legal_order.hpp"

namespace tide::exec::detail {
namespace {

using program::Op;
using program::OpKind;

// SplitMix64: a small generator whose sequence is the same on every platform.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  std::uint64_t state_;
};

struct QueueEvent {
  double time = 0;
  std::uint64_t tie = 0;
  std::int64_t order = 0;
  bool wake = false;  // a stream's head becomes issued (id = stream), else a completion (op)
  bool flow = false;  // the shared GPU's next flow event (id = flow generation)
  int id = 0;
  bool operator>(const QueueEvent& o) const {
    return std::tie(time, tie, order) > std::tie(o.time, o.tie, o.order);
  }
};

struct Stream {
  std::vector<int> ops;
  std::size_t next = 0;
  bool running = false;
  bool wake_pending = false;
  double head_since = 0;           // when the current head's predecessor completed
  std::shared_ptr<ClockVec> base;  // changed in place when no ClockRef shares it
  std::uint64_t version = 0;       // renewed whenever base changes
  std::uint32_t seq = 0;
};

// NOTE [counter clocks]
// A wait with threshold v is ordered after the additions, in landing order, up to the one
// that first made the counter >= v. Every wait's threshold is known before the run, so each
// counter keeps the join of its additions so far (`running`) only until its largest
// threshold is crossed, and snapshots it when an addition crosses a threshold; the waits
// with that threshold join the snapshot, which is dropped after the last of them started.
// Memory stays bounded by the thresholds in flight, not by the number of additions.
struct Threshold {
  std::int64_t value = 0;
  int waits_left = 0;                        // waits with this threshold not yet started
  std::shared_ptr<const ClockVec> snapshot;  // join of the additions that first reached it
};

struct CounterState {
  std::int64_t value = 0;
  // Counters that a network-round wait reads keep when each value was reached (NOTE [cost
  // model]: a round's wait ends t_rnd after its arrivals, not t_rnd after the stream got there).
  bool timed = false;
  std::vector<std::pair<std::int64_t, double>> reached;  // (value, time), ascending
  std::vector<int> waiters;                              // streams blocked on this counter
  // Data mode: see NOTE [counter clocks].
  std::vector<Threshold> thresholds;  // ascending
  std::size_t crossed = 0;
  ClockVec running;
  // The base version last folded into `running`: later additions with the same base only
  // move their own component.
  std::uint64_t folded_version = 0;
};

struct EventState {
  bool recorded = false;
  ClockRef clock;
  int waits_left = 0;  // data mode: the clock is dropped after the last wait started
  std::vector<int> waiters;
};

enum Link { kCopyEngine = 0, kNvlink = 1, kNic = 2, kLinks = 3 };

// A transfer or kernel on the virtual fabric's one GPU: after `ready` (its launch) it moves
// `left` HBM bytes at the rate the sharing gives it, at most `cap` bytes per microsecond.
struct Flow {
  int op = 0;
  double start = 0;
  double ready = 0;
  double left = 0;
  double cap = 0;
  bool copy = false;  // a copy-engine copy (shares the copy engines too)
  int ctas = 0;       // SM CTAs it holds (0: none)
  double rate = 0;
};

class Simulation {
 public:
  Simulation(const program::Program& program, const BufferTable& table, const StaticFacts& facts,
             Memory* memory, const RunOptions& options, ErrorSink& sink, RunResult& result)
      : p_(program),
        table_(table),
        facts_(facts),
        memory_(memory),
        opt_(options),
        sink_(sink),
        result_(result),
        rng_(options.seed),
        streams_per_rank_(static_cast<int>(program.stream_names.size())) {}

  void run(const std::vector<InputRange>& inputs);

 private:
  int comp_of(const Op& op) const { return op.rank * streams_per_rank_ + op.stream; }
  std::size_t counter_of(const program::Counter& c) const {
    return static_cast<std::size_t>(c.rank) * static_cast<std::size_t>(p_.counters) +
           static_cast<std::size_t>(c.id);
  }
  // The state slot of a kEventRecord / kEventWait's event.
  std::size_t event_of(const Op& o) const {
    return static_cast<std::size_t>(o.rank) * static_cast<std::size_t>(p_.events) +
           static_cast<std::size_t>(*program::event_of(o));
  }
  const Op& op(int i) const { return p_.ops[static_cast<std::size_t>(i)]; }
  bool data() const { return memory_ != nullptr; }

  void try_start(int s);
  void complete(int i);
  void join(Stream& s, const ClockVec& other, const ClockRef* ref = nullptr);
  void prepare_clocks();
  void touch_tensors(const Op& o);
  void release_tensor(const program::ReleaseOp& o);
  void report_deadlock();
  void push(double time, bool wake, int id, bool flow = false) {
    queue_.push(QueueEvent{time, rng_.next(), order_++, wake, flow, id});
  }
  // Virtual fabric (NOTE [virtual-fabric machine]).
  const VirtualFabricMachine* vf() const { return opt_.cost.virtual_fabric.get(); }
  void place_virtual_fabric(const std::vector<double>& host_free);
  bool start_flow(int i, const Op& o, double jitter);
  void advance_flows();
  void share_flows();
  void schedule_flows();
  void on_flow_event();

  const program::Program& p_;
  const BufferTable& table_;
  const StaticFacts& facts_;
  Memory* memory_;
  const RunOptions& opt_;
  ErrorSink& sink_;
  RunResult& result_;
  Rng rng_;
  int streams_per_rank_;

  std::unique_ptr<RaceChecker> races_;
  std::vector<Stream> streams_;
  std::vector<double> issue_;
  std::vector<CounterState> counters_;
  std::vector<EventState> events_;
  std::vector<double> link_free_;
  // Virtual fabric: per op its hardware queue and position there (-1: none); per queue the
  // ops started and the streams blocked on it; the flows and their clock.
  std::vector<int> hwq_of_;
  std::vector<int> hwq_pos_;
  std::vector<int> hwq_started_;
  std::vector<std::vector<int>> hwq_waiters_;
  std::vector<Flow> flows_;
  double flow_time_ = 0;
  int flow_gen_ = 0;
  std::priority_queue<QueueEvent, std::vector<QueueEvent>, std::greater<>> queue_;
  std::int64_t order_ = 0;
  std::int64_t placed_ = 0;
  std::uint64_t versions_ = 0;
  double now_ = 0;
  std::vector<int> pending_;
  // Peak buffer bytes: per buffer index, live and released bytes; per rank, live tensors.
  std::vector<char> live_;
  std::vector<std::int64_t> released_;
  std::vector<std::int64_t> live_bytes_;
  std::vector<std::int64_t> peak_bytes_;
};

void Simulation::run(const std::vector<InputRange>& inputs) {
  const int ranks = p_.ranks;
  const std::size_t comps = static_cast<std::size_t>(ranks * streams_per_rank_);
  streams_.resize(comps);
  issue_.assign(p_.ops.size(), 0.0);
  std::vector<double> host(static_cast<std::size_t>(ranks), 0.0);
  for (std::size_t i = 0; i < p_.ops.size(); ++i) {
    const Op& o = p_.ops[i];
    if (o.rank < 0 || o.rank >= ranks || o.stream < 0 || o.stream >= streams_per_rank_) continue;
    double& h = host[static_cast<std::size_t>(o.rank)];
    if (!o.inside_kernel) h += opt_.cost.host_enqueue_us;  // steps of a kernel cost no host time
    issue_[i] = h;
    streams_[static_cast<std::size_t>(comp_of(o))].ops.push_back(static_cast<int>(i));
    ++placed_;  // ops without a valid (rank, stream) never run (reported as malformed)
  }
  if (vf() != nullptr) place_virtual_fabric(host);
  counters_.resize(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(p_.counters));
  for (const Op& o : p_.ops) {
    const auto* w = o.get_if<program::WaitOp>();
    if (w != nullptr && w->network_round && w->counter.rank >= 0 && w->counter.rank < ranks &&
        w->counter.id >= 0 && w->counter.id < p_.counters) {
      counters_[counter_of(w->counter)].timed = true;
    }
  }
  events_.resize(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(p_.events));
  link_free_.assign(static_cast<std::size_t>(ranks) * kLinks, 0.0);
  live_.assign(static_cast<std::size_t>(table_.count()), 0);
  released_.assign(static_cast<std::size_t>(table_.count()), 0);
  live_bytes_.assign(static_cast<std::size_t>(ranks), 0);
  peak_bytes_.assign(static_cast<std::size_t>(ranks), 0);
  if (opt_.record_times) result_.op_times.assign(p_.ops.size(), OpTime{});

  if (data()) {
    races_ = std::make_unique<RaceChecker>(p_, table_, sink_);
    for (const InputRange& in : inputs)
      races_->mark_input(in.buffer, in.begin, in.end);
    prepare_clocks();
    for (Stream& s : streams_) {
      if (s.ops.empty()) continue;
      s.base = std::make_shared<ClockVec>(clock_size(comps), 0u);
      s.version = ++versions_;
    }
  }

  for (std::size_t s = 0; s < comps; ++s)
    if (!streams_[s].ops.empty()) pending_.push_back(static_cast<int>(s));

  while (true) {
    while (!pending_.empty()) {
      std::vector<int> batch = std::move(pending_);
      pending_.clear();
      for (std::size_t k = batch.size(); k > 1; --k)
        std::swap(batch[k - 1], batch[rng_.next() % k]);
      for (int s : batch)
        try_start(s);
    }
    if (queue_.empty()) break;
    const QueueEvent e = queue_.top();
    queue_.pop();
    now_ = e.time;
    if (e.flow) {
      if (e.id == flow_gen_) on_flow_event();
    } else if (e.wake) {
      streams_[static_cast<std::size_t>(e.id)].wake_pending = false;
      pending_.push_back(e.id);
    } else {
      complete(e.id);
    }
  }

  result_.completed = result_.ops_run == placed_;
  if (!result_.completed) report_deadlock();
  for (int r = 0; r < ranks && r < static_cast<int>(p_.buffers.size()); ++r) {
    const program::BufferSizes& b = p_.buffers[static_cast<std::size_t>(r)];
    std::int64_t outputs = 0;
    for (std::int64_t bytes : b.output_bytes)
      outputs += bytes;
    result_.peak_buffer_bytes =
        std::max(result_.peak_buffer_bytes,
                 b.arena_bytes + outputs + peak_bytes_[static_cast<std::size_t>(r)]);
  }
}

void Simulation::prepare_clocks() {
  for (std::size_t i = 0; i < p_.ops.size(); ++i) {
    const Op& o = p_.ops[i];
    if (!facts_.valid[i]) continue;
    const auto* w = o.get_if<program::WaitOp>();
    if (w != nullptr && w->value > 0) {
      std::vector<Threshold>& t = counters_[counter_of(w->counter)].thresholds;
      auto it = std::lower_bound(t.begin(), t.end(), w->value,
                                 [](const Threshold& a, std::int64_t v) { return a.value < v; });
      if (it == t.end() || it->value != w->value)
        it = t.insert(it, Threshold{w->value, 0, nullptr});
      ++it->waits_left;
    } else if (o.is<program::EventWaitOp>()) {
      ++events_[event_of(o)].waits_left;
    }
  }
}

// s's clock = max(s's clock, other [, ref]). The base is changed in place when no ClockRef
// shares it, and gets a new version only when it changed (see CounterState::folded_version).
void Simulation::join(Stream& s, const ClockVec& other, const ClockRef* ref) {
  const bool ref_new = ref && s.base->at(static_cast<std::size_t>(ref->comp)) < ref->seq;
  if (s.base.use_count() > 1) {
    if (!ref_new && dominates(*s.base, other)) return;
    s.base = std::make_shared<ClockVec>(*s.base);
  }
  bool changed = join_into(*s.base, other);
  if (ref_new) {
    (*s.base)[static_cast<std::size_t>(ref->comp)] = ref->seq;
    changed = true;
  }
  if (changed) s.version = ++versions_;
}

void Simulation::try_start(int si) {
  Stream& s = streams_[static_cast<std::size_t>(si)];
  if (s.running || s.next >= s.ops.size()) return;
  const int i = s.ops[s.next];
  const Op& o = op(i);
  if (issue_[static_cast<std::size_t>(i)] > now_) {
    if (!s.wake_pending) {
      s.wake_pending = true;
      push(issue_[static_cast<std::size_t>(i)], true, si);
    }
    return;
  }
  const bool valid = facts_.valid[static_cast<std::size_t>(i)] != 0;
  const int hwq = hwq_of_.empty() ? -1 : hwq_of_[static_cast<std::size_t>(i)];
  if (hwq >= 0 &&
      hwq_pos_[static_cast<std::size_t>(i)] != hwq_started_[static_cast<std::size_t>(hwq)]) {
    hwq_waiters_[static_cast<std::size_t>(hwq)].push_back(si);  // earlier ops of its queue first
    return;
  }
  bool round_wait = false;
  // Conditions of waits, and their happens-before joins.
  const auto* w = o.get_if<program::WaitOp>();
  if (valid && w != nullptr) {
    const std::size_t ci = counter_of(w->counter);
    CounterState& c = counters_[ci];
    if (c.value < w->value) {
      c.waiters.push_back(si);
      return;
    }
    round_wait = w->network_round;
    if (data() && w->value > 0) {
      auto t = std::lower_bound(c.thresholds.begin(), c.thresholds.end(), w->value,
                                [](const Threshold& a, std::int64_t v) { return a.value < v; });
      join(s, *t->snapshot);
      if (--t->waits_left == 0) t->snapshot.reset();
    }
  } else if (valid && o.is<program::EventWaitOp>()) {
    EventState& ev = events_[event_of(o)];
    if (!ev.recorded) {
      ev.waiters.push_back(si);
      return;
    }
    if (data()) {
      join(s, *ev.clock.base, &ev.clock);
      if (--ev.waits_left == 0) ev.clock = ClockRef{};
    }
  }

  ++s.seq;
  s.running = true;
  if (hwq >= 0) {
    ++hwq_started_[static_cast<std::size_t>(hwq)];
    auto& blocked = hwq_waiters_[static_cast<std::size_t>(hwq)];
    pending_.insert(pending_.end(), blocked.begin(), blocked.end());
    blocked.clear();
  }
  if (vf() != nullptr && valid) {
    const double jitter = opt_.jitter > 0 ? 1.0 + opt_.jitter * (2.0 * rng_.uniform() - 1.0) : 1.0;
    if (start_flow(i, o, jitter)) {
      if (opt_.record_times) result_.op_times[static_cast<std::size_t>(i)].start_us = now_;
      touch_tensors(o);
      return;  // completes through on_flow_event()
    }
  }
  // Malformed geometry must not move time backwards.
  double duration = std::max(0.0, op_duration_us(opt_.cost, o));
  if (round_wait) {
    // The round's wait overhead runs from the moment its arrivals were complete.
    const CounterState& c = counters_[counter_of(w->counter)];
    const auto at = std::lower_bound(
        c.reached.begin(), c.reached.end(), w->value,
        [](const std::pair<std::int64_t, double>& r, std::int64_t v) { return r.first < v; });
    const double since = at == c.reached.end() ? now_ : at->second;
    duration += std::max(0.0, since + opt_.cost.round_wait_us - now_);
  }
  if (opt_.jitter > 0) duration *= 1.0 + opt_.jitter * (2.0 * rng_.uniform() - 1.0);
  double start = now_;
  int link = -1;
  if (o.is<program::RailPutOp>()) {
    link = kNic;
  } else if (const auto* copy = o.get_if<program::CopyOp>()) {
    // A copy kernel on one GPU (ctas > 0) runs on SMs, not on the copy engines.
    link = copy->ctas > 0 ? -1 : kCopyEngine;
    for (const program::CopyDescriptor& c : copy->copies)
      if (c.src.buffer.rank != c.dst.buffer.rank) link = kNvlink;
  }
  if (link >= 0 && opt_.cost.share_links) {
    double& free =
        link_free_[static_cast<std::size_t>(o.rank) * kLinks + static_cast<std::size_t>(link)];
    start = std::max(start, free);
    free = start + duration;
  }
  const double end = start + duration;
  // SM time: kernels, and transfers driven by SMs (ctas > 0: copy kernels, NCCL).
  const int ctas = program::ctas_of(o);
  if (o.kind() == OpKind::kSum || o.kind() == OpKind::kLand || o.kind() == OpKind::kCast ||
      o.kind() == OpKind::kZero || ctas > 0)
    result_.sm_time_us += static_cast<double>(std::max(1, ctas)) * duration;
  if (opt_.record_times) {
    OpTime& t = result_.op_times[static_cast<std::size_t>(i)];
    // A wait's span shows how long its stream was blocked on it.
    const bool waits = o.kind() == OpKind::kWait || o.kind() == OpKind::kEventWait;
    t.start_us = waits ? std::max(s.head_since, issue_[static_cast<std::size_t>(i)]) : start;
  }
  touch_tensors(o);
  push(end, false, i);
}

void Simulation::complete(int i) {
  const Op& o = op(i);
  const int si = comp_of(o);
  Stream& s = streams_[static_cast<std::size_t>(si)];
  const bool valid = facts_.valid[static_cast<std::size_t>(i)] != 0;
  ClockRef clock;
  if (data()) {
    clock = ClockRef{s.base, si, s.seq, s.version};
    if (valid) {
      races_->on_complete(i, clock);
      apply_data(o, table_, *memory_);
    }
  }
  const auto add = program::addition_of(o);
  if (valid && add) {
    CounterState& c = counters_[counter_of(add->counter)];
    c.value += add->value;
    if (c.timed && (c.reached.empty() || c.value > c.reached.back().first))
      c.reached.emplace_back(c.value, now_);
    if (data() && c.crossed < c.thresholds.size()) {
      if (c.running.empty()) c.running.assign(clock.base->size(), 0u);
      if (c.folded_version != clock.version) {
        join_into(c.running, *clock.base);
        c.folded_version = clock.version;
      }
      auto& own = c.running[static_cast<std::size_t>(clock.comp)];
      own = std::max(own, clock.seq);
      std::shared_ptr<const ClockVec> snapshot;  // one per addition, shared by thresholds
      for (; c.crossed < c.thresholds.size() && c.value >= c.thresholds[c.crossed].value;
           ++c.crossed) {
        if (!snapshot) snapshot = std::make_shared<const ClockVec>(c.running);
        c.thresholds[c.crossed].snapshot = snapshot;
      }
      if (c.crossed == c.thresholds.size()) {
        ClockVec().swap(c.running);
      }
    }
    pending_.insert(pending_.end(), c.waiters.begin(), c.waiters.end());
    c.waiters.clear();
  } else if (valid && o.is<program::EventRecordOp>()) {
    EventState& ev = events_[event_of(o)];
    ev.recorded = true;
    if (ev.waits_left > 0) ev.clock = clock;
    pending_.insert(pending_.end(), ev.waiters.begin(), ev.waiters.end());
    ev.waiters.clear();
  } else if (const auto* release = o.get_if<program::ReleaseOp>(); valid && release != nullptr) {
    release_tensor(*release);
  }
  s.running = false;
  ++s.next;
  s.head_since = now_;
  pending_.push_back(si);
  ++result_.ops_run;
  if (opt_.progress && opt_.progress_every > 0 && result_.ops_run % opt_.progress_every == 0) {
    opt_.progress(result_.ops_run, placed_);
  }
  result_.makespan_us = std::max(result_.makespan_us, now_);
  if (opt_.record_times) result_.op_times[static_cast<std::size_t>(i)].end_us = now_;
}

void Simulation::touch_tensors(const Op& o) {
  auto touch = [&](const program::Buffer& b) {
    if (b.space != program::Space::kTensor) return;
    const int index = table_.index(b);
    if (index < 0 || live_[static_cast<std::size_t>(index)]) return;
    live_[static_cast<std::size_t>(index)] = 1;
    released_[static_cast<std::size_t>(index)] = 0;
    const std::size_t r = static_cast<std::size_t>(b.rank);
    live_bytes_[r] += table_.size(index);
    peak_bytes_[r] = std::max(peak_bytes_[r], live_bytes_[r]);
  };
  // A release frees its tensor rather than touching it.
  if (!o.is<program::ReleaseOp>())
    program::for_each_region(o, [&](const program::Region& r) { touch(r.buffer); });
  if (const auto* sum = o.get_if<program::SumOp>()) {
    for (const program::SumSegment& seg : sum->segments)
      touch(seg.source(o.rank));
  }
}

void Simulation::release_tensor(const program::ReleaseOp& o) {
  if (o.dst.buffer.space != program::Space::kTensor) return;
  const int index = table_.index(o.dst.buffer);
  if (index < 0 || !live_[static_cast<std::size_t>(index)]) return;
  std::int64_t& released = released_[static_cast<std::size_t>(index)];
  const std::int64_t delta = std::min(o.dst.bytes(), table_.size(index) - released);
  released += delta;
  live_bytes_[static_cast<std::size_t>(o.dst.buffer.rank)] -= delta;
  if (released >= table_.size(index)) live_[static_cast<std::size_t>(index)] = 0;
}

// NOTE [virtual-fabric machine], host and queues: one host thread issues every rank's ops in a
// legal order (as the CUDA executor enqueues them), host_enqueue_us apart (a copy: per
// descriptor; a release enqueues nothing); streams are created in that order, after the executor's
// own caller stream, and take the hardware queues round-robin; each queue starts its ops in
// submission order.
void Simulation::place_virtual_fabric(const std::vector<double>& /*per_rank_host*/) {
  const program::LegalOrder legal = program::legal_order(p_);
  std::vector<int> order = legal.order;
  order.insert(order.end(), legal.unplaced.begin(), legal.unplaced.end());
  const int queues = vf()->hw_queues;
  std::vector<int> queue_of_comp(streams_.size(), -1);
  int created = 1;  // the executor's caller stream is the device's first
  if (queues > 0) {
    hwq_of_.assign(p_.ops.size(), -1);
    hwq_pos_.assign(p_.ops.size(), -1);
    hwq_started_.assign(static_cast<std::size_t>(queues), 0);
    hwq_waiters_.assign(static_cast<std::size_t>(queues), {});
  }
  std::vector<int> queued(static_cast<std::size_t>(std::max(queues, 0)), 0);
  double host = 0;
  for (const int i : order) {
    const Op& o = op(i);
    if (o.rank < 0 || o.rank >= p_.ranks || o.stream < 0 || o.stream >= streams_per_rank_) continue;
    const bool enqueues = !o.is<program::ReleaseOp>();
    // A copy is one cudaMemcpyAsync per descriptor (NOTE [CUDA executor op mapping]).
    double calls = 1;
    if (const auto* copy = o.get_if<program::CopyOp>())
      calls = static_cast<double>(std::max<std::size_t>(1, copy->copies.size()));
    if (enqueues && !o.inside_kernel) host += calls * opt_.cost.host_enqueue_us;
    issue_[static_cast<std::size_t>(i)] = host;
    if (queues <= 0) continue;
    int& q = queue_of_comp[static_cast<std::size_t>(comp_of(o))];
    if (q < 0) q = created++ % queues;
    if (!enqueues) continue;
    hwq_of_[static_cast<std::size_t>(i)] = q;
    hwq_pos_[static_cast<std::size_t>(i)] = queued[static_cast<std::size_t>(q)]++;
  }
}

// NOTE [virtual-fabric machine], flows: a copy, sum, landing, cast or zero fill is a flow of
// HBM bytes after its launch latency, capped by its own rate (a copy engine's one-stream rate;
// a kernel's CTAs times its per-CTA rate, scaled by sms / CTAs when the kernels in flight hold
// more CTAs than the GPU has SMs). Copies share the aggregate copy-engine rate for their count,
// then every flow shares HBM, each max-min fair. Returns false for ops that are not flows.
bool Simulation::start_flow(int i, const Op& o, double jitter) {
  const VirtualFabricMachine& m = *vf();
  const double launch = o.inside_kernel ? 0.0 : opt_.cost.kernel_launch_us;
  Flow f;
  f.op = i;
  f.start = now_;
  double latency = launch;
  switch (o.kind()) {
    case OpKind::kCopy: {
      const program::CopyOp& c = o.as<program::CopyOp>();
      double bytes = 0;
      for (const program::CopyDescriptor& d : c.copies)
        bytes += static_cast<double>(d.dst.bytes());
      f.ctas = c.ctas;
      f.copy = c.ctas == 0;
      if (f.copy) latency = o.inside_kernel ? 0.0 : opt_.cost.copy_launch_us;
      f.left = 2.0 * bytes;  // read + written
      f.cap = f.copy ? 2e3 * m.copy_gbps(1) : 1e3 * m.hbm_gbps;
      break;
    }
    case OpKind::kSum: {
      const program::SumOp& sum = o.as<program::SumOp>();
      const double elems = static_cast<double>(sum.dst.bytes()) / 4.0;  // fp32 out
      const int l = static_cast<int>(sum.staged.size()) + 1;
      const double per_elem =
          l * static_cast<double>(item_bytes(sum.in_dtype)) + 4.0 + (sum.accumulate ? 4.0 : 0.0);
      f.ctas = std::max(1, sum.ctas);
      f.left = elems * per_elem;
      f.cap = f.ctas * m.sum_elems_per_us(l, sum.accumulate) * per_elem;
      break;
    }
    case OpKind::kLand: {
      const program::LandOp& land = o.as<program::LandOp>();
      const double out = static_cast<double>(land.dst.bytes());
      const double per_out =
          static_cast<double>(land.sources.size()) + 1.0 + (land.accumulate ? 1.0 : 0.0);
      f.ctas = std::max(1, land.ctas);
      f.left = out * per_out;
      f.cap = f.ctas * 1e3 * m.land_cta_gbps * per_out;
      break;
    }
    case OpKind::kCast: {
      const program::CastOp& cast = o.as<program::CastOp>();
      f.ctas = std::max(1, cast.ctas);
      f.left = static_cast<double>(cast.src.bytes() + cast.dst.bytes());
      f.cap = f.ctas * 1e3 * m.cast_cta_gbps;
      break;
    }
    case OpKind::kZero:
      f.left = static_cast<double>(o.as<program::ZeroOp>().dst.bytes());
      f.cap = 1e3 * m.hbm_gbps;
      break;
    default:
      return false;
  }
  f.ready = now_ + latency * jitter;
  f.left *= jitter;
  advance_flows();
  flows_.push_back(f);
  share_flows();
  schedule_flows();
  return true;
}

void Simulation::advance_flows() {
  const double dt = now_ - flow_time_;
  if (dt > 0) {
    for (Flow& f : flows_)
      f.left -= f.rate * dt;
  }
  flow_time_ = now_;
}

void Simulation::share_flows() {
  const VirtualFabricMachine& m = *vf();
  std::vector<Flow*> active, copies;
  int ctas = 0;
  for (Flow& f : flows_) {
    f.rate = 0;
    if (f.ready > now_ || f.left <= 0) continue;
    active.push_back(&f);
    ctas += f.ctas;
    if (f.copy) copies.push_back(&f);
  }
  const double sm_scale = ctas > m.sms ? static_cast<double>(m.sms) / ctas : 1.0;
  std::vector<double> cap(flows_.size());
  auto index = [&](const Flow* f) { return static_cast<std::size_t>(f - flows_.data()); };
  for (Flow* f : active)
    cap[index(f)] = f->ctas > 0 ? f->cap * sm_scale : f->cap;
  // Max-min fair shares of `capacity` among `group`, each at most its cap; writes the caps.
  auto fill = [&](std::vector<Flow*> group, double capacity) {
    std::sort(group.begin(), group.end(),
              [&](const Flow* a, const Flow* b) { return cap[index(a)] < cap[index(b)]; });
    double left = capacity;
    std::size_t n = group.size();
    for (Flow* f : group) {
      const double share = std::min(cap[index(f)], left / static_cast<double>(n--));
      cap[index(f)] = share;
      left -= share;
    }
  };
  if (!copies.empty()) fill(copies, 2e3 * m.copy_gbps(static_cast<int>(copies.size())));
  fill(active, 1e3 * m.hbm_gbps);
  for (Flow* f : active)
    f->rate = cap[index(f)];
}

void Simulation::schedule_flows() {
  ++flow_gen_;
  double next = -1;
  for (const Flow& f : flows_) {
    double t = now_;
    if (f.ready > now_) {
      t = f.ready;
    } else if (f.left > 0) {
      if (!(f.rate > 0)) continue;
      t = now_ + f.left / f.rate;
    }
    if (next < 0 || t < next) next = t;
  }
  if (next >= 0) push(next, false, flow_gen_, true);
}

void Simulation::on_flow_event() {
  advance_flows();
  std::vector<int> done;
  std::vector<Flow> kept;
  for (const Flow& f : flows_) {
    // Done once launched and its bytes moved (a relative tolerance for rounding).
    if (f.ready <= now_ && f.left <= 1e-9 * std::max(1.0, f.cap)) {
      done.push_back(f.op);
      if (f.ctas > 0) result_.sm_time_us += f.ctas * (now_ - f.start);
    } else {
      kept.push_back(f);
    }
  }
  flows_ = std::move(kept);
  share_flows();
  schedule_flows();
  for (const int i : done)
    complete(i);
}

void Simulation::report_deadlock() {
  result_.deadlock = true;
  for (std::size_t si = 0; si < streams_.size(); ++si) {
    const Stream& s = streams_[si];
    if (s.next >= s.ops.size()) continue;
    const int i = s.ops[s.next];
    const Op& o = op(i);
    ExecError e;
    e.kind = ErrorKind::kDeadlock;
    e.op = i;
    e.rank = o.rank;
    std::string what;
    if (const auto* w = o.get_if<program::WaitOp>()) {
      const CounterState& c = counters_[counter_of(w->counter)];
      what = "waits for counter " + std::to_string(w->counter.id) + " on rank " +
             std::to_string(w->counter.rank) + " to reach " + std::to_string(w->value) +
             "; it holds " + std::to_string(c.value);
    } else if (const auto* ew = o.get_if<program::EventWaitOp>()) {
      const int record = facts_.event_record[event_of(o)];
      e.other_op = record;
      what = "waits for event " + std::to_string(ew->event) +
             (record < 0 ? ", which is never recorded"
                         : ", whose record " + describe_op(p_, record) + " has not run");
    } else {
      what = "cannot start";
    }
    e.message = "deadlock: " + describe_op(p_, i) + " " + what + " (" +
                std::to_string(s.ops.size() - s.next) + " ops left on its stream)";
    sink_.add(std::move(e));
  }
}

}  // namespace

void simulate(const program::Program& program, const BufferTable& table, const StaticFacts& facts,
              Memory* memory, const std::vector<InputRange>& inputs, const RunOptions& options,
              ErrorSink& sink, RunResult& result) {
  Simulation sim(program, table, facts, memory, options, sink, result);
  sim.run(inputs);
}

}  // namespace tide::exec::detail
