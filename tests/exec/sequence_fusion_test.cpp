// The CUDA sequence runner's fusion pass (sequence_fusion.hpp, NOTE [CUDA call sequences] 1)
// on the host: hand-made op lists, and every template of the RS and AG sequences at several
// topologies against an independent oracle (maximal runs per stream, placed by their last
// wait / first addition, then ordered by those places). Prints the ops per call before and
// after fusion at 8 x 8 (the enqueue benchmark's groups). No GPU needed.
#include "sequence_fusion.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "test_seed.hpp"
#include "tide/core/ag_plan.hpp"
#include "tide/core/layout.hpp"
#include "tide/core/models.hpp"
#include "tide/core/rs_plan.hpp"
#include "tide/program/call_sequence.hpp"

namespace tide::exec::sequence_detail {
namespace {

using program::OpKind;

// Counter words of the hand-made lists.
std::uint64_t g_words[16];

SeqOp wait(int stream, int counter, std::int64_t value) {
  SeqOp m;
  m.kind = OpKind::kWait;
  m.stream = stream;
  m.word = &g_words[counter];
  m.total = static_cast<std::size_t>(counter);
  m.value = value;
  return m;
}

SeqOp signal(int stream, int counter, std::int64_t value) {
  SeqOp m = wait(stream, counter, value);
  m.kind = OpKind::kSignal;
  return m;
}

SeqOp data(int stream, OpKind kind, int tag) {
  SeqOp m;
  m.kind = kind;
  m.stream = stream;
  m.elems = tag;
  if (kind == OpKind::kCopy) m.copies.resize(1);
  return m;
}

SeqOp rail_put(int stream, int counter, std::int64_t value, int tag) {
  SeqOp m = signal(stream, counter, value);
  m.kind = OpKind::kRailPut;
  m.elems = tag;
  m.copies.resize(2);
  return m;
}

// A compact description of an op: kind, stream, tag, and its (counter, value) terms.
std::string show(const SeqOp& m, const std::uint64_t* base = g_words) {
  std::string s = std::string(program::op_kind_name(m.kind)) + "@" + std::to_string(m.stream);
  if (m.kind == OpKind::kWait) {
    for (const WaitTerm& w : m.waits)
      s += " " + std::to_string(w.total) + ">=" + std::to_string(w.value);
  } else if (m.kind == OpKind::kSignal) {
    for (const AddTerm& a : m.adds)
      s += " " + std::to_string(a.word - base) + "+=" + std::to_string(a.value);
  } else {
    s += m.kind == OpKind::kCopy ? " x" + std::to_string(m.copies.size())
                                 : " #" + std::to_string(m.elems);
  }
  return s;
}

std::vector<std::string> show(const std::vector<SeqOp>& ops) {
  std::vector<std::string> v;
  for (const SeqOp& m : ops)
    v.push_back(show(m));
  return v;
}

TEST(SequenceFusion, WaitsTakeTheLastPlaceAdditionsTheFirst) {
  std::vector<SeqOp> ops;
  ops.push_back(wait(0, 1, 5));                     // 0
  ops.push_back(signal(1, 2, 1));                   // 1
  ops.push_back(wait(0, 3, 2));                     // 2: fuses with 0, placed here
  ops.push_back(signal(1, 4, 1));                   // 3: fuses into 1
  ops.push_back(data(0, OpKind::kSum, 7));          // 4
  ops.push_back(wait(1, 5, 1));                     // 5
  ops.push_back(data(2, OpKind::kEventRecord, 8));  // 6
  ops.push_back(wait(1, 5, 3));                     // 7: same counter as 5: the higher one
  ops.push_back(signal(0, 6, 2));                   // 8
  ops.push_back(rail_put(0, 6, 3, 9));              // 9: copies split off: no fusion with 8
  ops.push_back(signal(0, 6, 4));                   // 10: fuses into 9's addition (summed)
  ops.push_back(signal(0, 7, 1));                   // 11: likewise
  SeqOp empty = data(2, OpKind::kCopy, 10);
  empty.empty = true;
  ops.push_back(std::move(empty));               // 12: enqueues nothing: dropped
  ops.push_back(data(2, OpKind::kRelease, 11));  // 13: dropped
  const std::vector<std::string> want = {
      "signal@1 2+=1 4+=1",  // placed at op 1
      "wait@0 1>=5 3>=2",    // at op 2
      "sum@0 #7",           "event-record@2 #8",
      "wait@1 5>=3",  // at op 7
      "signal@0 6+=2",      "copy@0 x2",         "signal@0 6+=7 7+=1",
  };
  EXPECT_EQ(show(fuse_waits_and_signals(std::move(ops))), want);
}

TEST(SequenceFusion, LongRunsSplitAtTheLimits) {
  std::vector<SeqOp> ops;
  for (int i = 0; i < 7; ++i)
    ops.push_back(wait(0, i, i + 1));
  for (int i = 0; i < 5; ++i)
    ops.push_back(signal(0, 8 + i, 1));
  const std::vector<SeqOp> out = fuse_waits_and_signals(std::move(ops), FusionLimits{3, 2});
  std::vector<std::size_t> sizes;
  for (const SeqOp& m : out)
    sizes.push_back(m.kind == OpKind::kWait ? m.waits.size() : m.adds.size());
  EXPECT_EQ(sizes, (std::vector<std::size_t>{3, 3, 1, 2, 2, 1}));
  // Every term survives once, in order.
  std::vector<std::size_t> totals;
  for (const SeqOp& m : out)
    for (const WaitTerm& w : m.waits)
      totals.push_back(w.total);
  EXPECT_EQ(totals, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6}));
}

// ---- Templates against an oracle -------------------------------------------------------

// A template's ops as the runner maps them, less what fusion does not read: kind, stream
// per (rank, stream name), counter words (into `words`), copies (one per non-empty
// descriptor), emptiness; `elems` tags each op with its place in the order.
std::vector<SeqOp> skeleton(const program::CallTemplate& t, int counters,
                            std::vector<std::uint64_t>& words) {
  const program::Program& p = t.program;
  words.assign(static_cast<std::size_t>(p.ranks) * static_cast<std::size_t>(counters), 0);
  std::map<std::pair<int, int>, int> streams;
  std::vector<SeqOp> ops;
  for (const int i : t.order.order) {
    const program::Op& op = p.ops[static_cast<std::size_t>(i)];
    SeqOp m;
    m.kind = op.kind();
    m.rank = op.rank;
    m.stream = streams.emplace(std::pair{op.rank, op.stream}, static_cast<int>(streams.size()))
                   .first->second;
    m.elems = static_cast<std::int64_t>(ops.size());
    for (const program::CopyDescriptor& c : program::copies_of(op))
      if (c.src.bytes() > 0) m.copies.emplace_back();
    if (const auto use = program::counter_use_of(op)) {
      m.total = static_cast<std::size_t>(use->counter.rank) * static_cast<std::size_t>(counters) +
                static_cast<std::size_t>(use->counter.id);
      m.word = &words[m.total];
      m.value = use->value;
    }
    switch (op.kind()) {
      case OpKind::kCopy:
        m.empty = m.copies.empty();
        break;
      case OpKind::kSum:
        m.empty = op.as<program::SumOp>().dst.bytes() == 0;
        break;
      case OpKind::kLand:
        m.empty = op.as<program::LandOp>().dst.bytes() == 0;
        break;
      case OpKind::kCast:
        m.empty = op.as<program::CastOp>().dst.bytes() == 0;
        break;
      case OpKind::kZero:
        m.empty = op.as<program::ZeroOp>().dst.bytes() == 0;
        break;
      case OpKind::kRelease:
        m.empty = true;
        break;
      default:
        break;
    }
    ops.push_back(std::move(m));
  }
  return ops;
}

// The oracle: per stream, maximal runs of waits (placed at the last) and of additions
// (placed at the first; a rail put's addition after its copies), then all by place.
std::vector<std::string> oracle(const std::vector<SeqOp>& ops, const std::uint64_t* base) {
  struct Item {
    std::int64_t place;
    std::string text;
  };
  std::vector<Item> items;
  std::map<int, std::vector<std::size_t>> by_stream;
  for (std::size_t i = 0; i < ops.size(); ++i)
    by_stream[ops[i].stream].push_back(i);
  for (const auto& [stream, list] : by_stream) {
    // Tokens of the stream: (kind, op index); a rail put is a copy then an addition.
    std::vector<std::pair<OpKind, std::size_t>> tokens;
    for (const std::size_t i : list) {
      const SeqOp& m = ops[i];
      if (m.kind == OpKind::kRelease || (m.empty && m.kind != OpKind::kRailPut)) continue;
      if (m.kind == OpKind::kRailPut) {
        if (!m.copies.empty()) tokens.emplace_back(OpKind::kCopy, i);
        tokens.emplace_back(OpKind::kSignal, i);
      } else {
        tokens.emplace_back(m.kind, i);
      }
    }
    for (std::size_t a = 0; a < tokens.size();) {
      const OpKind kind = tokens[a].first;
      std::size_t b = a + 1;
      if (kind == OpKind::kWait || kind == OpKind::kSignal)
        while (b < tokens.size() && tokens[b].first == kind)
          ++b;
      const SeqOp& first = ops[tokens[a].second];
      std::string text = std::string(program::op_kind_name(kind)) + "@" + std::to_string(stream);
      std::int64_t place = 2 * static_cast<std::int64_t>(tokens[a].second);
      if (kind == OpKind::kWait) {
        std::map<std::size_t, std::int64_t> need;  // total -> highest value, first-seen order
        std::vector<std::size_t> order;
        for (std::size_t k = a; k < b; ++k) {
          const SeqOp& m = ops[tokens[k].second];
          if (!need.contains(m.total)) order.push_back(m.total);
          need[m.total] = std::max(need.contains(m.total) ? need[m.total] : m.value, m.value);
        }
        for (const std::size_t t : order)
          text += " " + std::to_string(t) + ">=" + std::to_string(need[t]);
        place = 2 * static_cast<std::int64_t>(tokens[b - 1].second) + 1;
      } else if (kind == OpKind::kSignal) {
        std::map<const std::uint64_t*, std::int64_t> sum;
        std::vector<const std::uint64_t*> order;
        for (std::size_t k = a; k < b; ++k) {
          const SeqOp& m = ops[tokens[k].second];
          if (!sum.contains(m.word)) order.push_back(m.word);
          sum[m.word] += m.value;
        }
        for (const std::uint64_t* w : order)
          text += " " + std::to_string(w - base) + "+=" + std::to_string(sum[w]);
        place += 1;  // after a rail put's copies
      } else {
        text += kind == OpKind::kCopy ? " x" + std::to_string(first.copies.size())
                                      : " #" + std::to_string(first.elems);
      }
      items.push_back({place, text});
      a = b;
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& x, const Item& y) { return x.place < y.place; });
  std::vector<std::string> out;
  for (const Item& it : items)
    out.push_back(it.text);
  return out;
}

// As show(), with counter words numbered from `base`.
std::vector<std::string> describe(const std::vector<SeqOp>& ops, const std::uint64_t* base) {
  std::vector<std::string> v;
  for (const SeqOp& m : ops)
    v.push_back(show(m, base));
  return v;
}

struct Counts {
  double waits = 0, signals = 0, wait_ops = 0, signal_ops = 0, copies = 0;
};

Counts count(const std::vector<SeqOp>& before, const std::vector<SeqOp>& after) {
  Counts c;
  for (const SeqOp& m : before) {
    c.waits += m.kind == OpKind::kWait;
    c.signals += m.kind == OpKind::kSignal || m.kind == OpKind::kRailPut;
    c.copies += static_cast<double>(m.copies.size());
  }
  for (const SeqOp& m : after) {
    c.wait_ops += m.kind == OpKind::kWait;
    c.signal_ops += m.kind == OpKind::kSignal;
  }
  return c;
}

// Fuses every template of `seq` (unbounded limits, so each run is one op) and compares with
// the oracle; with the runner's limits, counts ops per call (mean over templates).
Counts check_sequence(const program::CallSequence& seq, const std::string& what) {
  Counts total;
  for (std::size_t k = 0; k < seq.templates.size(); ++k) {
    std::vector<std::uint64_t> words;
    std::vector<SeqOp> ops = skeleton(seq.templates[k], seq.counters, words);
    const std::vector<std::string> want = oracle(ops, words.data());
    std::vector<SeqOp> copy = skeleton(seq.templates[k], seq.counters, words);
    const std::vector<std::string> got = describe(
        fuse_waits_and_signals(std::move(copy), FusionLimits{1u << 20, 1u << 20}), words.data());
    std::size_t differ = 0;
    while (differ < got.size() && differ < want.size() && got[differ] == want[differ])
      ++differ;
    EXPECT_TRUE(differ == got.size() && differ == want.size())
        << what << " template " << k << ": " << got.size() << " ops, the oracle " << want.size()
        << "; first difference at " << differ << ": "
        << (differ < got.size() ? got[differ] : "(end)") << " vs "
        << (differ < want.size() ? want[differ] : "(end)");
    std::vector<SeqOp> limited = skeleton(seq.templates[k], seq.counters, words);
    const Counts c = count(ops, fuse_waits_and_signals(std::move(limited)));
    total.waits += c.waits;
    total.signals += c.signals;
    total.wait_ops += c.wait_ops;
    total.signal_ops += c.signal_ops;
    total.copies += c.copies;
  }
  const auto n = static_cast<double>(seq.templates.size());
  return {total.waits / n, total.signals / n, total.wait_ops / n, total.signal_ops / n,
          total.copies / n};
}

program::CallSequence rs_sequence(const GroupLayout& layout, const RsOptions& o) {
  const RsPlan rs(layout, o);
  return program::rs_call_sequence(rs, {},
                                   program::rs_arena_layout(rs, program::LandingStyle::kPull));
}

program::CallSequence ag_sequence(const GroupLayout& layout, bool cast) {
  AgOptions o;
  o.mixed_precision_cast = cast;
  const AgPlan ag(layout, o);
  return program::ag_call_sequence(ag, program::ag_sequence_areas(ag));
}

TEST(SequenceFusion, TemplatesMatchTheOracle) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  for (const auto& [nodes, gpus] :
       {std::pair{1, 4}, std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 4}, std::pair{4, 2}}) {
    std::vector<ParamShape> shapes;
    for (int p = 0; p < 1 + static_cast<int>(rng() % 4); ++p)
      shapes.push_back({"p" + std::to_string(p), 1 + static_cast<std::int64_t>(rng() % 29),
                        1 + static_cast<std::int64_t>(rng() % 41)});
    const GroupLayout layout(Topology(nodes, gpus), shapes, DType::kBf16, DType::kBf16);
    RsOptions o;
    o.wave_width = nodes > 2 ? std::min(2, gpus) : 0;
    o.round_width = 2;
    o.staging_chunk_elems = 8;
    const std::string where = std::to_string(nodes) + "x" + std::to_string(gpus);
    check_sequence(rs_sequence(layout, o), "RS " + where);
    check_sequence(rs_sequence(layout, RsOptions{}), "RS defaults " + where);
    check_sequence(ag_sequence(layout, true), "AG cast " + where);
    check_sequence(ag_sequence(layout, false), "AG " + where);
  }
}

// The enqueue benchmark's groups at 8 x 8 (tide_runtime_enqueue_bench: the Llama-3.1-70B
// layer with rows halved, a synthetic P = 30 group): ops per call, all 64 ranks.
std::vector<ParamShape> synthetic_shapes(int p, std::int64_t elems) {
  std::vector<ParamShape> v;
  for (int i = 0; i < p; ++i) {
    const bool norm = i % 3 == 0;
    const std::int64_t cols = norm ? 1 : 128 * (1 + i % 4);
    const std::int64_t rows = std::max<std::int64_t>(1, elems / cols / (norm ? 64 : 1)) | 1;
    v.push_back({"p" + std::to_string(i), rows, cols});
  }
  return v;
}

TEST(SequenceFusion, OpsPerCallAt8x8) {
  std::vector<ParamShape> llama = find_model_group("llama3.1-70b").params;
  for (ParamShape& s : llama)
    s.rows = std::max<std::int64_t>(1, s.rows / 2);
  for (const auto& [name, shapes] :
       {std::pair{std::string("llama3.1-70b layer"), llama},
        std::pair{std::string("synthetic P = 30"), synthetic_shapes(30, 65536)}}) {
    const GroupLayout layout(Topology(8, 8), shapes, DType::kBf16, DType::kBf16);
    for (const auto& [what, seq] :
         {std::pair{std::string("AG cast"), ag_sequence(layout, true)},
          std::pair{std::string("RS"), rs_sequence(layout, RsOptions{})}}) {
      const Counts c = check_sequence(seq, name + " " + what);
      std::printf(
          "[ fusion   ] %s %s at 8x8: copies %.0f; waits %.0f -> %.0f wait ops; counter "
          "additions %.0f -> %.0f launches\n",
          name.c_str(), what.c_str(), c.copies, c.waits, c.wait_ops, c.signals, c.signal_ops);
      EXPECT_LE(c.wait_ops, c.waits);
      EXPECT_LE(c.signal_ops, c.signals);
      EXPECT_GT(c.wait_ops, 0);
    }
  }
}

}  // namespace
}  // namespace tide::exec::sequence_detail
