// TIDE-RS plan (Sec. 4.1-4.2, 5.3): Latin-square placement (Eqs. 6-8), waves, rounds,
// generations, stale-block zeroing, outbox depth (Eq. 9), sub-slices and Level 1 descriptor
// counts, and a numerical simulation of the two-level reduction through the plan's own
// placement against a float64 reference (Eq. 5).
#include "tide/core/rs_plan.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <tuple>

#include "test_seed.hpp"
#include "tide/core/arithmetic.hpp"
#include "tide/core/error.hpp"
#include "tide/core/plan_validator.hpp"

namespace tide {
namespace {

GroupLayout group(int m, int l, std::vector<ParamShape> shapes, DType grad = DType::kBf16) {
  return GroupLayout(Topology(m, l), std::move(shapes), DType::kBf16, grad);
}

// The paper's geometry unless a test asks for the other one (NOTE [sub-slice geometry]).
RsOptions options(int wave_width, int round_width, RsMode mode = RsMode::kInPlace, int passes = 1,
                  RsSubSlices geometry = RsSubSlices::kAcrossRanks) {
  RsOptions o;
  o.wave_width = wave_width;
  o.round_width = round_width;
  o.mode = mode;
  o.passes = passes;
  o.sub_slices = geometry;
  return o;
}

TEST(RsPlan, LatinSquarePlacementEqs6To8) {
  const RsPlan plan(group(4, 4, {{"w", 64, 4}}), options(4, 4));
  EXPECT_EQ(plan.contributor_index(0, 1), 3);  // (m - n) mod M
  EXPECT_EQ(plan.contributor_index(2, 3), 3);
  EXPECT_EQ(plan.contributor_index(3, 1), 2);
  EXPECT_EQ(plan.contributor_index(2, 2), 4);  // own node: c = M
  EXPECT_EQ(plan.sub_slice(1, 3), 0);          // (j + c_bar) mod L
  EXPECT_EQ(plan.sub_slice(2, 4), 2);          // own node: c_bar = 0
  EXPECT_EQ(plan.destination_gpu(0, 3), 1);    // (s - c_bar) mod L
  EXPECT_EQ(plan.destination_gpu(3, 1), 2);
  for (int c = 1; c <= 4; ++c) {
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(plan.destination_gpu(plan.sub_slice(j, c), c), j);
  }
}

TEST(RsPlan, WavesRoundsGenerationsAndOutboxDepth) {
  // M = 20, L = 8: waves {1..8}, {9..16}, {17..20 (own)}; k = 4.
  const GroupLayout g = group(20, 8, {{"w", 1280, 8}});
  const RsPlan in_place(g, options(8, 4));
  ASSERT_EQ(in_place.waves().size(), 3u);
  EXPECT_EQ(in_place.waves_per_pass(), 3);
  EXPECT_EQ(in_place.generations(), 2);
  const int gens[] = {0, 1, 0};
  for (int w = 0; w < 3; ++w)
    EXPECT_EQ(in_place.waves()[w].generation, gens[w]);
  EXPECT_EQ(in_place.waves()[2].first_contributor, 17);
  EXPECT_EQ(in_place.waves()[2].last_contributor, 20);
  EXPECT_TRUE(in_place.waves()[2].has_own_node);
  EXPECT_FALSE(in_place.waves()[0].has_own_node);
  std::vector<std::pair<int, int>> rounds;
  for (const RsRound& r : in_place.rounds())
    rounds.emplace_back(r.first_contributor, r.width);
  const std::vector<std::pair<int, int>> expected = {{1, 4}, {5, 4}, {9, 4}, {13, 4}, {17, 3}};
  EXPECT_EQ(rounds, expected);  // the own node needs no round; no round crosses a wave
  EXPECT_EQ(in_place.remote_destinations(), 19);
  EXPECT_EQ(in_place.outbox_depth(), 19);  // In-Place: a full outbox of M - 1 blocks
  const RsPlan slot(g, options(8, 4, RsMode::kSlotReuse));
  EXPECT_EQ(slot.outbox_depth(), 8);  // Eq. 9: max(k_i + k_{i-1}) = 4 + 4
  EXPECT_EQ(slot.outbox_block(9), 0);
  EXPECT_EQ(slot.round_of_destination(9), 2);
  const RsPlan slot3(group(5, 8, {{"w", 320, 8}}), options(8, 3, RsMode::kSlotReuse));
  EXPECT_EQ(slot3.outbox_depth(), 4);  // rounds {1..3}, {4}: max(3 + 0, 1 + 3)
  // A single-wave schedule needs one inbox generation.
  EXPECT_EQ(RsPlan(group(8, 8, {{"w", 512, 8}}), options(8, 4)).generations(), 1);
  EXPECT_EQ(RsPlan(group(8, 8, {{"w", 512, 8}}), options(8, 4, RsMode::kInPlace, 2)).generations(),
            2);
}

TEST(RsPlan, StaleBlockZeroing) {
  // M = 20, L = 8: waves 0 and 1 are full Latin squares (every block written, nothing to
  // zero); wave 2 (contributors 17, 18, 19 and the own node) writes 4 blocks per GPU j,
  // s = (j + c_bar) mod 8 for c_bar in {1, 2, 3, 0}, and zeroes the other 4 that wave 0 wrote.
  const RsPlan plan(group(20, 8, {{"w", 1280, 8}}), options(8, 4));
  for (int j = 0; j < 8; ++j) {
    const auto ju = static_cast<std::size_t>(j);
    EXPECT_EQ(plan.waves()[0].written_blocks[ju], 0xFF);
    EXPECT_EQ(plan.waves()[0].zeroed_blocks[ju], 0);
    EXPECT_EQ(plan.waves()[1].zeroed_blocks[ju], 0);
    std::uint8_t written = 0;
    for (int shift = 0; shift < 4; ++shift)
      written |= static_cast<std::uint8_t>(1u << ((j + shift) % 8));
    EXPECT_EQ(plan.waves()[2].written_blocks[ju], written);
    EXPECT_EQ(plan.waves()[2].zeroed_blocks[ju], static_cast<std::uint8_t>(~written));
  }
  // M = 9: wave 1 holds only the own node; it is the first use of generation 1, whose
  // contents are unknown, so every GPU zeros all blocks but its own s = j.
  const RsPlan nine(group(9, 8, {{"w", 720, 8}}), options(8, 4));
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(nine.waves()[1].written_blocks[static_cast<std::size_t>(j)], 1u << j);
    EXPECT_EQ(nine.waves()[1].zeroed_blocks[static_cast<std::size_t>(j)],
              static_cast<std::uint8_t>(~(1u << j)));
  }
}

TEST(RsPlan, SubSlicesAndPasses) {
  // E_live = 100 elements, L = 8: E_sub = ceil(100 / 8) = 13 -> 16 (vector of 4).
  const GroupLayout g = group(1, 8, {{"a", 64, 5}, {"b", 64, 7}, {"c", 8, 4}});  // 40 + 56 + 4
  const RsPlan one(g, options(8, 4));
  EXPECT_EQ(one.span_elems(), 100);
  EXPECT_EQ(one.sub_slice_elems(), 16);
  EXPECT_EQ(one.pass_elems(), 16);
  EXPECT_EQ(one.sub_slice_begin(0, 2), 32);
  EXPECT_EQ(one.sub_slice_end(0, 2), 48);
  EXPECT_EQ(one.sub_slice_begin(0, 6), 96);
  EXPECT_EQ(one.sub_slice_end(0, 6), 100);    // short
  EXPECT_EQ(one.sub_slice_begin(0, 7), 100);  // empty
  EXPECT_TRUE(one.pieces(0, 7).empty());
  const auto pieces = one.pieces(0, 2);  // [32, 48): a [32, 40) and b [40, 48)
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].param, 0);
  EXPECT_EQ(pieces[0].param_offset, 32);
  EXPECT_EQ(pieces[0].length(), 8);
  EXPECT_EQ(pieces[1].param, 1);
  EXPECT_EQ(pieces[1].param_offset, 0);
  const auto tail = one.pieces(0, 6);  // [96, 100): b ends at 96, so only c
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].param, 2);
  // Two passes split every sub-slice in place: pass q handles part q of each sub-slice.
  const RsPlan two(g, options(8, 4, RsMode::kInPlace, 2));
  EXPECT_EQ(two.sub_slice_elems(), 16);
  EXPECT_EQ(two.pass_elems(), 8);
  EXPECT_EQ(two.sub_slice_begin(1, 2), 40);
  EXPECT_EQ(two.sub_slice_end(1, 2), 48);
  EXPECT_EQ(two.memory().block_bytes, 8 * 8 * 4);
  EXPECT_TRUE(validate_rs_plan(two).accepted);
}

// Per rank (NOTE [sub-slice geometry]): sub-slice s is destination rank s's whole span, one
// row; every Level 1 descriptor is a 1-D run.
TEST(RsPlan, PerRankSubSlicesAreOneRowEach) {
  const GroupLayout g = group(1, 8, {{"a", 64, 5}, {"b", 64, 7}, {"c", 8, 4}});  // 40 + 56 + 4
  const RsPlan one(g, options(8, 4, RsMode::kInPlace, 1, RsSubSlices::kPerRank));
  EXPECT_EQ(one.block_rows(), 1);
  EXPECT_EQ(one.sub_slice_elems(), 100);
  for (int s = 0; s < 8; ++s) {
    EXPECT_EQ(one.first_row_rank(s), s);
    EXPECT_EQ(one.sub_slice_begin(0, s), 0);
    EXPECT_EQ(one.sub_slice_end(0, s), 100);
    for (int i = 0; i < 8; ++i) {
      const auto runs = one.landing_runs(0, s, i);
      ASSERT_EQ(runs.size(), i == s ? 1u : 0u);
      if (i == s) {
        EXPECT_EQ(runs[0].row, 0);
        EXPECT_EQ(runs[0].span_offset, 0);
        EXPECT_EQ(runs[0].length, 100);
      }
    }
  }
  const auto pieces = one.pieces(0, 5);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[1].param, 1);
  EXPECT_EQ(pieces[1].span_begin, 40);
  EXPECT_EQ(pieces[1].length(), 56);
  // Two passes: E_pass = ceil(100 / 2) = 50 -> 52 (vector of 4).
  const RsPlan two(g, options(8, 4, RsMode::kInPlace, 2, RsSubSlices::kPerRank));
  EXPECT_EQ(two.pass_elems(), 52);
  EXPECT_EQ(two.sub_slice_begin(1, 3), 52);
  EXPECT_EQ(two.sub_slice_end(1, 3), 100);
  EXPECT_EQ(two.memory().block_bytes, 1 * 52 * 4);
  EXPECT_EQ(two.memory().staging_slot_bytes, 7 * 1 * 52 * 2);
  EXPECT_TRUE(validate_rs_plan(two).accepted) << validate_rs_plan(two).reason;
  // The across-ranks geometry covers every rank in each sub-slice, row i for GPU i.
  const RsPlan across(g, options(8, 4));
  EXPECT_EQ(across.block_rows(), 8);
  const auto across_runs = across.landing_runs(0, 3, 5);  // row 5 of sub-slice 3: [48, 64)
  ASSERT_EQ(across_runs.size(), 1u);
  EXPECT_EQ(across_runs[0].row, 5);
  EXPECT_EQ(across_runs[0].span_offset, 48);
  EXPECT_EQ(across_runs[0].length, 16);
  // At the paper's (L, M, P) = (8, 64, 30) with every row real: exactly (L - 1) P M 1-D
  // descriptors per rank, as many as the strided ones across ranks.
  std::vector<ParamShape> shapes(30, ParamShape{"w", 4096, 64});
  const RsPlan paper(group(64, 8, shapes),
                     options(8, 4, RsMode::kInPlace, 1, RsSubSlices::kPerRank));
  const RsDescriptorCounts d = paper.level1_descriptors(0);
  EXPECT_EQ(d.coalesced, paper.paper_coalesced_descriptors());
  EXPECT_EQ(d.flat, d.coalesced);
  EXPECT_EQ(d.tails, 0);
}

// Node-contiguous (NOTE [sub-slice geometry]) by hand: M = 1, L = 2, a (8, 3) and a (4, 5)
// parameter. s_a = 12, s_b = 10, E_live = 22; node-flat columns: a [0, 24) (rank 0's shard
// then rank 1's), b [24, 44). E_sub = 22 -> 24: sub-slice 0 = a, sub-slice 1 = b [24, 44).
TEST(RsPlan, NodeContiguousSubSlicesAreGradientRuns) {
  const RsPlan plan(group(1, 2, {{"a", 8, 3}, {"b", 4, 5}}),
                    options(2, 4, RsMode::kInPlace, 1, RsSubSlices::kNodeContiguous));
  EXPECT_EQ(plan.block_rows(), 1);
  EXPECT_EQ(plan.sub_slice_space(), 44);
  EXPECT_EQ(plan.sub_slice_elems(), 24);
  EXPECT_EQ(plan.sub_slice_begin(0, 1), 24);
  EXPECT_EQ(plan.sub_slice_end(0, 1), 44);
  const auto pieces = plan.pieces(0, 1);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].param, 1);
  EXPECT_EQ(pieces[0].param_offset, 0);
  EXPECT_EQ(pieces[0].length(), 20);
  // Rank 1 lands a's columns [12, 24) at span 0 and b's columns [34, 44) at span 12.
  const auto a = plan.landing_runs(0, 0, 1);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].column, 12);
  EXPECT_EQ(a[0].span_offset, 0);
  EXPECT_EQ(a[0].length, 12);
  const auto b = plan.landing_runs(0, 1, 1);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].column, 10);
  EXPECT_EQ(b[0].span_offset, 12);
  EXPECT_EQ(b[0].length, 10);
  // b has 4 real rows: rank 0 holds rows 0-1, rank 1 rows 2-3 (all real): one 1-D read of 20.
  EXPECT_EQ(plan.valid_length(pieces[0], 0), 20);
  EXPECT_TRUE(validate_rs_plan(plan).accepted) << validate_rs_plan(plan).reason;
  // A padded parameter: (3, 3) over 2 ranks holds 9 of its 12 node-flat columns; E_sub =
  // 6 -> 8, so sub-slice 0 is [0, 8) (all real) and sub-slice 1 is [8, 12) (1 real).
  const RsPlan padded(group(1, 2, {{"w", 3, 3}}),
                      options(2, 4, RsMode::kInPlace, 1, RsSubSlices::kNodeContiguous));
  const auto first = padded.pieces(0, 0);
  const auto second = padded.pieces(0, 1);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(padded.valid_length(first[0], 0), 8);
  EXPECT_EQ(second[0].param_offset, 8);
  EXPECT_EQ(padded.valid_length(second[0], 0), 1);
  // At the paper's (8, 64, 30) the 1-D descriptors number no more than across ranks'.
  std::vector<ParamShape> shapes(30, ParamShape{"w", 4096, 64});
  const RsPlan node(group(64, 8, shapes),
                    options(8, 4, RsMode::kInPlace, 1, RsSubSlices::kNodeContiguous));
  const RsPlan paper(group(64, 8, shapes), options(8, 4));
  EXPECT_LE(node.level1_descriptors(0).coalesced, paper.level1_descriptors(0).coalesced);
  EXPECT_EQ(node.level1_descriptors(0).flat, node.level1_descriptors(0).coalesced);
}

// Level 1 descriptors with a padded row, by hand: M = 1, L = 2, one (3, 3) parameter.
// R_p = 2, span 6 elements, E_sub = 4: sub-slices [0, 4) and [4, 6). Rank 0 holds 6 real
// elements, rank 1 holds 3 (row 2; row 3 is padding).
TEST(RsPlan, Level1DescriptorsWithPaddedRowTail) {
  const RsPlan plan(group(1, 2, {{"w", 3, 3}}), options(2, 4));
  // Sender rank 1 feeds owner 0 (s = 0): rank 0 full, rank 1 only 3 of 4 -> 1 + 1 tail.
  const RsDescriptorCounts r1 = plan.level1_descriptors(1);
  EXPECT_EQ(r1.coalesced, 2);
  EXPECT_EQ(r1.tails, 1);
  EXPECT_EQ(r1.flat, 2);
  // Sender rank 0 feeds owner 1 (s = 1 = [4, 6)): rank 0 full, rank 1 nothing real.
  const RsDescriptorCounts r0 = plan.level1_descriptors(0);
  EXPECT_EQ(r0.coalesced, 1);
  EXPECT_EQ(r0.tails, 0);
  EXPECT_EQ(r0.flat, 1);
  EXPECT_EQ(plan.max_level1_descriptors().coalesced, 2);
  EXPECT_EQ(plan.paper_coalesced_descriptors(), 1);  // (L - 1) P M
  EXPECT_EQ(plan.paper_flat_descriptors(), 2);
}

TEST(RsPlan, PaperDescriptorFormulas) {
  std::vector<ParamShape> shapes(30, ParamShape{"w", 4096, 64});
  const RsPlan plan(group(64, 8, shapes), options(8, 4));
  EXPECT_EQ(plan.paper_flat_descriptors(), 107520);  // Sec. 4.1 at (L, M, P) = (8, 64, 30)
  EXPECT_EQ(plan.paper_coalesced_descriptors(), 13440);
  const RsDescriptorCounts d = plan.level1_descriptors(0);
  EXPECT_LT(d.coalesced, d.flat);
  EXPECT_LE(d.coalesced, plan.paper_coalesced_descriptors());
}

TEST(RsPlan, MemoryAccounting) {
  // E_live = 1024, L = 8: E_sub = 128, block = 8 * 128 * 4 = 4096 = S_fp32.
  const RsPlan plan(group(8, 8, {{"w", 4096, 16}}), options(8, 4));
  const RsMemory mem = plan.memory();
  EXPECT_EQ(mem.block_bytes, 4096);
  EXPECT_EQ(mem.staging_slot_bytes, 7 * 8 * 128 * 2);
  EXPECT_EQ(mem.staging_bytes, 2 * mem.staging_slot_bytes);
  EXPECT_EQ(mem.inbox_bytes, 1 * 8 * 4096);
  EXPECT_EQ(mem.outbox_bytes, 2 * 7 * 4096);
  EXPECT_EQ(mem.spare_bytes, 2 * 4096);
  // Eq. 10 bound: (4 n_stg + 8 n_par + 2 n_out + 2) S_fp32 with n_out = M - 1 = 7.
  EXPECT_LE(mem.total(), (4 * 2 + 8 * 1 + 2 * 7 + 2) * 4096);
}

TEST(RsPlan, RejectsBadOptions) {
  const GroupLayout g = group(4, 8, {{"w", 64, 4}});
  EXPECT_THROW(RsPlan(g, options(9, 4)), InvalidArgument);
  EXPECT_THROW(RsPlan(g, options(-1, 4)), InvalidArgument);
  EXPECT_THROW(RsPlan(g, options(8, 0)), InvalidArgument);
  EXPECT_THROW(RsPlan(g, options(8, 4, RsMode::kInPlace, 0)), InvalidArgument);
  EXPECT_THROW(parse_mode("fast"), InvalidArgument);
  EXPECT_EQ(parse_mode("slot-reuse"), RsMode::kSlotReuse);
}

// --- Numerical simulation through the plan's placement --------------------------------------

struct Problem {
  GroupLayout layout;
  std::vector<std::vector<std::vector<std::uint16_t>>> grads;  // [rank][param][D_p K_p] bf16
  float alpha = 1;
};

Problem random_problem(std::mt19937_64& rng, int m, int l, int params) {
  std::vector<ParamShape> shapes(static_cast<std::size_t>(params));
  for (auto& s : shapes) {
    s.rows = static_cast<std::int64_t>(rng() % 37) + 1;
    s.cols = static_cast<std::int64_t>(rng() % 5) + 1;
  }
  Problem p{group(m, l, shapes), {}, 0};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.alpha = 1.0f / static_cast<float>(m * l);
  p.grads.resize(static_cast<std::size_t>(m * l));
  for (auto& rank : p.grads) {
    for (const ParamLayout& pl : p.layout.params()) {
      std::vector<std::uint16_t> values(static_cast<std::size_t>(pl.rows * pl.cols));
      for (auto& v : values)
        v = arith::float_to_bf16(normal(rng));
      rank.push_back(std::move(values));
    }
  }
  return p;
}

// Gradient element of `rank` at output-span element e of destination rank r, or nullopt for
// padding.
std::optional<float> grad_at(const Problem& p, int rank, int destination, std::int64_t e) {
  for (int q = 0; q < p.layout.param_count(); ++q) {
    const ParamLayout& pl = p.layout.param(q);
    if (e < pl.out_offset || e >= pl.out_offset + pl.shard_elems()) continue;
    const std::int64_t index = destination * pl.shard_elems() + (e - pl.out_offset);
    if (index >= pl.rows * pl.cols) return std::nullopt;
    return arith::bf16_to_float(p.grads[static_cast<std::size_t>(rank)][static_cast<std::size_t>(q)]
                                       [static_cast<std::size_t>(index)]);
  }
  return std::nullopt;
}

// Runs TIDE-RS through the plan's tables: Level 1 by the owner of each sub-slice (staged
// local ranks in order, then the own one), placement into inbox block s of GPU
// j(s, c), and landing wave by wave from those inbox positions. Returns out[rank][e].
std::vector<std::vector<float>> simulate(const Problem& p, const RsPlan& plan,
                                         const std::vector<std::vector<float>>& initial,
                                         bool accumulate) {
  const Topology& t = p.layout.topology();
  const int m = t.nodes();
  const int l = t.gpus_per_node();
  auto out = initial;
  for (int dest_node = 0; dest_node < m; ++dest_node) {
    for (const RsWave& wave : plan.waves()) {
      // inbox[j][s][i][e]: what GPU j of the destination node holds in block s, row i.
      std::map<std::tuple<int, int, int, std::int64_t>, float> inbox;
      for (int c = wave.first_contributor; c <= wave.last_contributor; ++c) {
        const int sender = c == m ? dest_node : mod(dest_node - c, m);
        EXPECT_EQ(plan.contributor_index(dest_node, sender), c);
        for (int owner = 0; owner < l; ++owner) {
          const int s = plan.sub_slice(owner, c);
          for (int i = 0; i < l; ++i) {
            const int dest_rank = t.rank(dest_node, i);
            for (const RsLandingRun& run : plan.landing_runs(wave.pass, s, i)) {
              for (std::int64_t e = run.span_offset; e < run.span_offset + run.length; ++e) {
                float partial = 0.0f;  // padding partials are +0
                if (auto own = grad_at(p, t.rank(sender, owner), dest_rank, e)) {
                  std::vector<float> staged;
                  for (int j = 0; j < l; ++j) {
                    if (j != owner) staged.push_back(*grad_at(p, t.rank(sender, j), dest_rank, e));
                  }
                  partial = arith::level1_partial(staged, *own, p.alpha);
                }
                const int gpu = plan.destination_gpu(s, c);
                EXPECT_EQ(gpu, owner) << "rail alignment";
                EXPECT_TRUE(inbox.emplace(std::make_tuple(gpu, s, i, e), partial).second)
                    << "collision in wave " << wave.index;
              }
            }
          }
        }
      }
      for (int i = 0; i < l; ++i) {
        auto& row = out[static_cast<std::size_t>(t.rank(dest_node, i))];
        for (int s = 0; s < l; ++s) {
          for (const RsLandingRun& run : plan.landing_runs(wave.pass, s, i)) {
            for (std::int64_t e = run.span_offset; e < run.span_offset + run.length; ++e) {
              std::vector<float> partials;
              for (int c = wave.first_contributor; c <= wave.last_contributor; ++c) {
                partials.push_back(inbox.at({plan.destination_gpu(s, c), s, i, e}));
              }
              row[static_cast<std::size_t>(e)] =
                  arith::land(row[static_cast<std::size_t>(e)], arith::wave_sum(partials),
                              wave.wave_in_pass, accumulate);
            }
          }
        }
      }
    }
  }
  return out;
}

TEST(RsPlan, PropertyTwoLevelReductionMatchesFloat64AndIsTuningInvariant) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int trial = 0; trial < 24; ++trial) {
    const int m = static_cast<int>(rng() % 6) + 1;
    const int l = 1 << (rng() % 4);  // 1, 2, 4, 8
    Problem p = random_problem(rng, m, l, static_cast<int>(rng() % 4) + 1);
    std::vector<int> divisors;
    for (int d = 1; d <= l; ++d) {
      if (l % d == 0) divisors.push_back(d);
    }
    const int wave_width = divisors[rng() % divisors.size()];
    const bool accumulate = rng() % 2;
    const std::int64_t span = p.layout.shard_elems();
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<std::vector<float>> initial(static_cast<std::size_t>(m * l),
                                            std::vector<float>(static_cast<std::size_t>(span)));
    for (auto& row : initial) {
      for (auto& v : row)
        v = accumulate ? normal(rng) : std::nanf("");  // poison when unused
    }
    const auto geometry = static_cast<RsSubSlices>(rng() % 3);  // every geometry
    SCOPED_TRACE("trial " + std::to_string(trial) + ", sub-slices " +
                 std::string(sub_slices_name(geometry)));
    const RsPlan base(p.layout, options(wave_width, 1 + static_cast<int>(rng() % 4),
                                        RsMode::kInPlace, 1, geometry));
    ASSERT_TRUE(validate_rs_plan(base).accepted) << validate_rs_plan(base).reason;
    const auto out = simulate(p, base, initial, accumulate);

    double ref_norm = 1;
    for (int r = 0; r < m * l; ++r) {
      for (std::int64_t e = 0; e < span; ++e) {
        double ref = 0;
        bool real = false;
        for (int u = 0; u < m * l; ++u) {
          if (auto v = grad_at(p, u, r, e)) {
            ref += static_cast<double>(*v);
            real = true;
          }
        }
        ref *= static_cast<double>(p.alpha);
        if (accumulate) {
          ref += static_cast<double>(
              initial[static_cast<std::size_t>(r)][static_cast<std::size_t>(e)]);
        }
        ref_norm = std::max(ref_norm, std::abs(ref));
        const float got = out[static_cast<std::size_t>(r)][static_cast<std::size_t>(e)];
        ASSERT_FALSE(std::isnan(got)) << "rank " << r << " element " << e << " never written";
        if (!real && !accumulate) {
          EXPECT_EQ(got, 0.0f) << "padding must reduce to zero";
        }
        EXPECT_NEAR(static_cast<double>(got), ref, 1e-5 * ref_norm)
            << "rank " << r << " element " << e;
      }
    }
    // Tuning knobs that keep the operand grouping change no bit (Sec. 4.3): round width,
    // memory mode and sub-slice passes.
    const RsPlan tuned(p.layout,
                       options(wave_width, 1 + static_cast<int>(rng() % 6), RsMode::kSlotReuse,
                               1 + static_cast<int>(rng() % 3), geometry));
    ASSERT_TRUE(validate_rs_plan(tuned).accepted);
    const auto again = simulate(p, tuned, initial, accumulate);
    for (std::size_t r = 0; r < out.size(); ++r) {
      for (std::size_t e = 0; e < out[r].size(); ++e) {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(out[r][e]),
                  std::bit_cast<std::uint32_t>(again[r][e]));
      }
    }
  }
}

// The closed form of the maximum over senders equals the brute-force maximum, also where L
// does not divide M and padded rows make destination nodes differ.
TEST(RsPlan, PropertyMaxLevel1DescriptorsIsTheMaximumOverRanks) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int trial = 0; trial < 60; ++trial) {
    const int m = static_cast<int>(rng() % 13) + 1;
    const int l = static_cast<int>(rng() % 8) + 1;
    std::vector<ParamShape> shapes(rng() % 4 + 1);
    for (ParamShape& s : shapes) {
      s.rows = static_cast<std::int64_t>(rng() % (3 * m * l)) + 1;
      s.cols = static_cast<std::int64_t>(rng() % 5) + 1;
    }
    const RsPlan plan(group(m, l, shapes),
                      options(1, 1, RsMode::kInPlace, 1 + static_cast<int>(rng() % 3),
                              static_cast<RsSubSlices>(rng() % 3)));
    RsDescriptorCounts want;
    for (int r = 0; r < m * l; ++r) {
      const RsDescriptorCounts d = plan.level1_descriptors(r);
      if (d.coalesced > want.coalesced) want = d;
    }
    const RsDescriptorCounts got = plan.max_level1_descriptors();
    SCOPED_TRACE("M = " + std::to_string(m) + ", L = " + std::to_string(l));
    EXPECT_EQ(got.coalesced, want.coalesced);
    EXPECT_EQ(got.flat, want.flat);
    EXPECT_EQ(got.tails, want.tails);
  }
}

// Property over random topologies: every accepted plan gives every destination element
// exactly one Level 1 owner per contributor, i.e. each sub-slice exactly one local GPU.
TEST(RsPlan, PropertyOneOwnerPerElementPerWave) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (int trial = 0; trial < 200; ++trial) {
    const int m = static_cast<int>(rng() % 70) + 1;
    const int l = static_cast<int>(rng() % 8) + 1;
    const int w = static_cast<int>(rng() % l) + 1;
    const RsPlan plan(group(m, l, {{"w", 3 * m * l + 1, 3}}),
                      options(w, 1 + static_cast<int>(rng() % 8),
                              rng() % 2 ? RsMode::kInPlace : RsMode::kSlotReuse));
    if (!validate_rs_plan(plan).accepted) {
      EXPECT_NE(l % w, 0) << "only non-divisor wave widths may be rejected (Prop. 4.1)";
      continue;
    }
    for (const RsWave& wave : plan.waves()) {
      for (int c = wave.first_contributor; c <= wave.last_contributor; ++c) {
        std::vector<int> owners(static_cast<std::size_t>(l), 0);
        for (int j = 0; j < l; ++j)
          ++owners[static_cast<std::size_t>(plan.sub_slice(j, c))];
        for (int count : owners)
          EXPECT_EQ(count, 1);
      }
    }
  }
}

}  // namespace
}  // namespace tide
