// NOTE [kept ranks]: a process keeps of a group's call sequences only what its own rank runs or
// receives. Checked against the sequences as built for every rank: the kept ops are exactly
// the rank's own and its peers' additions to it, in the built order, with their ids, ages and
// the projected legal order; and what a process retains shrinks as 1/N of the built
// templates instead of holding all N ranks' ops.
#include "tide/program/kept_ranks.hpp"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "tide/core/error.hpp"
#include "tide/program/communicator_arena.hpp"

namespace tide {
namespace {

using program::CallSequence;
using program::CallTemplate;
using program::Op;

// A few parameters of odd row counts, as a transformer block's (norms, projections).
std::vector<ParamShape> block_shapes() {
  return {{"attn_norm", 48, 1}, {"qkv", 144, 16}, {"out", 48, 16}, {"down", 51, 32}};
}

struct Sequences {
  CallSequence ag, rs;
};

Sequences build(int nodes, int gpus, RsMode mode) {
  const GroupLayout layout(Topology(nodes, gpus), block_shapes(), DType::kBf16, DType::kBf16);
  const AgPlan ag(layout, AgOptions{});
  RsOptions o;
  o.mode = mode;
  const RsPlan rs(layout, o);
  const program::CommunicatorArena arena = program::communicator_arena({{&ag, &rs, -1}});
  return {program::ag_call_sequence(ag, arena.all_gather.front()),
          program::rs_call_sequence(rs, {}, arena.reduce_scatter)};
}

// The heap a template's ops hold, roughly: the ops, their labels past the small-string buffer,
// their descriptors and regions, and the per-op vectors (ages, ids, order).
std::size_t retained_bytes(const CallTemplate& t) {
  std::size_t bytes = t.program.ops.capacity() * sizeof(Op);
  for (const Op& op : t.program.ops) {
    if (op.label.capacity() > 15) bytes += op.label.capacity() + 1;
    bytes += program::copies_of(op).size() * sizeof(program::CopyDescriptor);
    if (const auto* sum = op.get_if<program::SumOp>()) {
      bytes += sum->staged.capacity() * sizeof(program::Region) +
               sum->segments.capacity() * sizeof(program::SumSegment);
    }
    if (const auto* land = op.get_if<program::LandOp>())
      bytes += land->sources.capacity() * sizeof(program::Region);
  }
  bytes += (t.event_age.capacity() + t.op_ids.capacity() + t.order.order.capacity()) * sizeof(int);
  return bytes;
}

std::size_t retained_bytes(const CallSequence& s) {
  std::size_t bytes = 0;
  for (const CallTemplate& t : s.templates)
    bytes += retained_bytes(t);
  return bytes;
}

std::vector<bool> only(int rank, int ranks) {
  std::vector<bool> kept(static_cast<std::size_t>(ranks), false);
  kept[static_cast<std::size_t>(rank)] = true;
  return kept;
}

bool same_op(const Op& a, const Op& b) {
  const auto ua = program::counter_use_of(a), ub = program::counter_use_of(b);
  const int *ea = program::event_of(a), *eb = program::event_of(b);
  return a.kind() == b.kind() && a.rank == b.rank && a.stream == b.stream && a.label == b.label &&
         ua.has_value() == ub.has_value() &&
         (!ua || (ua->counter.rank == ub->counter.rank && ua->counter.id == ub->counter.id &&
                  ua->value == ub->value)) &&
         (ea == nullptr) == (eb == nullptr) && (ea == nullptr || *ea == *eb) &&
         program::copies_of(a).size() == program::copies_of(b).size();
}

// `kept` is `built` kept for `rank`: NOTE [kept ranks] 1-4.
void expect_kept(const CallTemplate& built, const CallTemplate& kept, int rank) {
  const program::Program& b = built.program;
  const program::Program& k = kept.program;
  const std::vector<bool> mine = only(rank, b.ranks);
  ASSERT_EQ(kept.op_ids.size(), k.ops.size());
  ASSERT_EQ(kept.event_age.size(), k.ops.size());
  EXPECT_EQ(kept.built_ops, static_cast<int>(b.ops.size()));
  EXPECT_EQ(kept.op_id_count(), static_cast<int>(b.ops.size()));
  // 1: exactly the built ops of the rank and the peers' additions to it, in the built order.
  std::vector<int> expected;
  for (std::size_t i = 0; i < b.ops.size(); ++i)
    if (program::kept_op(b.ops[i], mine)) expected.push_back(static_cast<int>(i));
  ASSERT_EQ(kept.op_ids, expected);
  int own = 0, peers = 0;
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    const Op& op = k.ops[i];
    const auto id = static_cast<std::size_t>(kept.op_ids[i]);
    ASSERT_TRUE(same_op(op, b.ops[id])) << op.label;
    EXPECT_EQ(kept.event_age[i], built.event_age[id]) << op.label;  // 2: the ages
    EXPECT_EQ(kept.op_id(i), kept.op_ids[i]);
    if (op.rank == rank) {
      ++own;
    } else {  // a peer's op: only a signal or a put into this rank's counters
      const auto add = program::addition_of(op);
      ASSERT_TRUE(add.has_value()) << "rank " << rank << " keeps peer op '" << op.label << "'";
      EXPECT_EQ(add->counter.rank, rank) << op.label;
      ++peers;
    }
  }
  int built_own = 0;
  for (const Op& op : b.ops)
    built_own += op.rank == rank;
  EXPECT_EQ(own, built_own) << "every op of the rank is kept";
  // 2: the legal order is the built one's projection onto the kept ops.
  std::vector<int> projected;
  for (const int i : built.order.order) {
    for (std::size_t j = 0; j < kept.op_ids.size(); ++j)
      if (kept.op_ids[j] == i) projected.push_back(static_cast<int>(j));
  }
  EXPECT_EQ(kept.order.order, projected);
  EXPECT_TRUE(kept.order.unplaced.empty());
  // 4: every rank's additions and buffer sizes stay.
  EXPECT_EQ(kept.additions, built.additions);
  EXPECT_EQ(k.buffers.size(), b.buffers.size());
  EXPECT_EQ(k.ranks, b.ranks);
  EXPECT_EQ(k.counters, b.counters);
  EXPECT_EQ(k.events, b.events);
  EXPECT_EQ(k.stream_names, b.stream_names);
}

struct Case {
  int nodes, gpus;
  RsMode mode;
};

class KeptRanks : public ::testing::TestWithParam<Case> {};

TEST_P(KeptRanks, EachRankKeepsItsOpsAndItsPeersAdditionsOnly) {
  const Case c = GetParam();
  const Sequences built = build(c.nodes, c.gpus, c.mode);
  const int world = c.nodes * c.gpus;
  for (const CallSequence* seq : {&built.ag, &built.rs}) {
    std::size_t kept_ops = 0, cross_rank_additions = 0, built_ops = 0;
    for (const CallTemplate& t : seq->templates) {
      built_ops += t.program.ops.size();
      for (const Op& op : t.program.ops) {
        const auto add = program::addition_of(op);
        cross_rank_additions += add && add->counter.rank != op.rank;
      }
    }
    for (int r = 0; r < world; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      CallSequence kept = *seq;
      const int ranks[] = {r};
      program::keep_ranks(kept, ranks);
      ASSERT_EQ(kept.templates.size(), seq->templates.size());
      EXPECT_EQ(kept.period, seq->period);
      EXPECT_EQ(kept.counters, seq->counters);
      for (std::size_t t = 0; t < kept.templates.size(); ++t) {
        expect_kept(seq->templates[t], kept.templates[t], r);
        kept_ops += kept.templates[t].program.ops.size();
      }
      // Keeping again changes nothing; the ids still name the built ops.
      CallSequence again = kept;
      program::keep_ranks(again, ranks);
      for (std::size_t t = 0; t < kept.templates.size(); ++t) {
        EXPECT_EQ(again.templates[t].op_ids, kept.templates[t].op_ids);
        EXPECT_EQ(again.templates[t].built_ops, kept.templates[t].built_ops);
        EXPECT_EQ(again.templates[t].order.order, kept.templates[t].order.order);
      }
    }
    // Every built op is kept by its own rank's process, and a cross-rank addition also by its
    // target's: the N processes together hold one copy of the templates, not N.
    EXPECT_EQ(kept_ops, built_ops + cross_rank_additions);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Topologies, KeptRanks,
    ::testing::Values(Case{1, 2, RsMode::kInPlace}, Case{1, 4, RsMode::kSlotReuse},
                      Case{1, 8, RsMode::kInPlace}, Case{1, 8, RsMode::kSlotReuse},
                      Case{2, 2, RsMode::kInPlace}, Case{2, 4, RsMode::kSlotReuse}),
    [](const ::testing::TestParamInfo<Case>& param) {
      return std::to_string(param.param.nodes) + "x" + std::to_string(param.param.gpus) +
             (param.param.mode == RsMode::kInPlace ? "_in_place" : "_slot_reuse");
    });

// What one process retains for one group: at most 2/N of the templates as built at every N
// (it was all of them), a quarter at N = 8; and it grows at most linearly with N (a rank's own
// ops pull from N - 1 peers), while the templates as built grow about as N^2 (measured: 9 times
// from N = 2 to N = 8, the retained part 2.8 times).
TEST(KeptRanks, RetainedBytesShrinkAsOneOverN) {
  std::size_t retained[9] = {}, as_built[9] = {};
  for (const int n : {2, 4, 8}) {
    const Sequences built = build(1, n, RsMode::kInPlace);
    as_built[n] = retained_bytes(built.ag) + retained_bytes(built.rs);
    for (int r = 0; r < n; ++r) {
      Sequences kept = built;
      const int ranks[] = {r};
      program::keep_ranks(kept.ag, ranks);
      program::keep_ranks(kept.rs, ranks);
      retained[n] = std::max(retained[n], retained_bytes(kept.ag) + retained_bytes(kept.rs));
    }
    RecordProperty("retained_bytes_n" + std::to_string(n), std::to_string(retained[n]));
    RecordProperty("built_bytes_n" + std::to_string(n), std::to_string(as_built[n]));
    std::printf("N = %d: built %zu bytes, retained per rank at most %zu\n", n, as_built[n],
                retained[n]);
    EXPECT_LE(retained[n] * static_cast<std::size_t>(n), 2 * as_built[n]) << "N = " << n;
  }
  EXPECT_LE(retained[8] * 4, as_built[8]);
  EXPECT_LE(retained[8], 4 * retained[2]);
  EXPECT_GE(as_built[8], 8 * as_built[2]) << "the built templates grow as N^2";
}

TEST(KeptRanks, RefusesARankOutsideTheSequence) {
  Sequences built = build(1, 2, RsMode::kInPlace);
  const int ranks[] = {2};
  EXPECT_THROW(program::keep_ranks(built.rs, ranks), InvalidArgument);
}

}  // namespace
}  // namespace tide
