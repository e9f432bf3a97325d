// The TIDE-RS plan (Sec. 4.1-4.2, 5.2-5.3): who reduces which sub-slice, where each partial lands,
// which contributors share a wave and a round, and the two memory modes' staging. Output (Eq. 5):
// rank r's fp32 shard concatenates its R_p K_p elements (the span, E_live). A destination node's L
// spans are cut into L sub-slices of block_rows() rows and E_sub columns, each into n_part pass
// parts of E_pass; pass q handles part q of every sub-slice, so owners and sum orders do not depend
// on n_part. The geometry (NOTE [sub-slice geometry] in rs_plan.cpp) picks the rows: L across
// ranks, else 1 (node-contiguous columns are node-flat elements: k of p's node region is rank k /
// s_p's element k mod s_p; a rank's elements are landing_runs()). Level 1 (Sec. 4.1): for
// destination node t, GPU j of node n owns sub-slice s = (j + c_bar) mod L (Eq. 7; c = c(t, n), Eq.
// 6; c_bar = c mod M); the other L - 1 ranks push their pieces into j's staging, j reads its own in
// place and sums into an outbox block. Level 2 (Sec. 4.2): the block goes over rail j to inbox
// block s of rank (t, j): contributor c of sub-slice s sits on GPU (s - c_bar) mod L (Eq. 8).
// Contributors c = 1..M (M the own node) form waves of at most W_wave; rounds carry at most k
// transfers within a wave; wave g uses generation g mod n_par (1 for one wave, else 2). Zeroing:
// NOTE [stale-block zeroing] in rs_plan.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tide/core/layout.hpp"

namespace tide {

enum class RsMode : std::uint8_t { kInPlace, kSlotReuse };

std::string_view mode_name(RsMode mode);
RsMode parse_mode(std::string_view text);  // "in-place" | "slot-reuse"

// Which destination ranks a sub-slice covers (NOTE [sub-slice geometry] in rs_plan.cpp).
enum class RsSubSlices : std::uint8_t {
  kAcrossRanks,     // Sec. 4.1: part s of all L destination ranks' spans (strided reads)
  kPerRank,         // destination rank s's whole span (1-D reads, L times the descriptors)
  kNodeContiguous,  // part s of the node's gradient-ordered spans (1-D reads)
};
inline constexpr RsSubSlices kLastSubSlices = RsSubSlices::kNodeContiguous;

std::string_view sub_slices_name(RsSubSlices geometry);
// "across-ranks" | "per-rank" | "node-contiguous"
RsSubSlices parse_sub_slices(std::string_view text);

struct RsOptions {
  int wave_width = 0;   // W_wave; 0 selects L
  int round_width = 4;  // k: concurrent rail transfers per round
  // Network rounds in flight d: round i's sends start once round i - d's arrivals are in
  // (1: lockstep). Changes no placement, wave or generation (App. D holds for every d).
  int rounds_in_flight = 1;
  RsMode mode = RsMode::kInPlace;
  // NOTE [sub-slice geometry]: node-contiguous measured faster; across ranks is the paper's.
  RsSubSlices sub_slices = RsSubSlices::kNodeContiguous;
  int passes = 1;         // n_part
  int staging_slots = 2;  // n_stg
  // Level 1 staging chunk: columns per staged row, rounded up to the vector width; 0: a
  // whole pass part.
  std::int64_t staging_chunk_elems = 0;
  int vector_elems = 4;  // E_sub alignment in fp32 elements (16 bytes)
  // M = 1: the one-node layout (NOTE [one-node TIDE-RS]; Level 1 sums into the output, no
  // spare, landing, outbox or inbox). Ignored at M >= 2; the library's defaults set it.
  bool one_node = false;
  // One-node Slot-Reuse: owners pull from the peers' gradient areas (filled by the program);
  // false: the peers push from wherever the gradients lie (the runtime's choice).
  bool one_node_pull = true;
};

inline constexpr int kMaxRoundWidth = 64;
inline constexpr int kMaxRoundsInFlight = 64;
inline constexpr int kMaxPasses = 64;

struct RsWave {
  int index = 0;  // global wave number g = pass * W + w
  int pass = 0;
  int wave_in_pass = 0;       // w
  int generation = 0;         // g mod n_par
  int first_contributor = 0;  // contributors [first, last], c = M is the own node
  int last_contributor = 0;
  int first_round = 0;  // rounds [first_round, first_round + round_count)
  int round_count = 0;
  // Per destination GPU j, bit s = inbox block s: written by this wave, and to be zeroed
  // before it lands (NOTE [stale-block zeroing]).
  std::array<std::uint8_t, kMaxGpusPerNode> written_blocks{};
  std::array<std::uint8_t, kMaxGpusPerNode> zeroed_blocks{};
  bool has_own_node = false;  // the own node (c = M) closes the last wave of each pass
  int contributor_count() const { return last_contributor - first_contributor + 1; }
};

struct RsRound {
  int index = 0;
  int wave = 0;               // global wave number
  int first_contributor = 0;  // remote contributors (send steps) [first, first + width)
  int width = 0;              // k_i <= k
};

// One parameter's piece of one sub-slice: sub-slice columns [span_begin, span_end).
struct RsPiece {
  int param = 0;
  std::int64_t span_begin = 0;
  std::int64_t span_end = 0;
  // span_begin - e_p (node-contiguous: - L e_p), the offset inside p's elements
  std::int64_t param_offset = 0;
  std::int64_t length() const { return span_end - span_begin; }
};

// `length` elements of a destination rank at `column` (from sub_slice_begin) of block row
// `row`: its output span elements from `span_offset` on.
struct RsLandingRun {
  int row = 0;
  std::int64_t column = 0;
  std::int64_t span_offset = 0;
  std::int64_t length = 0;
};

struct RsDescriptorCounts {
  std::int64_t coalesced = 0;  // strided rank-runs plus padded-row tails
  std::int64_t flat = 0;       // one descriptor per destination row
  std::int64_t tails = 0;      // the padded-row tails included in `coalesced`
};

struct RsMemory {
  std::int64_t block_bytes = 0;         // rows * E_pass * 4: outbox, inbox and spare blocks
  std::int64_t staging_slot_bytes = 0;  // (L - 1) * rows * chunk * b_grad
  std::int64_t staging_bytes = 0;       // n_stg slots
  std::int64_t inbox_bytes = 0;         // n_par generations x L blocks
  std::int64_t outbox_bytes = 0;        // 2 banks x n_out blocks
  std::int64_t spare_bytes = 0;         // 2 banks x one own-node spare (n_part pass parts)
  // The one-node layout holds only its staging ring: inbox, outbox and spares are 0.
  std::int64_t total() const { return staging_bytes + inbox_bytes + outbox_bytes + spare_bytes; }
};

class RsPlan {
 public:
  // InvalidArgument for options out of range; collision freedom is PlanValidator's (App. D).
  RsPlan(const GroupLayout& layout, RsOptions options);

  const GroupLayout& layout() const { return layout_; }
  const RsOptions& options() const { return options_; }
  int wave_width() const { return wave_width_; }                     // W_wave
  int round_width() const { return options_.round_width; }           // k
  int passes() const { return options_.passes; }                     // n_part
  int waves_per_pass() const { return waves_per_pass_; }             // W = ceil(M / W_wave)
  int generations() const { return generations_; }                   // n_par
  std::int64_t sub_slice_elems() const { return sub_slice_elems_; }  // E_sub
  RsSubSlices geometry() const { return options_.sub_slices; }
  // The one-node layout (RsOptions::one_node at M = 1, NOTE [one-node TIDE-RS]).
  bool one_node() const { return one_node_; }
  // Rows of a sub-slice and of every block: L across ranks, else 1. Row k reads from local
  // rank first_row_rank(s) + k (node-contiguous: row 0 from rank 0, running on).
  int block_rows() const { return block_rows_; }
  int first_row_rank(int s) const { return options_.sub_slices == RsSubSlices::kPerRank ? s : 0; }
  // Columns of all sub-slices together: E_live, or L E_live node-contiguous.
  std::int64_t sub_slice_space() const { return span_elems() * column_scale_; }
  // Where destination local rank i's output elements sit in pass q's part of sub-slice s.
  std::vector<RsLandingRun> landing_runs(int pass, int s, int destination_local) const;
  std::int64_t pass_elems() const { return pass_elems_; }    // E_pass: one pass of a sub-slice
  std::int64_t chunk_elems() const { return chunk_elems_; }  // staged columns per chunk <= E_pass
  std::int64_t span_elems() const { return layout_.shard_elems(); }  // E_live

  // Eq. 6-8 (inline: the exhaustive sweep evaluates them billions of times).
  int contributor_index(int destination_node, int sender_node) const;  // c(m, n) in 1..M
  int sub_slice(int sender_local, int contributor) const {             // s = (j + c_bar) mod L
    return wrap_gpu(sender_local + contributor_shift(contributor));
  }
  int destination_gpu(int sub_slice_index, int contributor) const {  // j = (s - c_bar) mod L
    return wrap_gpu(sub_slice_index - contributor_shift(contributor) + l_);
  }

  const std::vector<RsWave>& waves() const { return waves_; }     // all passes, in order
  const std::vector<RsRound>& rounds() const { return rounds_; }  // all passes, in order
  int remote_destinations() const;                                // D_rem = n_part (M - 1)
  int outbox_depth() const { return outbox_depth_; }  // n_out per bank (Sec. 5.3, Eq. 9)
  // Outbox block of remote destination J (1-based in send order): (J - 1) mod n_out.
  int outbox_block(int destination) const;
  int round_of_destination(int destination) const;  // 0-based round index of destination J

  // Columns [begin, end) of pass q's part of sub-slice s (every row), clipped to the space.
  std::int64_t sub_slice_begin(int pass, int s) const;
  std::int64_t sub_slice_end(int pass, int s) const;
  std::vector<RsPiece> pieces(int pass, int s) const;
  // pieces(pass, s) clipped to columns [begin, end): a chunk's or a fill's pieces.
  std::vector<RsPiece> pieces(int pass, int s, std::int64_t begin, std::int64_t end) const;
  // Elements of `piece` the gradient holds for the row starting at rank r (not padding).
  std::int64_t valid_length(const RsPiece& piece, int destination_rank) const;

  // Level 1 copy descriptors issued by one sender rank per call, and the maximum over ranks.
  RsDescriptorCounts level1_descriptors(int sender_rank) const;
  RsDescriptorCounts max_level1_descriptors() const;
  // The paper's closed forms: (L-1) P M coalesced and (L-1) P M L flat (Sec. 4.1; across ranks).
  std::int64_t paper_coalesced_descriptors() const;
  std::int64_t paper_flat_descriptors() const;

  RsMemory memory() const;

  // For tests only: break the wave tables to prove the validator catches it.
  std::vector<RsWave>& waves_for_fault_injection() { return waves_; }

 private:
  GroupLayout layout_;
  RsOptions options_;
  int wave_width_ = 0;
  int waves_per_pass_ = 0;
  int generations_ = 0;
  int outbox_depth_ = 0;
  std::int64_t sub_slice_elems_ = 0;
  int block_rows_ = 1;
  std::int64_t column_scale_ = 1;  // L node-contiguous: a parameter's columns per span element
  std::int64_t pass_elems_ = 0;
  std::int64_t chunk_elems_ = 0;
  std::vector<RsWave> waves_;
  std::vector<RsRound> rounds_;
  std::vector<int> destination_round_;  // by J - 1

  int m_ = 1;  // M
  int l_ = 1;  // L
  bool l_is_power_of_two_ = true;
  bool one_node_ = false;

  // c_bar mod L, in [0, L): c_bar = c for remote contributors, 0 for the own node c = M.
  int contributor_shift(int contributor) const {
    if (contributor == m_) return 0;
    return l_is_power_of_two_ ? (contributor & (l_ - 1)) : contributor % l_;
  }
  // x mod L for x in [0, 2L).
  int wrap_gpu(int x) const { return x >= l_ ? x - l_ : x; }

  RsDescriptorCounts descriptors_to(int destination_node, int sub_slice) const;
};

}  // namespace tide
