// TIDE-RS plan builder. See the header for the protocol summary (Sec. 4-5).
#include "tide/core/rs_plan.hpp"

#include <algorithm>
#include <string>

#include "tide/core/error.hpp"

namespace tide {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

void require_range(int value, int lo, int hi, const char* what, const char* why = "") {
  if (value < lo || value > hi) {
    throw InvalidArgument(std::string(what) + " = " + std::to_string(value) + " is outside " +
                          std::to_string(lo) + ".." + std::to_string(hi) + why);
  }
}

}  // namespace

std::string_view mode_name(RsMode mode) {
  return mode == RsMode::kInPlace ? "in-place" : "slot-reuse";
}

RsMode parse_mode(std::string_view text) {
  if (text == "in-place") return RsMode::kInPlace;
  if (text == "slot-reuse") return RsMode::kSlotReuse;
  throw InvalidArgument("--mode '" + std::string(text) +
                        "' is not a TIDE-RS memory mode; use in-place or slot-reuse");
}

std::string_view sub_slices_name(RsSubSlices geometry) {
  switch (geometry) {
    case RsSubSlices::kAcrossRanks:
      return "across-ranks";
    case RsSubSlices::kPerRank:
      return "per-rank";
    case RsSubSlices::kNodeContiguous:
      return "node-contiguous";
  }
  return "?";
}

RsSubSlices parse_sub_slices(std::string_view text) {
  if (text == "across-ranks") return RsSubSlices::kAcrossRanks;
  if (text == "per-rank") return RsSubSlices::kPerRank;
  if (text == "node-contiguous") return RsSubSlices::kNodeContiguous;
  throw InvalidArgument("--sub-slices '" + std::string(text) +
                        "' is not a TIDE-RS sub-slice geometry; use across-ranks, per-rank or "
                        "node-contiguous");
}

// NOTE [sub-slice geometry]
// Which elements a Level 1 owner reduces for a destination node, and so how a gradient is
// read. A parameter's gradient holds the node's L shards back to back (rank-major), and each
// destination rank's output span holds its shards of all parameters back to back.
//   - across ranks (the paper, Sec. 4.1): sub-slice s is part s of each of the L spans. A
//     piece (one parameter inside one part) is L runs of a gradient, one per rank, read as
//     one strided (2-D) descriptor: about (L - 1) M (P / L + 1) per rank per call, since a
//     part holds about P / L parameters.
//   - per rank: sub-slice s is destination rank s's whole span, 1-D reads, but every
//     parameter is a piece: (L - 1) M P descriptors, L times as many, each of one shard.
//   - node-contiguous: the node's L spans laid out as the gradients hold them (parameter by
//     parameter, rank-major inside), cut into L parts. A piece is one contiguous run of a
//     gradient: 1-D reads at the across-ranks count. A destination rank's elements of a part
//     are one run per parameter piece (landing_runs()), so landings are per run.
// Everything else is shared: the Latin square (Eq. 7-8) places sub-slice s of contributor c
// on GPU (s - c_bar) mod L in every geometry, so waves, rounds, generations, zeroing and
// Prop. 4.1 are unchanged, and blocks hold the same bytes. Why it matters: CUDA re-points a
// captured 1-D copy node but no 2-D one (cudaGraphExecMemcpyNodeSetParams and
// cudaGraphExecUpdate both refuse it, bench/results/runtime/primitives_*.json), so only with
// 1-D reads does a reduce-scatter with fresh gradient pointers replay its slot graph instead
// of re-enqueueing every copy (NOTE [CUDA call sequences] 3). An element's Level 1 owner, and
// with it its sum order, depends on the geometry: outputs are bitwise equal to the reference
// of the same plan, not across geometries. Measured trade-offs: bench/results/runtime/README.md.
RsPlan::RsPlan(const GroupLayout& layout, RsOptions options)
    : layout_(layout),
      options_(options),
      m_(layout.topology().nodes()),
      l_(layout.topology().gpus_per_node()),
      l_is_power_of_two_((l_ & (l_ - 1)) == 0),
      one_node_(options.one_node && m_ == 1) {
  // NOTE [one-node TIDE-RS]: at M = 1 rank r owns its own rows, so sub-slice r is rank r's
  // whole span (per-rank geometry: s = (j + c_bar) mod L = j for the own node, c = M).
  if (one_node_) options_.sub_slices = RsSubSlices::kPerRank;
  const int m = m_;
  const int l = l_;
  wave_width_ = options_.wave_width == 0 ? l : options_.wave_width;
  require_range(wave_width_, 1, l, "wave width W_wave", " (a wave holds at most L contributors)");
  require_range(options_.round_width, 1, kMaxRoundWidth, "round width k");
  require_range(options_.rounds_in_flight, 1, kMaxRoundsInFlight, "rounds in flight");
  require_range(options_.passes, 1, kMaxPasses, "sub-slice passes n_part");
  require_range(options_.staging_slots, 1, 64, "staging slots n_stg");
  require_range(options_.vector_elems, 1, 1024, "vector width (elements)");

  const std::int64_t vec = options_.vector_elems;
  block_rows_ = options_.sub_slices == RsSubSlices::kAcrossRanks ? l : 1;
  column_scale_ = options_.sub_slices == RsSubSlices::kNodeContiguous ? l : 1;
  const int parts = options_.sub_slices == RsSubSlices::kPerRank ? 1 : l;
  sub_slice_elems_ = ceil_div(ceil_div(sub_slice_space(), parts), vec) * vec;
  pass_elems_ = ceil_div(ceil_div(sub_slice_elems_, options_.passes), vec) * vec;
  if (options_.staging_chunk_elems < 0) {
    throw InvalidArgument("staging chunk of " + std::to_string(options_.staging_chunk_elems) +
                          " elements must not be negative");
  }
  chunk_elems_ = options_.staging_chunk_elems == 0
                     ? pass_elems_
                     : std::min(pass_elems_, ceil_div(options_.staging_chunk_elems, vec) * vec);
  waves_per_pass_ = static_cast<int>(ceil_div(m, wave_width_));
  const int total_waves = waves_per_pass_ * options_.passes;
  generations_ = total_waves == 1 ? 1 : 2;

  // NOTE [stale-block zeroing]
  // A multimem landing of sub-slice s reads inbox block s on all L GPUs of the destination
  // node at once, so every block that the landing wave does not write must hold zeros.
  // Wave g writes block s of GPU j iff some contributor c of g has j = (s - c_bar) mod L.
  // Before g lands, each GPU zeros the blocks that the previous wave on g's generation wrote
  // and g does not. The first use of a generation in a call cannot know what earlier calls
  // (or other groups sharing the arena) left there, so it zeros every block it does not
  // write. Full Latin-square waves write every block and zero nothing. The pull landing
  // reads only the wave's own contributors and does not depend on this rule.
  const std::uint8_t all_blocks = static_cast<std::uint8_t>((1u << l) - 1u);
  std::array<std::array<std::uint8_t, kMaxGpusPerNode>, 2> last_written{};
  for (auto& generation : last_written)
    std::fill_n(generation.begin(), l, all_blocks);

  for (int pass = 0; pass < options_.passes; ++pass) {
    for (int w = 0; w < waves_per_pass_; ++w) {
      RsWave wave;
      wave.index = pass * waves_per_pass_ + w;
      wave.pass = pass;
      wave.wave_in_pass = w;
      wave.generation = wave.index % generations_;
      wave.first_contributor = w * wave_width_ + 1;
      wave.last_contributor = std::min((w + 1) * wave_width_, m);
      wave.has_own_node = wave.last_contributor == m;
      for (int c = wave.first_contributor; c <= wave.last_contributor; ++c) {
        for (int j = 0; j < l; ++j) {  // GPU j receives sub-slice s = (j + c_bar) mod L
          wave.written_blocks[static_cast<std::size_t>(j)] |=
              static_cast<std::uint8_t>(1u << sub_slice(j, c));
        }
      }
      auto& previous = last_written[static_cast<std::size_t>(wave.generation)];
      for (std::size_t j = 0; j < static_cast<std::size_t>(l); ++j) {
        wave.zeroed_blocks[j] = static_cast<std::uint8_t>(previous[j] & ~wave.written_blocks[j]);
      }
      previous = wave.written_blocks;

      // Network rounds: the wave's remote contributors in groups of at most k.
      wave.first_round = static_cast<int>(rounds_.size());
      const int last_remote = std::min(wave.last_contributor, m - 1);
      for (int c = wave.first_contributor; c <= last_remote; c += options_.round_width) {
        RsRound round;
        round.index = static_cast<int>(rounds_.size());
        round.wave = wave.index;
        round.first_contributor = c;
        round.width = std::min(options_.round_width, last_remote - c + 1);
        destination_round_.insert(destination_round_.end(), static_cast<std::size_t>(round.width),
                                  round.index);
        rounds_.push_back(round);
      }
      wave.round_count = static_cast<int>(rounds_.size()) - wave.first_round;
      waves_.push_back(wave);
    }
  }

  if (options_.mode == RsMode::kInPlace) {
    outbox_depth_ = remote_destinations();  // a full outbox (Sec. 5.3)
  } else {
    int previous_width = 0;  // Eq. 9: n_out = max_i (k_i + k_{i-1}), k_{-1} = 0
    for (const RsRound& round : rounds_) {
      outbox_depth_ = std::max(outbox_depth_, round.width + previous_width);
      previous_width = round.width;
    }
  }
}

int RsPlan::contributor_index(int destination_node, int sender_node) const {
  const int m = layout_.topology().nodes();
  return destination_node == sender_node ? m : mod(destination_node - sender_node, m);
}

int RsPlan::remote_destinations() const {
  return options_.passes * (layout_.topology().nodes() - 1);
}

int RsPlan::outbox_block(int destination) const {
  return (destination - 1) % outbox_depth_;
}

int RsPlan::round_of_destination(int destination) const {
  return destination_round_.at(static_cast<std::size_t>(destination - 1));
}

std::int64_t RsPlan::sub_slice_begin(int pass, int s) const {
  const std::int64_t within = std::min(sub_slice_elems_, pass * pass_elems_);
  const std::int64_t first = geometry() == RsSubSlices::kPerRank ? 0 : s * sub_slice_elems_;
  return std::min(sub_slice_space(), first + within);
}

std::int64_t RsPlan::sub_slice_end(int pass, int s) const {
  const std::int64_t within = std::min(sub_slice_elems_, (pass + 1) * pass_elems_);
  const std::int64_t first = geometry() == RsSubSlices::kPerRank ? 0 : s * sub_slice_elems_;
  return std::min(sub_slice_space(), first + within);
}

std::vector<RsPiece> RsPlan::pieces(int pass, int s) const {
  return pieces(pass, s, sub_slice_begin(pass, s), sub_slice_end(pass, s));
}

std::vector<RsPiece> RsPlan::pieces(int pass, int s, std::int64_t begin, std::int64_t end) const {
  begin = std::max(begin, sub_slice_begin(pass, s));
  end = std::min(end, sub_slice_end(pass, s));
  std::vector<RsPiece> result;
  if (begin >= end) return result;
  // Parameters are laid out in increasing e_p: find the first whose span ends after begin.
  const auto& params = layout_.params();
  const std::int64_t scale = column_scale_;
  auto it = std::upper_bound(params.begin(), params.end(), begin,
                             [scale](std::int64_t value, const ParamLayout& pl) {
                               return value < scale * (pl.out_offset + pl.shard_elems());
                             });
  for (; it != params.end() && scale * it->out_offset < end; ++it) {
    RsPiece piece;
    piece.param = static_cast<int>(it - params.begin());
    piece.span_begin = std::max(begin, scale * it->out_offset);
    piece.span_end = std::min(end, scale * (it->out_offset + it->shard_elems()));
    piece.param_offset = piece.span_begin - scale * it->out_offset;
    if (piece.length() > 0) result.push_back(piece);
  }
  return result;
}

std::int64_t RsPlan::valid_length(const RsPiece& piece, int destination_rank) const {
  const ParamLayout& pl = layout_.param(piece.param);
  // What the gradient holds from rank r's shard on, within the row's reach (one shard, or
  // the node's L shards node-contiguous): D_p K_p - r s_p, clamped.
  const std::int64_t reach = column_scale_ * pl.shard_elems();
  const std::int64_t valid_elems = std::clamp<std::int64_t>(
      pl.rows * pl.cols - std::int64_t{destination_rank} * pl.shard_elems(), 0, reach);
  return std::clamp<std::int64_t>(valid_elems - piece.param_offset, 0, piece.length());
}

std::vector<RsLandingRun> RsPlan::landing_runs(int pass, int s, int destination_local) const {
  const std::int64_t begin = sub_slice_begin(pass, s);
  const std::int64_t live = sub_slice_end(pass, s) - begin;
  switch (geometry()) {
    case RsSubSlices::kAcrossRanks:  // row i of every sub-slice
      if (live == 0) return {};
      return {RsLandingRun{destination_local, 0, begin, live}};
    case RsSubSlices::kPerRank:  // all of sub-slice i, nothing of the others
      if (live == 0 || s != destination_local) return {};
      return {RsLandingRun{0, 0, begin, live}};
    case RsSubSlices::kNodeContiguous:
      break;
  }
  // Node-contiguous: in each piece, the columns of rank i's shard, [i s_p, (i + 1) s_p) of
  // the parameter's node region.
  std::vector<RsLandingRun> runs;
  for (const RsPiece& piece : pieces(pass, s)) {
    const ParamLayout& pl = layout_.param(piece.param);
    const std::int64_t shard_begin = std::int64_t{destination_local} * pl.shard_elems();
    const std::int64_t lo = std::max(piece.param_offset, shard_begin);
    const std::int64_t hi =
        std::min(piece.param_offset + piece.length(), shard_begin + pl.shard_elems());
    if (lo >= hi) continue;
    runs.push_back(RsLandingRun{0, piece.span_begin - begin + (lo - piece.param_offset),
                                pl.out_offset + (lo - shard_begin), hi - lo});
  }
  return runs;
}

// Level 1 copies that one sender issues to the owner of sub-slice s for destination node t:
// the destination ranks of t that s covers, whose piece is entirely real, form a prefix and
// share one strided descriptor (a 1-D copy when only one); a rank cut by D_p adds a tail.
RsDescriptorCounts RsPlan::descriptors_to(int destination_node, int s) const {
  const Topology& topo = layout_.topology();
  RsDescriptorCounts counts;
  for (int pass = 0; pass < options_.passes; ++pass) {
    for (const RsPiece& piece : pieces(pass, s)) {
      int full = 0;
      for (int k = 0; k < block_rows_; ++k) {
        const std::int64_t valid =
            valid_length(piece, topo.rank(destination_node, first_row_rank(s) + k));
        if (valid == 0) break;
        ++counts.flat;
        if (valid == piece.length()) {
          ++full;
        } else {
          ++counts.tails;
          break;
        }
      }
      counts.coalesced += (full > 0 ? 1 : 0);
    }
  }
  counts.coalesced += counts.tails;
  return counts;
}

RsDescriptorCounts RsPlan::level1_descriptors(int sender_rank) const {
  const Topology& topo = layout_.topology();
  const int n = topo.node_of(sender_rank);
  const int l = topo.local_of(sender_rank);
  RsDescriptorCounts total;
  for (int t = 0; t < topo.nodes(); ++t) {
    const int c = contributor_index(t, n);
    for (int j = 0; j < topo.gpus_per_node(); ++j) {
      if (j == l) continue;  // the owner reads its own contribution in place
      const RsDescriptorCounts d = descriptors_to(t, sub_slice(j, c));
      total.coalesced += d.coalesced;
      total.flat += d.flat;
      total.tails += d.tails;
    }
  }
  return total;
}

RsDescriptorCounts RsPlan::max_level1_descriptors() const {
  const Topology& topo = layout_.topology();
  const int m = topo.nodes();
  const int l = topo.gpus_per_node();
  const auto at = [l](int t, int s) {
    return static_cast<std::size_t>(t) * static_cast<std::size_t>(l) + static_cast<std::size_t>(s);
  };
  // descriptors_to depends only on (t, s): tabulate it once.
  std::vector<RsDescriptorCounts> table(static_cast<std::size_t>(m) * static_cast<std::size_t>(l));
  RsDescriptorCounts everything;  // over all (t, s)
  for (int t = 0; t < m; ++t) {
    for (int s = 0; s < l; ++s) {
      const RsDescriptorCounts d = descriptors_to(t, s);
      table[at(t, s)] = d;
      everything.coalesced += d.coalesced;
      everything.flat += d.flat;
      everything.tails += d.tails;
    }
  }
  // Sender (n, me) sends to every (t, s) but the sub-slice it owns itself for node t: s =
  // sub_slice(me, c(t, n)) = (me + t - n) mod L for t > n, (me + t - n + M) mod L for t < n
  // (c mod L = c for remote contributors), and me for its own node. So its total is
  // everything minus those M entries. skipped[d][k] sums table[t][(t + d) mod L] over t < k,
  // which makes every sender O(1) rather than O(M L).
  const std::size_t width = static_cast<std::size_t>(m) + 1;
  std::vector<RsDescriptorCounts> skipped(static_cast<std::size_t>(l) * width);
  for (int d = 0; d < l; ++d) {
    RsDescriptorCounts* row = &skipped[static_cast<std::size_t>(d) * width];
    for (int t = 0; t < m; ++t) {
      const RsDescriptorCounts& e = table[at(t, (t + d) % l)];
      row[t + 1] = {row[t].coalesced + e.coalesced, row[t].flat + e.flat, row[t].tails + e.tails};
    }
  }
  RsDescriptorCounts best;
  for (int n = 0; n < m; ++n) {
    for (int me = 0; me < l; ++me) {
      const int after = mod(me - n, l);       // shift for destinations t > n
      const int before = mod(me - n + m, l);  // and t < n (the contributor index wraps by M)
      const RsDescriptorCounts* a = &skipped[static_cast<std::size_t>(after) * width];
      const RsDescriptorCounts* b = &skipped[static_cast<std::size_t>(before) * width];
      const RsDescriptorCounts& own = table[at(n, me)];
      RsDescriptorCounts sum;
      sum.coalesced = everything.coalesced - (a[m].coalesced - a[n + 1].coalesced) -
                      b[n].coalesced - own.coalesced;
      sum.flat = everything.flat - (a[m].flat - a[n + 1].flat) - b[n].flat - own.flat;
      sum.tails = everything.tails - (a[m].tails - a[n + 1].tails) - b[n].tails - own.tails;
      if (sum.coalesced > best.coalesced) best = sum;
    }
  }
  return best;
}

std::int64_t RsPlan::paper_coalesced_descriptors() const {
  const Topology& topo = layout_.topology();
  return std::int64_t{topo.gpus_per_node() - 1} * layout_.param_count() * topo.nodes();
}

std::int64_t RsPlan::paper_flat_descriptors() const {
  return paper_coalesced_descriptors() * layout_.topology().gpus_per_node();
}

RsMemory RsPlan::memory() const {
  const std::int64_t l = layout_.topology().gpus_per_node();
  RsMemory mem;
  mem.block_bytes = block_rows_ * pass_elems_ * 4;
  mem.staging_slot_bytes = (l - 1) * block_rows_ * chunk_elems_ * item_bytes(layout_.grad_dtype());
  mem.staging_bytes = options_.staging_slots * mem.staging_slot_bytes;
  mem.inbox_bytes = generations_ * l * mem.block_bytes;
  mem.outbox_bytes = 2 * std::int64_t{outbox_depth_} * mem.block_bytes;
  mem.spare_bytes = 2 * std::int64_t{options_.passes} * mem.block_bytes;  // one per pass part
  if (one_node_) {  // NOTE [one-node TIDE-RS]: Level 1 sums into the output
    mem.inbox_bytes = mem.outbox_bytes = mem.spare_bytes = 0;
  }
  return mem;
}

}  // namespace tide
