// TIDE-AG program builder (Sec. 3.1-3.2, Fig. 5).
//
// Steps, for rank r = (n, l) of M nodes x L GPUs; R = ceil(log2 M) Bruck rounds:
//   readiness  1. Publish that r's landing is free: +1 on counter READY of every local GPU.
//   caller     2. With a mixed-precision cast, cast each fp32 master shard into stage slot 0.
//              3. Wait READY >= L (every local landing that r will write is free); record ENTRY.
//              4. For d = 0..R-1: for d >= 1 wait GO[d] (the round's target has the heads of
//                 round d-1: lead-based pacing); wait DATA[d'] for the earlier rounds whose
//                 slots this round forwards; put the round's first c_d slots to rank
//                 ((n - 2^d) mod M, l) as a head (signalling HEAD[d] there) then a tail
//                 (signalling DATA[d] there).
//   pacing     5. For d = 1..R-1: wait HEAD[d-1] >= 1, then +1 on GO[d] of ((n + 2^d) mod M, l).
//   scatter    6. After ENTRY, copy slot 0 (the own shard) to its landing on every local GPU,
//                 then, group by group as each round's DATA arrives, the stage slots (strided
//                 copies for runs of >= 4 slots). One batched copy per destination GPU.
//              7. +1 on LANDED of every local GPU; +1 on CREDIT[d] of each round's sender
//                 ((n + 2^d) mod M, l): its stage slots are consumed (per-area credits).
//   completion 8. Wait LANDED >= L (every local GPU has written its shards into r's
//                 landing: the node-wide completion fence); record READY_EVENT, which FSDP2
//                 waits on before consuming the parameters.
// NOTE [one-node TIDE-AG]
// On one node (M = 1, AgPlan::one_node(): the shard arrives per call, cast or staged) there
// are no rounds and no receive stage. Steps 2-3 become: wait READY >= L (every local landing
// free), then cast or copy each parameter's shard straight into this rank's rows of its own
// landing (Eq. 2's landing_offset(p, r)), record ENTRY. Step 6 copies those rows by copy
// engine from the own landing into the same rows of every peer's landing (a push; the own
// landing is not copied onto itself). Steps 7-8 are unchanged: LANDED from every local GPU is
// the completion fence. The all-gather's memory is the landing slot alone (the 2-slot ring).
// Faults: ag-no-landing-readiness (the cast or copy into the own landing, and the pushes, lose
// their edge from the landing's previous user) and ag-no-completion-fence still apply.
// Synchronisation contract: a stage slot is read (forwarded or scattered) only after the
// DATA signal of the put that wrote it; a landing is written only after every local GPU
// published READY; parameters are consumed only after READY_EVENT (completion before
// consumption, Sec. 3.2). Every call of a sequence has the same op order on every rank.
#include "tide/program/ag_builder.hpp"

#include <algorithm>
#include <string>

#include "tide/core/cta_budgets.hpp"
#include "tide/core/error.hpp"
#include "tide/core/plan_validator.hpp"
#include "tide/program/emitter.hpp"

namespace tide::program {
namespace {

// Counter ids (per rank): the call's own from `base`; stage credits shared by every call.
struct AgCounters {
  int base = 0;
  int rounds = 0;
  int shared_credit = 0;
  int ready() const { return base; }
  int landed() const { return base + 1; }
  int head(int d) const { return base + 2 + d; }
  int data(int d) const { return base + 2 + rounds + d; }
  int go(int d) const { return base + 2 + 2 * rounds + d; }
  int end() const { return base + 2 + 3 * rounds; }
  int credit(int d) const { return shared_credit + d; }  // cumulative over calls
};

// Event ids (per rank), relative to the call's event_base.
constexpr int kEntryEvent = 0;
constexpr int kReadyEvent = 1;
constexpr int kPreviousConsumerEvent = 2;
constexpr int kRoundsDoneEvent = 3;
constexpr int kScatterDoneEvent = 4;
constexpr int kUsedEvent = 5;
constexpr int kAgEvents = 6;

struct Builder : Emitter {
  const AgPlan& plan;
  const AgProgramOptions& options;
  const GroupLayout& layout;
  const Topology& topo;
  const CallPlacement& at;
  const AgShared& shared;
  AgArenaLayout arena;
  AgCounters counters;
  int readiness = 0, caller = 0, pacing = 0, scatter = 0, completion = 0, compute = 0;

  bool injected(Fault fault) const { return options.fault == fault; }
  int ev(int id) const { return at.event_base + id; }

  Region arena_region(int rank, std::int64_t offset, std::int64_t bytes) const {
    return Region{Buffer{rank, Space::kArena, 0}, offset, bytes, bytes, 1};
  }
  // Arena offset of node-local slot `slot` (0 = own shard) on any rank.
  std::int64_t slot_offset(int slot) const {
    if (slot == 0 && !plan.options().shard_in_stage()) return arena.resident;
    return arena.stage + plan.stage_slot_offset(slot);
  }

  // Descriptors for bytes [begin, end) of round `round`'s transfer from `rank` (its slots
  // 0..c_d-1 back to back) into the target's slots [2^d, 2^d + c_d), which are contiguous.
  std::vector<CopyDescriptor> transfer(const AgRound& round, int rank, int target,
                                       std::int64_t begin, std::int64_t end) const {
    const std::int64_t s = layout.shard_bytes();
    const std::int64_t dst_base = arena.stage + plan.stage_slot_offset(round.first_slot);
    std::vector<CopyDescriptor> out;
    // Source pieces: slot 0, then slots 1..c_d-1 (contiguous in the stage).
    const std::int64_t piece_start[2] = {0, s};
    const std::int64_t piece_end[2] = {s, round.slot_count * s};
    const std::int64_t piece_src[2] = {slot_offset(0), round.slot_count > 1 ? slot_offset(1) : 0};
    for (int i = 0; i < 2; ++i) {
      const std::int64_t a = std::max(begin, piece_start[i]);
      const std::int64_t b = std::min(end, piece_end[i]);
      if (a >= b) continue;
      out.push_back(CopyDescriptor{arena_region(rank, piece_src[i] + (a - piece_start[i]), b - a),
                                   arena_region(target, dst_base + a, b - a)});
    }
    return out;
  }

  void build_rank(int rank) {
    const int n = topo.node_of(rank);
    const int l = topo.local_of(rank);
    const int m = topo.nodes();
    const int gpus = topo.gpus_per_node();
    const std::string who = "AG r" + std::to_string(rank) + " ";

    // 0. compute: the previous user of the landing, then (after step 8) this call's user. In
    // a step the previous user is an earlier call's consumer (placement.entry_event).
    const Region landing = arena_region(rank, arena.landing, layout.unsharded_bytes());
    const Region output{Buffer{rank, Space::kOutput, at.output}, 0, landing.width, landing.width,
                        1};
    if (at.entry_event >= 0) {
      wait_event(rank, readiness, at.entry_event, who + "wait for the landing's previous user");
    } else if (options.consumer && options.previous_user) {
      auto& previous = add<CopyOp>(rank, compute, who + "previous layer reads the landing");
      previous.copies = {CopyDescriptor{landing, output}};
      record_event(rank, compute, ev(kPreviousConsumerEvent), who + "landing free");
      wait_event(rank, readiness, ev(kPreviousConsumerEvent),
                 who + "wait for the landing's previous user");
    }

    // 1. readiness
    for (int d = 0; d < gpus; ++d) {
      signal(rank, readiness, topo.rank(n, d), counters.ready(),
             who + "landing free -> GPU " + std::to_string(topo.rank(n, d)));
    }

    // 2-3. caller: cast or copy the shards into stage slot 0 (after this rank's previous
    // scatter, which read the slot), entry. With a resident shard nothing here waits for the
    // previous call: incoming puts are guarded by the stage credits below, and this rank's own
    // earlier puts precede on this stream.
    if (plan.options().shard_in_stage() && shared.calls > 0) {
      wait_event(rank, caller,
                 shared.scatter_done_events[static_cast<std::size_t>(shared.calls - 1)],
                 who + "previous call's scatter done");
    }
    const bool one_node = plan.one_node();
    // Where parameter p's shard goes: stage slot 0, or on one node the own landing rows.
    auto shard_at = [&](int p) {
      const ParamLayout& pl = layout.param(p);
      return one_node ? arena.landing + layout.landing_offset(p, rank) : slot_offset(0) + pl.offset;
    };
    if (one_node && !injected(Fault::kAgNoLandingReadiness)) {
      wait(rank, caller, counters.ready(), gpus, who + "wait local landings free");
    }
    if (plan.options().mixed_precision_cast) {
      for (int p = 0; p < layout.param_count(); ++p) {
        const ParamLayout& pl = layout.param(p);
        auto& op = add<CastOp>(rank, caller, who + "cast p" + std::to_string(p));
        op.src = Region{Buffer{rank, Space::kTensor, at.tensor_base + p}, 0, pl.shard_elems() * 4,
                        pl.shard_elems() * 4, 1};
        op.dst = arena_region(rank, shard_at(p), pl.shard_bytes);
        op.ctas = kDefaultCastCtas;
      }
    } else if (plan.options().staged_shards) {
      auto& op = add<CopyOp>(rank, caller,
                             who + (one_node ? "copy the shards into the own landing rows"
                                             : "copy the shards into stage slot 0"));
      for (int p = 0; p < layout.param_count(); ++p) {
        const ParamLayout& pl = layout.param(p);
        op.copies.push_back(CopyDescriptor{Region{Buffer{rank, Space::kTensor, at.tensor_base + p},
                                                  0, pl.shard_bytes, pl.shard_bytes, 1},
                                           arena_region(rank, shard_at(p), pl.shard_bytes)});
      }
    }
    if (!one_node && !injected(Fault::kAgNoLandingReadiness)) {
      wait(rank, caller, counters.ready(), gpus, who + "wait local landings free");
    }
    record_event(rank, caller, ev(kEntryEvent), who + "entry");

    // 4. caller: Bruck rounds
    for (const AgRound& round : plan.rounds()) {
      const int d = round.index;
      const int target = topo.rank(mod(n - round.peer_distance, m), l);
      if (round.paced) {
        wait(rank, caller, counters.go(d), 1,
             who + "round " + std::to_string(d) + " paced by its target");
      }
      if (shared.calls > 0 && !injected(Fault::kAgNoStageCredit)) {
        wait(rank, caller, counters.credit(d), shared.calls,
             who + "round " + std::to_string(d) + " stage credit from r" + std::to_string(target));
      }
      for (const AgRound& earlier : plan.rounds()) {
        if (injected(Fault::kAgForwardBeforeArrival)) break;
        if (earlier.index < d && earlier.first_slot < round.slot_count) {
          wait(rank, caller, counters.data(earlier.index), 1,
               who + "round " + std::to_string(d) + " needs round " +
                   std::to_string(earlier.index) + "'s slots");
        }
      }
      auto& head = add<RailPutOp>(
          rank, caller, who + "round " + std::to_string(d) + " head -> r" + std::to_string(target));
      head.copies = transfer(round, rank, target, 0, round.head_bytes);
      head.counter = Counter{target, counters.head(d)};
      head.value = 1;
      auto& tail = add<RailPutOp>(
          rank, caller, who + "round " + std::to_string(d) + " tail -> r" + std::to_string(target));
      tail.copies = transfer(round, rank, target, round.head_bytes, round.bytes);
      tail.counter = Counter{target, counters.data(d)};
      tail.value = 1;
    }
    record_event(rank, caller, ev(kRoundsDoneEvent), who + "rounds sent");

    // 5. pacing
    for (const AgRound& round : plan.rounds()) {
      if (!round.paced) continue;
      const int d = round.index;
      wait(rank, pacing, counters.head(d - 1), 1,
           who + "heads of round " + std::to_string(d - 1) + " arrived");
      signal(rank, pacing, topo.rank(mod(n + round.peer_distance, m), l), counters.go(d),
             who + "go round " + std::to_string(d));
    }

    // 6-7. scatter
    wait_event(rank, scatter, ev(kEntryEvent), who + "scatter after entry");
    const std::vector<AgScatterCopy> copies = plan.scatter_copies(n, l);
    auto emit = [&](std::size_t first, std::size_t last, const std::string& what) {
      for (int d = 0; d < gpus; ++d) {
        const int dst_rank = topo.rank(n, d);
        if (plan.one_node() && dst_rank == rank) continue;  // the rows are there already
        auto& op = add<CopyOp>(rank, scatter,
                               who + "scatter " + what + " -> GPU " + std::to_string(dst_rank));
        for (std::size_t i = first; i < last; ++i) {
          const AgScatterCopy& c = copies[i];
          const std::int64_t src = (c.from_resident ? arena.resident : arena.stage) + c.src_offset;
          if (plan.one_node()) {  // NOTE [one-node TIDE-AG]: from the own landing rows
            op.copies.push_back(CopyDescriptor{
                Region{Buffer{rank, Space::kArena, 0}, arena.landing + c.dst_offset, c.width,
                       c.dst_pitch, c.height},
                Region{Buffer{dst_rank, Space::kArena, 0}, arena.landing + c.dst_offset, c.width,
                       c.dst_pitch, c.height}});
            continue;
          }
          op.copies.push_back(CopyDescriptor{
              Region{Buffer{rank, Space::kArena, 0}, src, c.width, c.src_pitch, c.height},
              Region{Buffer{dst_rank, Space::kArena, 0}, arena.landing + c.dst_offset, c.width,
                     c.dst_pitch, c.height}});
        }
      }
    };
    std::size_t next = 0;
    auto end_of = [&](int last_slot) {  // copies whose first slot is < last_slot
      std::size_t e = next;
      while (e < copies.size() && copies[e].first_slot < last_slot)
        ++e;
      return e;
    };
    std::size_t own_end = end_of(1);
    emit(next, own_end, "own shard");
    next = own_end;
    for (const AgSlotGroup& g : plan.slot_groups()) {
      if (!injected(Fault::kAgScatterBeforeArrival)) {
        wait(rank, scatter, counters.data(g.round), 1,
             who + "round " + std::to_string(g.round) + " arrived");
      }
      const std::size_t group_end = end_of(g.first_slot + g.slot_count);
      emit(next, group_end,
           "slots [" + std::to_string(g.first_slot) + "," +
               std::to_string(g.first_slot + g.slot_count) + ")");
      next = group_end;
    }
    if (next != copies.size()) throw InternalError("AG scatter copies outside every slot group");
    for (int d = 0; d < gpus; ++d) {
      signal(rank, scatter, topo.rank(n, d), counters.landed(),
             who + "shards landed on GPU " + std::to_string(topo.rank(n, d)));
    }
    // Stage credits once every slot was scattered and forwarded (per-area, cumulative).
    wait_event(rank, scatter, ev(kRoundsDoneEvent), who + "forwards done");
    for (const AgRound& round : plan.rounds()) {
      signal(rank, scatter, topo.rank(mod(n + round.peer_distance, m), l),
             counters.credit(round.index),
             who + "stage credit round " + std::to_string(round.index));
    }

    record_event(rank, scatter, ev(kScatterDoneEvent), who + "scatter done");

    // 8. completion
    if (!injected(Fault::kAgNoCompletionFence)) {
      wait(rank, completion, counters.landed(), gpus, who + "node-wide completion fence");
    }
    record_event(rank, completion, ev(kReadyEvent), who + "parameters ready");
    if (options.consumer) {
      wait_event(rank, compute, ev(kReadyEvent), who + "compute waits for parameters");
      auto& use = add<CopyOp>(rank, compute, who + "layer reads its parameters");
      use.copies = {CopyDescriptor{landing, output}};
      record_event(rank, compute, ev(kUsedEvent), who + "layer done with them");
    }
  }
};

}  // namespace

AgArenaLayout ag_arena_layout(const AgPlan& plan) {
  const GroupLayout& layout = plan.layout();
  AgArenaLayout a;
  a.resident = 0;
  a.stage = plan.options().shard_in_stage() ? 0 : layout.shard_bytes();
  a.landing = a.stage + plan.stage_bytes();
  a.arena_bytes = a.landing + layout.unsharded_bytes();
  return a;
}

Program build_ag_call(const AgPlan& plan, const AgProgramOptions& options,
                      const CallPlacement& placement, const AgArenaLayout& areas, AgShared& shared,
                      AgProgramIds* ids) {
  require_valid_plan(plan);  // Sec. 3.1: a rejected plan never becomes a program
  const GroupLayout& layout = plan.layout();
  Builder b{{}, plan, options, layout, layout.topology(), placement, shared, areas, {}};
  b.counters.base = placement.counter_base;
  b.counters.rounds = static_cast<int>(plan.rounds().size());
  b.counters.shared_credit = shared.stage_credit;
  Program& p = b.program;
  p.ranks = b.topo.world();
  b.readiness = p.stream("readiness");
  b.caller = p.stream("caller");
  b.pacing = p.stream("pacing");
  b.scatter = p.stream("scatter");
  b.completion = p.stream("completion");
  if (options.consumer) b.compute = p.stream("compute");
  p.counters = std::max(b.counters.end(), shared.stage_credit + b.counters.rounds);
  p.events = placement.event_base + kAgEvents;
  for (int r = 0; r < p.ranks; ++r)
    b.build_rank(r);
  shared.scatter_done_events.push_back(b.ev(kScatterDoneEvent));
  ++shared.calls;
  if (ids) {
    ids->ready_event = b.ev(kReadyEvent);
    ids->used_event = b.ev(kUsedEvent);
  }
  return std::move(b.program);
}

std::vector<std::int64_t> ag_input_bytes(const AgPlan& plan) {
  return shard_input_bytes(plan.layout(), plan.options());
}

std::vector<std::int64_t> shard_input_bytes(const GroupLayout& layout, const AgOptions& options) {
  std::vector<std::int64_t> bytes;
  if (!options.shard_in_stage()) return bytes;
  const std::int64_t item = options.mixed_precision_cast ? 4 : 0;
  for (const ParamLayout& pl : layout.params())
    bytes.push_back(item != 0 ? pl.shard_elems() * item : pl.shard_bytes);
  return bytes;
}

int ag_call_event_count() {
  return kAgEvents;
}

Program build_ag_program(const AgPlan& plan, const AgProgramOptions& options, AgProgramIds* ids) {
  const GroupLayout& layout = plan.layout();
  const AgArenaLayout areas = ag_arena_layout(plan);
  AgShared shared;
  shared.stage_credit = 0;
  CallPlacement placement;
  placement.counter_base = static_cast<int>(plan.rounds().size());
  Program p = build_ag_call(plan, options, placement, areas, shared, ids);
  BufferSizes sizes;
  sizes.arena_bytes = areas.arena_bytes;
  sizes.tensor_bytes = ag_input_bytes(plan);
  if (options.consumer) sizes.output_bytes = {layout.unsharded_bytes()};
  p.buffers.assign(static_cast<std::size_t>(p.ranks), sizes);
  return p;
}

std::string ag_fault_inapplicable(Fault fault, const AgPlan& plan) {
  if (std::string why = fault_collective_mismatch(fault, "all-gather"); !why.empty()) return why;
  const int m = plan.layout().topology().nodes();
  switch (fault) {
    case Fault::kAgScatterBeforeArrival:
      return m > 1 ? "" : "a single node receives no stage slots (use --nodes 2 or more)";
    case Fault::kAgForwardBeforeArrival:
      // Round 1 forwards slots [0, min(2, M - 2)): a received slot only from M = 4 on.
      return m > 3 ? "" : "no round forwards received slots below 4 nodes (use --nodes 4 or more)";
    default:  // kNone, and faults that show on every plan
      return "";
  }
}

}  // namespace tide::program
