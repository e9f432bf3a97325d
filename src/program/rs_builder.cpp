// TIDE-RS program builder (Sec. 4.1-4.2, 5.2-5.3, App. E Alg. 1), one call, bank b = e mod 2.
//
// Steps, for rank r = (n, j) of M nodes x L GPUs (plan: sub-slices, waves, rounds):
//   caller  1. Record ENTRY: the gradients {G_p} are ready (FSDP2's readyEv).
//   push    2. Read phase, for each Level 1 destination in read order (remote destinations
//              J = 1..n_out, then the own node of each pass, then J > n_out): for every
//              other local GPU k, wait until k has freed staging slot z (FREE), copy this
//              rank's pieces of k's sub-slice s = (k + c_bar) mod L (Eq. 7) for the
//              destination ranks of node t that s covers (its R = block_rows() rows: all L
//              across ranks, rank s per rank; NOTE [sub-slice geometry]) into slot z on k
//              (one strided descriptor per rank-run, tails for padded rows), then +1 on k's
//              STAGED[z].
//   sum     3. For the same destinations: wait STAGED[z] from the L - 1 pushers (and, in
//              Slot-Reuse, SENT >= J - n_out: the outbox block's previous send finished,
//              Eq. 9); Level 1 sum (staged in local-rank order, then own, times alpha;
//              NOTE [arithmetic order]) into outbox block (J - 1) mod n_out, or the bank's
//              own-node spare; +1 FREE[j][z] on each pusher; +1 SUMMED (remote) or record
//              OWN_DONE[pass].
//   net     4. Network phase, wave by wave (generation q = g mod n_par): a wave that
//              reuses a generation waits CREDIT[g] from all its targets; each k-way round
//              waits SUMMED >= J, puts outbox block J over rail j into inbox block s of
//              rank ((n + c) mod M, j) signalling ARRIVED[g] there, +1 SENT; then waits
//              for the arrivals of the round d - 1 rounds back (d = RsOptions::
//              rounds_in_flight; d = 1: lockstep rounds), and after the last round for the
//              rounds still unobserved.
//   relay   5. For each wave: wait ARRIVED[g] (all remote contributors) and OWN_DONE when
//              the own node is in the wave; for a switch-reduce landing, zero the wave's
//              stale blocks (after INBOX_FREE) and copy the own spare into inbox block j;
//              then +1 WAVE_READY[g] on every local GPU.
//   land    6. For each wave: wait WAVE_READY[g] >= L; per landing run of this rank in each
//              sub-slice (RsPlan::landing_runs: one, or one per parameter piece
//              node-contiguous), fold the wave's partials (contributor order) into the
//              output (wave 0 overwrites unless accumulating); +1 INBOX_FREE[q] on every
//              local GPU. Record LAND_DONE.
//   credit  7. For each wave that reuses generation q: wait INBOX_FREE[q] from all L local
//              landings of the previous wave on q, then +1 CREDIT[g] on each sender.
//   host    8. Wait for the push and sum streams (read completion), record READ_DONE, and
//              release the gradients (FSDP2 may reuse their memory).
//   land    9. Record DONE (network-order completion; the caller stream never waits, so call
//              e + 1's read phase overlaps call e's network phase).
// Synchronisation contract (App. E I1-I4): staging, outbox and inbox storage is reused only
// after its previous reader finished (FREE, SENT, INBOX_FREE -> CREDIT); gradients live
// through READ_DONE; every wait targets a producer earlier in the common collective order.
#include "tide/program/rs_builder.hpp"

#include <algorithm>
#include <string>

#include "tide/core/error.hpp"
#include "tide/core/plan_validator.hpp"
#include "tide/program/emitter.hpp"
#include "tide/program/rs_one_node.hpp"

namespace tide::program {
namespace {

struct ReadItem {
  bool own = false;  // the own node's partial of `pass` (into the spare)
  int pass = 0;
  int contributor = 0;  // c
  int destination = 0;  // J, 1-based, remote only
};

struct Builder : Emitter {
  const RsPlan& plan;
  const RsProgramOptions& options;
  const GroupLayout& layout;
  const Topology& topo;
  const CallPlacement& at;
  RsShared& shared;
  const RsArenaLayout& areas;
  std::vector<ReadItem> order{};
  int m = 0, l = 0, rows = 0, n_stg = 0, waves = 0, bank = 0;
  std::int64_t b_grad = 0, e_pass = 0, chunk = 0;
  int caller = 0, push = 0, sum = 0, net = 0, relay = 0, land = 0, credit = 0, host = 0;

  bool injected(Fault fault) const { return options.fault == fault; }

  // Counter ids (per rank): shared with the step's other calls ...
  int staged(int z) const { return shared.staged + z; }
  int freed(int owner, int z) const { return shared.freed + owner * n_stg + z; }
  int inbox_free(int q) const { return shared.inbox_free + q; }
  // ... and this call's own.
  int summed() const { return at.counter_base; }
  int sent() const { return at.counter_base + 1; }
  int arrived(int g) const { return at.counter_base + 2 + g; }
  int wave_ready(int g) const { return at.counter_base + 2 + waves + g; }
  int credit_of(int g) const { return at.counter_base + 2 + 2 * waves + g; }
  int counter_end() const { return at.counter_base + 2 + 3 * waves; }
  // Event ids (per rank), this call's own.
  static constexpr int kEntry = 0, kPushDone = 1, kSumDone = 2, kReadDone = 3, kLandDone = 4,
                       kDone = 5, kNetDone = 6;
  int ev(int id) const { return at.event_base + id; }
  int own_done(int pass) const { return at.event_base + 7 + pass; }

  Region arena(int rank, std::int64_t offset, std::int64_t width, std::int64_t pitch,
               std::int64_t height) const {
    return Region{Buffer{rank, Space::kArena, 0}, offset, width, pitch, height};
  }
  std::int64_t staging_slot(int z) const { return areas.staging + z * areas.staging_slot_bytes; }
  std::int64_t outbox_block(int destination) const {
    return areas.outbox +
           (std::int64_t{bank} * areas.outbox_blocks + plan.outbox_block(destination)) *
               areas.block_bytes;
  }
  std::int64_t spare(int pass) const {
    return areas.spares + (std::int64_t{bank} * areas.spare_blocks + pass) * areas.block_bytes;
  }
  std::int64_t inbox_block(int generation, int s) const {
    return areas.inbox + (std::int64_t{generation} * l + s) * areas.block_bytes;
  }
  Buffer gradient(int rank, int param) const {
    return Buffer{rank, Space::kTensor, at.tensor_base + param};
  }
  std::int64_t live(int pass, int s) const {
    return plan.sub_slice_end(pass, s) - plan.sub_slice_begin(pass, s);
  }
  int destination_node(int n, const ReadItem& item) const {
    return item.own ? n : mod(n + item.contributor, m);
  }
  static std::string tag(const ReadItem& item) {
    return item.own ? "own node pass " + std::to_string(item.pass)
                    : "J" + std::to_string(item.destination);
  }

  void build_read_order() {
    const int remote = plan.remote_destinations();
    const int first = std::min(plan.outbox_depth(), remote);
    auto remote_item = [&](int destination) {
      ReadItem item;
      item.destination = destination;
      item.pass = (destination - 1) / (m - 1);
      item.contributor = (destination - 1) % (m - 1) + 1;
      return item;
    };
    for (int d = 1; d <= first; ++d)
      order.push_back(remote_item(d));
    for (int q = 0; q < plan.passes(); ++q)
      order.push_back(ReadItem{true, q, m, 0});
    for (int d = first + 1; d <= remote; ++d)
      order.push_back(remote_item(d));
  }

  // Staging chunks of a sub-slice part with `elems` live columns (at least one, possibly
  // empty, so every destination keeps its signals).
  int chunks(std::int64_t elems) const {
    return std::max<int>(1, static_cast<int>((elems + chunk - 1) / chunk));
  }
  // The pieces of sub-slice s (pass `pass`) inside staging chunk q, clipped to it.
  std::vector<RsPiece> chunk_pieces(int pass, int s, int q) const {
    const std::int64_t begin = plan.sub_slice_begin(pass, s) + q * chunk;
    const std::int64_t end = std::min(plan.sub_slice_end(pass, s), begin + chunk);
    return plan.pieces(pass, s, begin, end);
  }

  // Step 2: this rank's pushes of staging chunk q into owner `owner`'s slot z.
  void push_to(int rank, int owner, const ReadItem& item, int z, int q) {
    const int n = topo.node_of(rank);
    const int me = topo.local_of(rank);
    const int t = destination_node(n, item);
    const int s = plan.sub_slice(owner, item.contributor);
    const int position = me < owner ? me : me - 1;  // local-rank order without the owner
    const std::int64_t begin = plan.sub_slice_begin(item.pass, s) + q * chunk;
    const std::int64_t base = staging_slot(z) + position * rows * chunk * b_grad;
    const int first = plan.first_row_rank(s);  // the destination local rank of row 0
    const int owner_rank = topo.rank(n, owner);
    auto& op = add<CopyOp>(rank, push,
                           "RS r" + std::to_string(rank) + " push " + tag(item) + " s" +
                               std::to_string(s) + " chunk " + std::to_string(q) + " -> r" +
                               std::to_string(owner_rank));
    for (const RsPiece& piece : chunk_pieces(item.pass, s, q)) {
      const ParamLayout& pl = layout.param(piece.param);
      const std::int64_t dst_col = (piece.span_begin - begin) * b_grad;
      // The rows' destination ranks t*L+first .. t*L+first+full-1 hold the whole piece (one
      // strided descriptor); the next one may be cut by D_p (a short tail); the rest hold
      // only padding.
      int full = 0;
      while (full < rows && plan.valid_length(piece, topo.rank(t, first + full)) == piece.length())
        ++full;
      if (full > 0) {
        op.copies.push_back(CopyDescriptor{
            Region{gradient(rank, piece.param),
                   (topo.rank(t, first) * pl.shard_elems() + piece.param_offset) * b_grad,
                   piece.length() * b_grad, pl.shard_elems() * b_grad, full},
            arena(owner_rank, base + dst_col, piece.length() * b_grad, chunk * b_grad, full)});
      }
      const std::int64_t tail =
          full < rows ? plan.valid_length(piece, topo.rank(t, first + full)) : 0;
      if (tail > 0) {
        op.copies.push_back(CopyDescriptor{
            Region{gradient(rank, piece.param),
                   (topo.rank(t, first + full) * pl.shard_elems() + piece.param_offset) * b_grad,
                   tail * b_grad, tail * b_grad, 1},
            arena(owner_rank, base + full * chunk * b_grad + dst_col, tail * b_grad, tail * b_grad,
                  1)});
      }
    }
  }

  // Step 3: this rank's Level 1 sum of staging chunk q for one destination.
  void sum_for(int rank, const ReadItem& item, int z, int q) {
    const int n = topo.node_of(rank);
    const int me = topo.local_of(rank);
    const int t = destination_node(n, item);
    const int s = plan.sub_slice(me, item.contributor);
    const std::int64_t begin = plan.sub_slice_begin(item.pass, s) + q * chunk;
    const std::int64_t cols = std::clamp<std::int64_t>(live(item.pass, s) - q * chunk, 0, chunk);
    auto& op = add<SumOp>(rank, sum,
                          "RS r" + std::to_string(rank) + " sum " + tag(item) + " s" +
                              std::to_string(s) + " chunk " + std::to_string(q));
    const std::int64_t out = item.own ? spare(item.pass) : outbox_block(item.destination);
    op.dst = arena(rank, out + q * chunk * 4, cols * 4, e_pass * 4, rows);
    op.in_dtype = layout.grad_dtype();
    op.alpha = options.alpha;
    op.ctas = options.sum_ctas;
    for (int k = 0; k < l - 1; ++k) {
      op.staged.push_back(arena(rank, staging_slot(z) + k * rows * chunk * b_grad, cols * b_grad,
                                chunk * b_grad, rows));
    }
    for (int i = 0; i < rows; ++i) {
      const int destination = topo.rank(t, plan.first_row_rank(s) + i);
      for (const RsPiece& piece : chunk_pieces(item.pass, s, q)) {
        const std::int64_t valid = plan.valid_length(piece, destination);
        if (valid == 0) continue;
        op.segments.push_back(SumSegment{
            i, piece.span_begin - begin, at.tensor_base + piece.param,
            destination * layout.param(piece.param).shard_elems() + piece.param_offset, valid});
      }
    }
  }

  // Per wave: how often its inbox generation was used before it (earlier calls included).
  std::vector<int> uses_before{};

  // Bank b = e mod 2 was last used by call e - 2: its outbox blocks must have been sent (this
  // rank's NET_DONE of that call) and its spares read by every local landing of that call
  // (LANDINGS_DONE counts L per finished call).
  void reuse_bank(int rank, const std::string& who) {
    if (shared.calls < 2) return;
    if (!injected(Fault::kRsBankReuse)) {
      wait_event(rank, sum, shared.net_done_events[static_cast<std::size_t>(shared.calls - 2)],
                 who + "bank " + std::to_string(bank) + " sent by call " +
                     std::to_string(shared.calls - 2));
      wait(rank, sum, shared.landings_done, std::int64_t{l} * (shared.calls - 1),
           who + "bank " + std::to_string(bank) + " spares landed by call " +
               std::to_string(shared.calls - 2));
    }
  }

  // The phases of one rank's call, in the order the steps above number them. Each emits onto
  // its own streams; build_rank calls them in the order the ops are listed.
  void build_rank(int rank) {
    const std::string who = "RS r" + std::to_string(rank) + " ";
    entry(rank, who);                   // 1
    read_phase(rank, who);              // 2-3
    RoundWindow window{rank, who, {}};  // 4: rounds in flight across waves
    for (const RsWave& wave : plan.waves()) {
      send_wave(window, wave);      // 4
      relay_wave(rank, who, wave);  // 5
      land_wave(rank, who, wave);   // 6
    }
    finish_network(window);        // 4, 6: the last arrivals, LAND_DONE
    grant_credits(rank, who);      // 7
    release_gradients(rank, who);  // 8
    // 9. completion in network order, on the landing stream: the caller stream never blocks,
    // so the next call's read phase starts as soon as its gradients are ready (Sec. 5.2).
    record_event(rank, land, ev(kDone), who + "reduce-scatter done");
  }

  // 1. caller: entry (in a step, after backward produced the gradients)
  void entry(int rank, const std::string& who) {
    if (at.entry_event >= 0) {
      wait_event(rank, caller, at.entry_event, who + "wait for the gradients");
    }
    record_event(rank, caller, ev(kEntry), who + "gradients ready");
  }

  // 2-3. read phase: pushes and sums
  void read_phase(int rank, const std::string& who) {
    const int n = topo.node_of(rank);
    const int me = topo.local_of(rank);
    wait_event(rank, push, ev(kEntry), who + "push after entry");
    wait_event(rank, sum, ev(kEntry), who + "sum after entry");
    reuse_bank(rank, who);
    // Staging fills so far (earlier calls included): the FREE/STAGED counters are cumulative.
    std::vector<int>& pushed = shared.pushed[static_cast<std::size_t>(rank)];  // per owner
    int& fills = shared.fills[static_cast<std::size_t>(rank)];  // this rank's, as owner
    for (const ReadItem& item : order) {
      for (int owner = 0; owner < l; ++owner) {
        if (owner == me) continue;
        const int s = plan.sub_slice(owner, item.contributor);
        for (int q = 0; q < chunks(live(item.pass, s)); ++q) {
          const int x = pushed[static_cast<std::size_t>(owner)]++;
          const int z = x % n_stg;
          if (!injected(Fault::kRsStagingReuse)) {
            wait(rank, push, freed(owner, z), x / n_stg,
                 who + "staging slot " + std::to_string(z) + " on GPU " + std::to_string(owner) +
                     " free");
          }
          push_to(rank, owner, item, z, q);
          signal(rank, push, topo.rank(n, owner), staged(z), who + "staged " + tag(item));
        }
      }
      if (!item.own && item.destination > plan.outbox_depth() && !injected(Fault::kRsOutboxReuse)) {
        wait(rank, sum, sent(), item.destination - plan.outbox_depth(),
             who + "outbox block sent before reuse by " + tag(item));
      }
      const int s = plan.sub_slice(me, item.contributor);
      for (int q = 0; q < chunks(live(item.pass, s)); ++q) {
        const int x = fills++;
        const int z = x % n_stg;
        wait(rank, sum, staged(z), std::int64_t{l - 1} * (x / n_stg + 1),
             who + "staging slot " + std::to_string(z) + " filled for " + tag(item));
        sum_for(rank, item, z, q);
        for (int k = 0; k < l; ++k) {
          if (k != me) signal(rank, sum, topo.rank(n, k), freed(me, z), who + "free staging");
        }
      }
      if (item.own) {
        record_event(rank, sum, own_done(item.pass), who + "own partial summed");
      } else {
        signal(rank, sum, rank, summed(), who + "summed " + tag(item));
      }
    }
    record_event(rank, push, ev(kPushDone), who + "pushes done");
    record_event(rank, sum, ev(kSumDone), who + "sums done");
  }

  // 4. network phase. Round i's sends follow round i - d's arrivals (d rounds in flight;
  // d = 1 is lockstep); the last d rounds' arrivals are awaited after the last sends.
  struct RoundArrivals {
    int counter = 0;
    int value = 0;
    int index = 0;
  };
  struct RoundWindow {
    int rank = 0;
    std::string who;
    std::vector<RoundArrivals> unobserved;
  };

  void observe_oldest(RoundWindow& w) {
    const RoundArrivals a = w.unobserved.front();
    w.unobserved.erase(w.unobserved.begin());
    WaitOp* arrivals = wait(w.rank, net, a.counter, a.value,
                            w.who + "round " + std::to_string(a.index) + " arrivals");
    if (arrivals != nullptr) arrivals->network_round = true;
  }

  void send_wave(RoundWindow& w, const RsWave& wave) {
    const int rank = w.rank;
    const std::string& who = w.who;
    const int n = topo.node_of(rank);
    const int me = topo.local_of(rank);
    const std::size_t in_flight =
        static_cast<std::size_t>(std::max(1, plan.options().rounds_in_flight));
    const int g = wave.index;
    const int remote = std::min(wave.last_contributor, m - 1) - wave.first_contributor + 1;
    if (uses_before[static_cast<std::size_t>(g)] > 0 && remote > 0 &&
        !injected(Fault::kRsInboxReuse)) {
      wait(rank, net, credit_of(g), remote, who + "inbox credits for wave " + std::to_string(g));
    }
    int arrived_so_far = 0;
    for (int r = 0; r < wave.round_count; ++r) {
      const RsRound& round = plan.rounds()[static_cast<std::size_t>(wave.first_round + r)];
      for (int c = round.first_contributor; c < round.first_contributor + round.width; ++c) {
        const int destination = wave.pass * (m - 1) + c;
        const int t = mod(n + c, m);
        const int s = plan.sub_slice(me, c);
        if (!injected(Fault::kRsSendBeforeSum)) {
          wait(rank, net, summed(), destination, who + "sum of J" + std::to_string(destination));
        }
        auto& put =
            add<RailPutOp>(rank, net,
                           who + "put J" + std::to_string(destination) + " -> r" +
                               std::to_string(topo.rank(t, me)) + " block " + std::to_string(s));
        put.copies = {CopyDescriptor{
            arena(rank, outbox_block(destination), live(wave.pass, s) * 4, e_pass * 4, rows),
            arena(topo.rank(t, me), inbox_block(wave.generation, s), live(wave.pass, s) * 4,
                  e_pass * 4, rows)}};
        put.counter = Counter{topo.rank(t, me), arrived(g)};
        put.value = 1;
        signal(rank, net, rank, sent(), who + "sent J" + std::to_string(destination));
      }
      arrived_so_far += round.width;
      w.unobserved.push_back({arrived(g), arrived_so_far, round.index});
      if (w.unobserved.size() >= in_flight) observe_oldest(w);
    }
  }

  // 5. relay: this GPU's part of the wave is in place
  void relay_wave(int rank, const std::string& who, const RsWave& wave) {
    const int n = topo.node_of(rank);
    const int me = topo.local_of(rank);
    const int g = wave.index;
    const int remote = std::min(wave.last_contributor, m - 1) - wave.first_contributor + 1;
    wait(rank, relay, arrived(g), remote, who + "wave " + std::to_string(g) + " arrived");
    if (wave.has_own_node) {
      wait_event(rank, relay, own_done(wave.pass), who + "own partial ready");
    }
    if (options.landing == LandingStyle::kSwitchReduce) {
      wait(rank, relay, inbox_free(wave.generation),
           std::int64_t{l} * uses_before[static_cast<std::size_t>(g)],
           who + "generation free for zeroing");
      for (int s = 0; s < l; ++s) {
        if (((wave.zeroed_blocks[static_cast<std::size_t>(me)] >> s) & 1u) &&
            !injected(Fault::kRsNoStaleZeroing)) {
          auto& zero = add<ZeroOp>(rank, relay, who + "zero stale block " + std::to_string(s));
          zero.dst =
              arena(rank, inbox_block(wave.generation, s), areas.block_bytes, areas.block_bytes, 1);
        }
      }
      if (wave.has_own_node) {
        auto& copy = add<CopyOp>(rank, relay, who + "own spare -> inbox");
        copy.copies = {
            CopyDescriptor{arena(rank, spare(wave.pass), live(wave.pass, me) * 4, e_pass * 4, rows),
                           arena(rank, inbox_block(wave.generation, me), live(wave.pass, me) * 4,
                                 e_pass * 4, rows)}};
      }
    }
    for (int k = 0; k < l; ++k) {
      signal(rank, relay, topo.rank(n, k), wave_ready(g),
             who + "wave " + std::to_string(g) + " ready here");
    }
  }

  // 6. landing of this rank's output (Level 2)
  void land_wave(int rank, const std::string& who, const RsWave& wave) {
    const int n = topo.node_of(rank);
    const int me = topo.local_of(rank);
    const int g = wave.index;
    if (!injected(Fault::kRsLandBeforeArrival)) {
      wait(rank, land, wave_ready(g), l, who + "wave " + std::to_string(g) + " ready on node");
    }
    for (int s = 0; s < l; ++s) {
      // This rank's elements of sub-slice s: one run (row me across ranks, all of s = me
      // per rank), or one per parameter piece node-contiguous (NOTE [sub-slice geometry]).
      for (const RsLandingRun& run : plan.landing_runs(wave.pass, s, me)) {
        auto& op = add<LandOp>(rank, land,
                               who + "land wave " + std::to_string(g) + " s" + std::to_string(s));
        const std::int64_t bytes = run.length * 4;
        op.dst =
            Region{Buffer{rank, Space::kOutput, at.output}, run.span_offset * 4, bytes, bytes, 1};
        op.wave_index = wave.wave_in_pass;
        op.accumulate = options.accumulate;
        op.ctas = options.landing_ctas;
        const std::int64_t at_run = (run.row * e_pass + run.column) * 4;
        if (options.landing == LandingStyle::kSwitchReduce) {
          for (int k = 0; k < l; ++k) {
            op.sources.push_back(
                arena(topo.rank(n, k), inbox_block(wave.generation, s) + at_run, bytes, bytes, 1));
          }
        } else {
          for (int c = wave.first_contributor; c <= wave.last_contributor; ++c) {
            const int gpu = plan.destination_gpu(s, c);
            const std::int64_t from = c == m ? spare(wave.pass) : inbox_block(wave.generation, s);
            op.sources.push_back(arena(topo.rank(n, gpu), from + at_run, bytes, bytes, 1));
          }
        }
        if (injected(Fault::kRsLandTwice)) op.sources.push_back(op.sources.front());
      }
    }
    for (int k = 0; k < l; ++k) {
      signal(rank, land, topo.rank(n, k), inbox_free(wave.generation),
             who + "landed wave " + std::to_string(g));
    }
  }

  // 4 and 6, after the last wave: the arrivals still unobserved, the bank sent, the landings
  // done.
  void finish_network(RoundWindow& w) {
    const int rank = w.rank;
    const int n = topo.node_of(rank);
    while (!w.unobserved.empty())
      observe_oldest(w);
    record_event(rank, net, ev(kNetDone), w.who + "outbox bank sent");
    for (int k = 0; k < l; ++k) {
      signal(rank, land, topo.rank(n, k), shared.landings_done,
             w.who + "landings done -> GPU " + std::to_string(topo.rank(n, k)));
    }
    record_event(rank, land, ev(kLandDone), w.who + "landings done");
  }

  // 7. credits: a wave that reuses an inbox generation (in this call or after an earlier
  // one) gets one from each of its targets once all L landings there read the previous use.
  void grant_credits(int rank, const std::string& who) {
    const int n = topo.node_of(rank);
    const int me = topo.local_of(rank);
    for (const RsWave& wave : plan.waves()) {
      const int g = wave.index;
      const int uses = uses_before[static_cast<std::size_t>(g)];
      if (uses == 0) continue;
      wait(rank, credit, inbox_free(wave.generation), std::int64_t{l} * uses,
           who + "generation " + std::to_string(wave.generation) + " read by every landing");
      for (int c = wave.first_contributor; c <= std::min(wave.last_contributor, m - 1); ++c) {
        signal(rank, credit, topo.rank(mod(n - c, m), me), credit_of(g),
               who + "credit wave " + std::to_string(g));
      }
    }
  }

  // 8. host: read completion and release
  void release_gradients(int rank, const std::string& who) {
    if (!injected(Fault::kRsReleaseBeforeRead)) {
      wait_event(rank, host, ev(kPushDone), who + "pushes finished");
      wait_event(rank, host, ev(kSumDone), who + "sums finished");
    }
    record_event(rank, host, ev(kReadDone), who + "read completion");
    for (int p = 0; p < layout.param_count(); ++p) {
      const ParamLayout& pl = layout.param(p);
      auto& release = add<ReleaseOp>(rank, host, who + "release G" + std::to_string(p));
      release.dst =
          Region{gradient(rank, p), 0, pl.rows * pl.cols * b_grad, pl.rows * pl.cols * b_grad, 1};
    }
  }
};

}  // namespace

bool rs_uses_inbox(const RsPlan& plan, LandingStyle landing) {
  return plan.layout().topology().nodes() > 1 || landing == LandingStyle::kSwitchReduce;
}

RsArenaLayout rs_arena_layout(const RsPlan& plan, LandingStyle landing) {
  return rs_arena_layout({&plan}, landing);
}

RsArenaLayout rs_arena_layout(const std::vector<const RsPlan*>& plans, LandingStyle landing,
                              bool gradient_area) {
  RsArenaLayout a;
  int slots = 0;
  for (const RsPlan* plan : plans) {
    if (gradient_area) a.gradient_bytes = std::max(a.gradient_bytes, rs_gradient_area_bytes(*plan));
    if (plan->one_node() && landing == LandingStyle::kPull) {  // NOTE [one-node TIDE-RS]
      a.staging_slot_bytes = std::max(a.staging_slot_bytes, plan->memory().staging_slot_bytes);
      slots = std::max(slots, plan->options().staging_slots);
      continue;
    }
    const RsMemory mem = plan->memory();
    a.staging_slot_bytes = std::max(a.staging_slot_bytes, mem.staging_slot_bytes);
    a.block_bytes = std::max(a.block_bytes, mem.block_bytes);
    a.outbox_blocks = std::max(a.outbox_blocks, plan->outbox_depth());
    a.spare_blocks = std::max(a.spare_blocks, plan->passes());
    slots = std::max(slots, plan->options().staging_slots);
    if (rs_uses_inbox(*plan, landing)) {
      a.inbox_generations = std::max(a.inbox_generations, plan->generations());
    }
  }
  const int l = plans.empty() ? 0 : plans.front()->layout().topology().gpus_per_node();
  a.staging = 0;
  a.outbox = a.staging + slots * a.staging_slot_bytes;
  a.spares = a.outbox + 2 * std::int64_t{a.outbox_blocks} * a.block_bytes;
  a.inbox = a.spares + 2 * std::int64_t{a.spare_blocks} * a.block_bytes;
  a.arena_bytes = a.inbox + std::int64_t{a.inbox_generations} * l * a.block_bytes;
  if (a.gradient_bytes > 0) {
    a.gradients = (a.arena_bytes + 255) / 256 * 256;
    a.arena_bytes = a.gradients + a.gradient_bytes;
  }
  return a;
}

int rs_call_event_count(const RsPlan& plan) {
  return 7 + plan.passes();
}

Program build_rs_call(const RsPlan& plan, const RsProgramOptions& options,
                      const CallPlacement& placement, RsShared& shared, RsProgramIds* ids) {
  require_valid_plan(plan);  // App. D: a rejected plan never becomes a program
  if (plan.one_node() && options.landing == LandingStyle::kPull) {
    return build_one_node_rs_call(plan, options, placement, shared, ids);  // rs_one_node.cpp
  }
  const GroupLayout& layout = plan.layout();
  if (options.sum_ctas < 1 || options.landing_ctas < 1) {
    throw InvalidArgument("sum and landing CTA budgets must be at least 1");
  }
  const Topology& topo = layout.topology();
  if (static_cast<int>(shared.pushed.size()) != topo.world() ||
      static_cast<int>(shared.generation_uses.size()) < plan.generations()) {
    throw InternalError("RsShared is not sized for this plan's topology and generations");
  }
  if (rs_uses_inbox(plan, options.landing) && shared.areas.inbox_generations < plan.generations()) {
    throw InvalidArgument(
        "the reduce-scatter's arena layout has " + std::to_string(shared.areas.inbox_generations) +
        " inbox generations, this call needs " + std::to_string(plan.generations()) +
        " (NOTE [no inbox on one node]): size the layout with rs_arena_layout(plans, " +
        (options.landing == LandingStyle::kSwitchReduce ? "LandingStyle::kSwitchReduce"
                                                        : "LandingStyle::kPull") +
        ")");
  }
  Builder b{{}, plan, options, layout, topo, placement, shared, shared.areas, {}};
  b.m = topo.nodes();
  b.l = topo.gpus_per_node();
  b.n_stg = plan.options().staging_slots;
  b.waves = static_cast<int>(plan.waves().size());
  b.bank = shared.calls % 2;
  b.b_grad = item_bytes(layout.grad_dtype());
  b.e_pass = plan.pass_elems();
  b.rows = plan.block_rows();
  b.chunk = plan.chunk_elems();
  Program& p = b.program;
  p.ranks = topo.world();
  b.caller = p.stream("caller");
  b.push = p.stream("push");
  b.sum = p.stream("sum");
  b.net = p.stream("net");
  b.relay = p.stream("relay");
  b.land = p.stream("land");
  b.credit = p.stream("credit");
  b.host = p.stream("host");
  p.counters = b.counter_end();
  p.events = placement.event_base + rs_call_event_count(plan);
  b.build_read_order();
  // Inbox generation uses before each wave: earlier calls, then earlier waves of this one.
  std::vector<int> uses = shared.generation_uses;
  for (const RsWave& wave : plan.waves()) {
    b.uses_before.push_back(uses[static_cast<std::size_t>(wave.generation)]++);
  }
  for (int r = 0; r < p.ranks; ++r)
    b.build_rank(r);
  shared.generation_uses = uses;
  shared.net_done_events.push_back(b.ev(Builder::kNetDone));
  shared.read_done_events.push_back(b.ev(Builder::kReadDone));
  ++shared.calls;
  if (ids) {
    ids->done_event = b.ev(Builder::kDone);
    ids->read_done_event = b.ev(Builder::kReadDone);
    ids->net_done_event = b.ev(Builder::kNetDone);
  }
  return std::move(b.program);
}

RsShared rs_shared_state(const std::vector<const RsPlan*>& plans, int first_counter,
                         LandingStyle landing) {
  const RsPlan& first = *plans.front();
  const Topology& topo = first.layout().topology();
  const int l = topo.gpus_per_node();
  int slots = 0, generations = 0;
  for (const RsPlan* plan : plans) {
    slots = std::max(slots, plan->options().staging_slots);
    generations = std::max(generations, plan->generations());
  }
  RsShared shared;
  shared.areas = rs_arena_layout(plans, landing);
  shared.staged = first_counter;
  shared.freed = shared.staged + slots;
  shared.inbox_free = shared.freed + l * slots;
  shared.landings_done = shared.inbox_free + generations;
  shared.pushed.assign(static_cast<std::size_t>(topo.world()),
                       std::vector<int>(static_cast<std::size_t>(l), 0));
  shared.fills.assign(static_cast<std::size_t>(topo.world()), 0);
  shared.generation_uses.assign(static_cast<std::size_t>(generations), 0);
  return shared;
}

Program build_rs_program(const RsPlan& plan, const RsProgramOptions& options, RsProgramIds* ids) {
  const GroupLayout& layout = plan.layout();
  RsShared shared = rs_shared_state({&plan}, 0, options.landing);
  CallPlacement placement;
  placement.counter_base = shared.landings_done + 1;
  Program p = build_rs_call(plan, options, placement, shared, ids);
  BufferSizes sizes;
  sizes.arena_bytes = shared.areas.arena_bytes;
  for (const ParamLayout& pl : layout.params()) {
    sizes.tensor_bytes.push_back(pl.rows * pl.cols * item_bytes(layout.grad_dtype()));
  }
  sizes.output_bytes = {layout.fp32_shard_bytes()};
  p.buffers.assign(static_cast<std::size_t>(p.ranks), sizes);
  return p;
}

std::string rs_fault_inapplicable(Fault fault, const RsPlan& plan,
                                  const RsProgramOptions& options) {
  if (std::string why = fault_collective_mismatch(fault, "reduce-scatter"); !why.empty()) {
    return why;
  }
  const int m = plan.layout().topology().nodes();
  const int l = plan.layout().topology().gpus_per_node();
  switch (fault) {
    case Fault::kRsNoStaleZeroing: {
      if (options.landing != LandingStyle::kSwitchReduce) {
        return "the pull landing reads only the wave's contributors (use the switch-reduce "
               "landing)";
      }
      for (const RsWave& wave : plan.waves()) {
        for (std::uint8_t mask : wave.zeroed_blocks) {
          if (mask != 0) return "";
        }
      }
      return "every wave is a full Latin square: nothing is zeroed (use a wave count that "
             "leaves a partial wave, e.g. --nodes 9 --gpus-per-node 8)";
    }
    case Fault::kRsOutboxReuse:
      return plan.remote_destinations() > plan.outbox_depth()
                 ? ""
                 : "the outbox never refills a block (use --mode slot-reuse with more remote "
                   "destinations than 2k)";
    case Fault::kRsInboxReuse:
      for (const RsWave& wave : plan.waves()) {  // a reusing wave that receives rail puts
        if (wave.index >= plan.generations() && wave.first_contributor < m) return "";
      }
      return "no wave that reuses an inbox generation receives rail puts (use more nodes than "
             "2 W_wave + 1, or --passes 2)";
    case Fault::kRsStagingReuse:
      if (plan.one_node() && options.landing == LandingStyle::kPull) {
        const std::int64_t fills =
            plan.passes() *
            std::max<std::int64_t>(1, (plan.sub_slice_end(0, 0) - plan.sub_slice_begin(0, 0) +
                                       plan.chunk_elems() - 1) /
                                          std::max<std::int64_t>(1, plan.chunk_elems()));
        return l > 1 && fills > plan.options().staging_slots
                   ? ""
                   : "no staging slot is refilled (use L > 1 and more chunks than slots, e.g. "
                     "--chunk-bytes)";
      }
      return l > 1 && plan.passes() * m > plan.options().staging_slots
                 ? ""
                 : "no staging slot is refilled (use L > 1 and more destinations than slots)";
    case Fault::kRsSendBeforeSum:
      return m > 1 ? "" : "a single node sends nothing over the rails";
    case Fault::kRsPullBeforeReady:
    case Fault::kRsReleaseBeforePeerReads:
      if (!rs_one_node_pull(plan) || options.landing != LandingStyle::kPull) {
        return "only a one-node Slot-Reuse reduce-scatter reads its peers' gradient areas (use "
               "--nodes 1 --mode slot-reuse)";
      }
      return l > 1 ? "" : "a single GPU has no peers";
    case Fault::kRsLandTwice:
    case Fault::kRsLandBeforeArrival:
      return plan.one_node() && options.landing == LandingStyle::kPull
                 ? "the one-node layout has no landing (NOTE [one-node TIDE-RS]; use --nodes 2 "
                   "or more)"
                 : "";
    default:  // kNone, and faults that show on every plan
      return "";
  }
}

}  // namespace tide::program
