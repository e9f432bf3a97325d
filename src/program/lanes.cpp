// NOTE [lane handoff]: the handoff sequence, and the calls of several groups as one program.
#include "tide/program/lanes.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "tide/core/error.hpp"
#include "tide/program/emitter.hpp"

namespace tide::program {

CallSequence handoff_sequence(int ranks) {
  if (ranks < 1) throw InvalidArgument("handoff sequence: at least one rank");
  // Builder thresholds on a shared counter count from the start of the sequence: call e waits
  // for the N (e + 1) additions of handoffs 0..e.
  CallBuilder build = [ranks](int call, const CallPlacement& at) {
    Emitter e;
    Program& p = e.program;
    p.ranks = ranks;
    const int s = p.stream("handoff");
    for (int r = 0; r < ranks; ++r) {
      const std::string who = "handoff r" + std::to_string(r) + " ";
      for (int q = 0; q < ranks; ++q)
        e.signal(r, s, q, 0, who + "earlier lane calls done -> rank " + std::to_string(q));
      e.wait(r, s, 0, std::int64_t{ranks} * (call + 1), who + "every rank done with them");
    }
    p.counters = at.counter_base;
    p.events = at.event_base;
    return std::move(e.program);
  };
  SequenceOptions options;
  options.max_period = 1;
  options.warmup = 1;
  return make_call_sequence(build, 1, BufferSizes{}, options);
}

namespace {

// Appends instances of call templates to one program with absolute thresholds, distinct
// events and per-call buffers.
class LaneWriter {
 public:
  LaneWriter(int ranks, int counters) : ranks_(ranks), counters_(counters) {
    program_.ranks = ranks;
    program_.counters = counters;
    totals_.assign(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(counters), 0);
    program_.buffers.resize(static_cast<std::size_t>(ranks));
  }

  int event() { return program_.events++; }
  int stream(const std::string& name) { return program_.stream(name); }
  Program& program() { return program_; }

  // Where one template instance goes.
  struct Place {
    int first_counter = 0;
    std::string prefix;                         // stream names: prefix + template's name
    const std::vector<int>* earlier = nullptr;  // event bases of the sequence's earlier calls
    int tensor_base = 0;
    int output_base = 0;
    int fork_event = -1;  // >= 0: every stream of a rank starts after this event of the rank
    bool drop_waits = false;
    int call = -1;  // Op::call of the template's ops (NOTE [call identities])
  };

  // Appends `t`; returns the event base it used. With a fork event, returns the join: each
  // rank's streams' done events, for the caller to wait on.
  int append(const CallSequence& sequence, const CallTemplate& t, const Place& at,
             std::vector<std::pair<int, int>>* joins) {
    const int base = program_.events;
    program_.events += sequence.events_per_call;
    const int call = at.earlier ? static_cast<int>(at.earlier->size()) : 0;
    std::map<std::pair<int, int>, bool> started;  // (rank, stream) -> forked
    for (std::size_t i = 0; i < t.program.ops.size(); ++i) {
      Op op = t.program.ops[i];
      op.call = at.call;
      op.stream = stream(at.prefix + t.program.stream_names[static_cast<std::size_t>(op.stream)]);
      if (at.drop_waits && op.is<WaitOp>()) continue;
      if (Counter* c = counter_of(op)) {
        c->id += at.first_counter;
        if (auto* wait = op.get_if<WaitOp>()) wait->value += totals_[slot(c->rank, c->id)];
      }
      if (int* ev = event_of(op)) {
        const int owner = call - t.event_age[i];
        if (owner < 0) continue;  // a call before the first: nothing to order
        *ev += owner == call ? base : (*at.earlier)[static_cast<std::size_t>(owner)];
      }
      for_each_region(op, [&](Region& r) {
        if (r.buffer.space == Space::kTensor) r.buffer.index += at.tensor_base;
        if (r.buffer.space == Space::kOutput) r.buffer.index += at.output_base;
      });
      if (auto* sum = op.get_if<SumOp>()) {
        for (SumSegment& s : sum->segments)
          if (s.space == Space::kTensor) s.param += at.tensor_base;
      }
      if (at.fork_event >= 0 && !started[{op.rank, op.stream}]) {
        started[{op.rank, op.stream}] = true;
        program_.ops.push_back(make_op(op.rank, op.stream, "lane: call starts after the handoff",
                                       EventWaitOp{at.fork_event}));
      }
      program_.ops.push_back(std::move(op));
    }
    const std::size_t per_rank = static_cast<std::size_t>(sequence.counters);
    for (int r = 0; r < ranks_; ++r) {
      for (std::size_t id = 0; id < per_rank; ++id) {
        totals_[slot(r, at.first_counter + static_cast<int>(id))] +=
            t.additions[static_cast<std::size_t>(r) * per_rank + id];
      }
    }
    if (joins) {
      for (const auto& [key, forked] : started) {
        const int done = event();
        program_.ops.push_back(
            make_op(key.first, key.second, "lane: stream done", EventRecordOp{done}));
        joins->push_back({key.first, done});
      }
    }
    return base;
  }

  void add_buffers(const BufferSizes& sizes) {
    for (BufferSizes& b : program_.buffers) {
      b.arena_bytes = std::max(b.arena_bytes, sizes.arena_bytes);
      b.tensor_bytes.insert(b.tensor_bytes.end(), sizes.tensor_bytes.begin(),
                            sizes.tensor_bytes.end());
      b.output_bytes.insert(b.output_bytes.end(), sizes.output_bytes.begin(),
                            sizes.output_bytes.end());
    }
  }
  int tensors() const { return static_cast<int>(program_.buffers.front().tensor_bytes.size()); }
  int outputs() const { return static_cast<int>(program_.buffers.front().output_bytes.size()); }

 private:
  std::size_t slot(int rank, int id) const {
    return static_cast<std::size_t>(rank) * static_cast<std::size_t>(counters_) +
           static_cast<std::size_t>(id);
  }
  int ranks_;
  int counters_;
  Program program_;
  std::vector<std::int64_t> totals_;
};

}  // namespace

LaneProgram lane_program(const std::vector<LaneGroup>& groups, const std::vector<LaneCall>& calls,
                         const LaneProgramOptions& options) {
  int ranks = 0, counters = kHandoffWords;
  for (const LaneGroup& g : groups) {
    for (const auto& [seq, first] : {std::pair{g.all_gather, g.all_gather_first_counter},
                                     std::pair{g.reduce_scatter, g.reduce_scatter_first_counter}}) {
      if (!seq) continue;
      const int r = seq->templates.front().program.ranks;
      if (ranks != 0 && r != ranks)
        throw InvalidArgument("lane program: groups of different ranks");
      ranks = r;
      counters = std::max(counters, first + seq->counters);
    }
  }
  if (ranks == 0) throw InvalidArgument("lane program: no call sequences");
  const CallSequence handoff = handoff_sequence(ranks);
  LaneWriter w(ranks, counters);
  LaneProgram out;
  std::vector<std::vector<int>> earlier(2 * groups.size());  // per (group, collective)
  std::vector<int> handoffs[2];                              // per lane: its event bases
  std::map<int, int> released;                               // slot -> its release event
  std::map<int, int> layer_done;  // group -> its layer's last compute (it made the gradients)
  std::vector<CallIdentity> identities;  // per call
  const int compute = w.stream("compute");
  for (const LaneCall& c : calls) {
    if (c.group < 0 || c.group >= static_cast<int>(groups.size())) {
      throw InvalidArgument("lane program: call of group " + std::to_string(c.group));
    }
    const LaneGroup& g = groups[static_cast<std::size_t>(c.group)];
    const CallSequence* seq = c.reduce_scatter ? g.reduce_scatter : g.all_gather;
    if (!seq) throw InvalidArgument("lane program: a call of a group without that sequence");
    const int lane = c.reduce_scatter ? 1 : 0;
    const std::string name = lane == 1 ? "rs." : "ag.";
    const int caller = w.stream(name + "lane");
    // The slot's previous occupant released it (NOTE [runtime] 7).
    if (lane == 0 && options.fault != Fault::kAgNoSlotRelease) {
      if (auto it = released.find(g.landing_slot); it != released.end()) {
        for (int r = 0; r < ranks; ++r) {
          w.program().ops.push_back(
              make_op(r, caller, "lane: wait for the slot's release", EventWaitOp{it->second}));
        }
      }
    }
    // FSDP2's post_backward issues a reduce-scatter after the layer's backward made its
    // gradients: the call waits for that compute.
    if (lane == 1) {
      if (auto it = layer_done.find(c.group); it != layer_done.end()) {
        for (int r = 0; r < ranks; ++r) {
          w.program().ops.push_back(
              make_op(r, caller, "lane: wait for the layer's gradients", EventWaitOp{it->second}));
        }
      }
    }
    // NOTE [lane handoff] 1-2.
    LaneWriter::Place h;
    h.first_counter = lane == 1 ? kReduceScatterHandoffWord : kAllGatherHandoffWord;
    h.prefix = name;
    h.earlier = &handoffs[lane];
    h.drop_waits = options.fault == Fault::kLaneNoHandoff;
    std::vector<int>& mine = earlier[2 * static_cast<std::size_t>(c.group) + lane];
    LaneWriter::Place at;
    at.first_counter = lane == 1 ? g.reduce_scatter_first_counter : g.all_gather_first_counter;
    at.prefix = "g" + std::to_string(c.group) + "." + name;
    at.earlier = &mine;
    at.tensor_base = w.tensors();
    at.output_base = w.outputs();
    at.call = static_cast<int>(out.calls.size());
    identities.push_back(
        CallIdentity{c.group, c.reduce_scatter ? "reduce-scatter" : "all-gather", g.name});
    // The handoff's template stream is the lane's caller stream.
    const CallTemplate& ht = handoff.for_call(static_cast<std::int64_t>(handoffs[lane].size()));
    CallTemplate renamed = ht;
    renamed.program.stream_names = {"lane"};
    handoffs[lane].push_back(w.append(handoff, renamed, h, nullptr));
    at.fork_event = w.event();
    for (int r = 0; r < ranks; ++r)
      w.program().ops.push_back(make_op(r, caller, "lane: fork", EventRecordOp{at.fork_event}));
    const CallTemplate& t = seq->for_call(static_cast<std::int64_t>(mine.size()));
    std::vector<std::pair<int, int>> joins;
    mine.push_back(w.append(*seq, t, at, &joins));
    for (const auto& [rank, done] : joins)
      w.program().ops.push_back(make_op(rank, caller, "lane: join", EventWaitOp{done}));
    LaneCallBuffers buffers;
    buffers.first_tensor = at.tensor_base;
    BufferSizes sizes = t.program.buffers.front();
    if (lane == 0) {
      // The layer reads its parameters after the call, then releases the slot.
      const int ready = w.event(), release = w.event();
      sizes.output_bytes = {g.landing_bytes};
      buffers.output = at.output_base;
      buffers.done_event = ready;
      for (int r = 0; r < ranks; ++r) {
        w.program().ops.push_back(
            make_op(r, caller, "lane: parameters ready", EventRecordOp{ready}));
        w.program().ops.push_back(make_op(r, compute, "layer: wait", EventWaitOp{ready}));
        CopyOp read;
        read.copies = {CopyDescriptor{Region{Buffer{r, Space::kArena, 0}, g.landing_offset,
                                             g.landing_bytes, g.landing_bytes, 1},
                                      Region{Buffer{r, Space::kOutput, at.output_base}, 0,
                                             g.landing_bytes, g.landing_bytes, 1}}};
        w.program().ops.push_back(
            make_op(r, compute, "layer: reads its parameters", std::move(read)));
        w.program().ops.push_back(make_op(r, compute, "layer: release", EventRecordOp{release}));
      }
      released[g.landing_slot] = release;
      layer_done[c.group] = release;
    } else {
      if (!sizes.output_bytes.empty()) buffers.output = at.output_base;
      buffers.done_event = w.event();
      for (int r = 0; r < ranks; ++r) {
        w.program().ops.push_back(
            make_op(r, caller, "lane: call done", EventRecordOp{buffers.done_event}));
      }
    }
    w.add_buffers(sizes);
    out.calls.push_back(buffers);
  }
  out.program = std::move(w.program());
  out.program.calls.assign(static_cast<std::size_t>(ranks), identities);
  return out;
}

}  // namespace tide::program
