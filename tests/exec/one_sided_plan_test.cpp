// The one-sided plan (src/transport/one_sided_plan.hpp) against a brute-force reference on
// random calls from a printed seed, and its refusals of bad inputs.
#include "transport/one_sided_plan.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "test_seed.hpp"
#include "tide/core/error.hpp"

namespace tide::transport {
namespace {

// The reference: every check by the definition (pairwise overlaps), every count by a scan.
struct Reference {
  std::optional<std::string> error;  // "invalid" or "unsupported"
  std::vector<PlannedPut> puts;
  std::vector<int> signals, ordinals;
  std::map<std::tuple<int, int, int>, int> waits;
};

Reference reference(const std::vector<OneSidedMessage>& ms, int ranks, int lanes,
                    const std::vector<std::int64_t>& window, bool token) {
  Reference r;
  // First problem in input order, as the plan meets them: per message its ranks, then its
  // pieces in order; overlaps only after every message passed.
  for (std::size_t i = 0; i < ms.size() && !r.error; ++i) {
    const OneSidedMessage& m = ms[i];
    if (m.from < 0 || m.from >= ranks || m.to < 0 || m.to >= ranks || m.from == m.to ||
        m.lane < 0 || m.lane >= lanes) {
      r.error = "invalid";
      break;
    }
    for (const OneSidedPiece& p : m.pieces) {
      if (p.bytes < 0 || p.bytes != p.expected_bytes) {
        r.error = "invalid";
        break;
      }
      if (p.bytes == 0) continue;
      if (p.dst_offset == kNotInWindow || p.src_offset == kNotInWindow) {
        r.error = "unsupported";
        break;
      }
      const std::int64_t w = window[static_cast<std::size_t>(m.to)];
      const std::int64_t ws = window[static_cast<std::size_t>(m.from)];
      bool inside = p.dst_offset >= 0 && p.src_offset >= 0;
      for (std::int64_t b = 0; inside && b < p.bytes; ++b)
        inside = p.dst_offset + b < w && p.src_offset + b < ws;
      if (!inside) {
        r.error = "invalid";
        break;
      }
    }
  }
  if (r.error) return r;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    for (std::size_t j = 0; j < ms.size(); ++j) {
      if (ms[i].to != ms[j].to) continue;
      for (std::size_t a = 0; a < ms[i].pieces.size(); ++a) {
        for (std::size_t b = 0; b < ms[j].pieces.size(); ++b) {
          if (i == j && a == b) continue;
          const OneSidedPiece& p = ms[i].pieces[a];
          const OneSidedPiece& q = ms[j].pieces[b];
          if (p.bytes == 0 || q.bytes == 0) continue;
          for (std::int64_t x = p.dst_offset; x < p.dst_offset + p.bytes; ++x)
            if (x >= q.dst_offset && x < q.dst_offset + q.bytes) r.error = "invalid";
        }
      }
    }
  }
  if (r.error) return r;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    const OneSidedMessage& m = ms[i];
    int data = 0;
    for (const OneSidedPiece& p : m.pieces) {
      if (p.bytes == 0) continue;
      r.puts.push_back(
          {static_cast<int>(i), m.from, m.to, m.lane, p.dst_offset, p.bytes, p.src_offset});
      ++data;
    }
    const int signals = data + (token ? 1 : 0) + (!token && data == 0 ? 1 : 0);
    int before = 0;
    for (std::size_t j = 0; j < i; ++j)
      if (ms[j].from == m.from && ms[j].to == m.to && ms[j].lane == m.lane) before += r.signals[j];
    r.signals.push_back(signals);
    r.ordinals.push_back(before);
    r.waits[{m.to, m.from, m.lane}] += signals;
  }
  return r;
}

std::optional<std::string> run(const std::vector<OneSidedMessage>& ms, const OneSidedLimits& l,
                               OneSidedPlan& plan) {
  try {
    plan = plan_one_sided(ms, l);
  } catch (const Unsupported&) {
    return "unsupported";
  } catch (const std::invalid_argument&) {
    return "invalid";
  }
  return std::nullopt;
}

// A random call: destinations carved from disjoint slots of each receiver's window, sources
// anywhere in the sender's (past it where it is the smaller), then (at times) one fault: an
// overlap, a piece past the window, a byte mismatch, caller memory as the destination or the
// source, a source past the sender's window.
std::vector<OneSidedMessage> random_call(std::mt19937_64& rng, int ranks, int lanes,
                                         const std::vector<std::int64_t>& window) {
  std::uniform_int_distribution<int> count(0, 12), rank(0, ranks - 1), lane(0, lanes - 1),
      pieces(0, 3);
  std::vector<std::int64_t> next(static_cast<std::size_t>(ranks), 0);
  std::vector<OneSidedMessage> ms(static_cast<std::size_t>(count(rng)));
  for (OneSidedMessage& m : ms) {
    m.from = rank(rng);
    do {
      m.to = rank(rng);
    } while (m.to == m.from);
    m.lane = lane(rng);
    const int n = pieces(rng);
    for (int k = 0; k < n; ++k) {
      std::int64_t& at = next[static_cast<std::size_t>(m.to)];
      const std::int64_t room = window[static_cast<std::size_t>(m.to)] - at;
      const std::int64_t bytes = room <= 0 ? 0
                                           : std::uniform_int_distribution<std::int64_t>(
                                                 0, std::min<std::int64_t>(room, 24))(rng);
      const std::int64_t gap = std::uniform_int_distribution<std::int64_t>(0, 3)(rng);
      const std::int64_t source_room =
          std::max<std::int64_t>(0, window[static_cast<std::size_t>(m.from)] - bytes);
      const std::int64_t source = std::uniform_int_distribution<std::int64_t>(0, source_room)(rng);
      m.pieces.push_back({bytes, bytes, bytes == 0 ? 0 : at, source});
      at += bytes + gap;
    }
  }
  if (ms.empty() || std::uniform_int_distribution<int>(0, 2)(rng) != 0) return ms;
  OneSidedMessage& m = ms[std::uniform_int_distribution<std::size_t>(0, ms.size() - 1)(rng)];
  if (m.pieces.empty()) {
    m.lane = lanes;  // outside
    return ms;
  }
  OneSidedPiece& p =
      m.pieces[std::uniform_int_distribution<std::size_t>(0, m.pieces.size() - 1)(rng)];
  switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
    case 0:
      p.dst_offset = std::max<std::int64_t>(0, p.dst_offset - 5);  // may overlap its neighbour
      if (p.bytes == 0) p.bytes = p.expected_bytes = 1;
      break;
    case 1:
      p.dst_offset = window[static_cast<std::size_t>(m.to)] - p.bytes + 1;
      if (p.bytes == 0) p.bytes = p.expected_bytes = 2;
      break;
    case 2:
      p.expected_bytes = p.bytes + 1;
      break;
    case 3:
      p.dst_offset = kNotInWindow;
      if (p.bytes == 0) p.bytes = p.expected_bytes = 3;
      break;
    case 4:
      p.src_offset = kNotInWindow;
      if (p.bytes == 0) p.bytes = p.expected_bytes = 3;
      break;
    default:
      if (p.bytes == 0) p.bytes = p.expected_bytes = 2;
      p.src_offset = window[static_cast<std::size_t>(m.from)] - p.bytes + 1;
      break;
  }
  return ms;
}

TEST(OneSidedPlan, RandomCallsMatchTheReference) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  int failures = 0, accepted = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int ranks = std::uniform_int_distribution<int>(2, 6)(rng);
    const int lanes = std::uniform_int_distribution<int>(1, 2)(rng);
    const bool token = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    std::vector<std::int64_t> window(static_cast<std::size_t>(ranks));
    for (std::int64_t& w : window)
      w = std::uniform_int_distribution<std::int64_t>(0, 96)(rng);
    const std::vector<OneSidedMessage> ms = random_call(rng, ranks, lanes, window);
    const Reference want = reference(ms, ranks, lanes, window, token);
    OneSidedPlan plan;
    const auto got = run(ms, {ranks, lanes, window, token}, plan);
    ASSERT_EQ(got, want.error) << "trial " << trial;
    if (got) {
      ++failures;
      continue;
    }
    ++accepted;
    ASSERT_EQ(plan.puts.size(), want.puts.size()) << "trial " << trial;
    for (std::size_t i = 0; i < plan.puts.size(); ++i) {
      const PlannedPut& a = plan.puts[i];
      const PlannedPut& b = want.puts[i];
      EXPECT_EQ(std::tie(a.message, a.from, a.to, a.lane, a.offset, a.bytes, a.src_offset),
                std::tie(b.message, b.from, b.to, b.lane, b.offset, b.bytes, b.src_offset))
          << "trial " << trial << " put " << i;
    }
    ASSERT_EQ(plan.messages.size(), ms.size());
    for (std::size_t i = 0; i < ms.size(); ++i) {
      EXPECT_EQ(plan.messages[i].signals, want.signals[i]) << "trial " << trial;
      EXPECT_EQ(plan.messages[i].ordinal, want.ordinals[i]) << "trial " << trial;
    }
    std::size_t nonzero = 0;
    for (int r = 0; r < ranks; ++r) {
      for (int p = 0; p < ranks; ++p) {
        for (int l = 0; l < lanes; ++l) {
          const auto it = want.waits.find({r, p, l});
          const int count = it == want.waits.end() ? 0 : it->second;
          nonzero += count > 0 ? 1 : 0;
          EXPECT_EQ(plan.wait_count(r, p, l), count) << "trial " << trial;
        }
      }
    }
    EXPECT_EQ(plan.waits.size(), nonzero) << "trial " << trial;
  }
  // Both kinds of calls were drawn.
  EXPECT_GT(failures, 100);
  EXPECT_GT(accepted, 100);
}

class OneSidedPlanRefuses : public ::testing::Test {
 protected:
  std::vector<std::int64_t> window{64, 64, 64};
  OneSidedLimits limits() const { return {3, 2, window, true}; }

  std::string message_of(const std::vector<OneSidedMessage>& ms) const {
    try {
      (void)plan_one_sided(ms, limits());
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(OneSidedPlanRefuses, ADestinationOutsideTheWindow) {
  const std::string what = message_of({{0, 1, 0, {{16, 16, 56}}}});
  EXPECT_NE(what.find("outside the receiver's window of 64 bytes"), std::string::npos) << what;
  EXPECT_THROW(
      (void)plan_one_sided(std::vector<OneSidedMessage>{{0, 1, 0, {{1, 1, -2}}}}, limits()),
      InvalidArgument);
}

TEST_F(OneSidedPlanRefuses, OverlappingDestinationsOfOneCall) {
  const std::string what = message_of({{0, 2, 0, {{8, 8, 0}}}, {1, 2, 1, {{8, 8, 4}}}});
  EXPECT_NE(what.find("overlapping bytes [4, 8) of rank 2"), std::string::npos) << what;
  // The same bytes of two receivers do not overlap.
  EXPECT_NO_THROW((void)plan_one_sided(
      std::vector<OneSidedMessage>{{0, 2, 0, {{8, 8, 0}}}, {0, 1, 0, {{8, 8, 0}}}}, limits()));
}

TEST_F(OneSidedPlanRefuses, ByteCountsTheReceiverDoesNotExpect) {
  const std::string what = message_of({{0, 1, 0, {{8, 12, 0}}}});
  EXPECT_NE(what.find("the sender puts 8 bytes, the receiver expects 12"), std::string::npos)
      << what;
}

TEST_F(OneSidedPlanRefuses, CallerMemoryAsUnsupported) {
  EXPECT_THROW((void)plan_one_sided(std::vector<OneSidedMessage>{{0, 1, 0, {{8, 8, kNotInWindow}}}},
                                    limits()),
               Unsupported);
  const std::string what = message_of({{0, 1, 0, {{8, 8, kNotInWindow}}}});
  EXPECT_NE(what.find("two-sided messages"), std::string::npos) << what;
  // A source in caller memory (staged shards, gradients): NCCL puts only from a window.
  const std::vector<OneSidedMessage> from_caller{{0, 1, 0, {{8, 8, 0, kNotInWindow}}}};
  EXPECT_THROW((void)plan_one_sided(from_caller, limits()), Unsupported);
  const std::string source = message_of(from_caller);
  EXPECT_NE(source.find("the source is not in the sender's registered window"), std::string::npos)
      << source;
}

TEST_F(OneSidedPlanRefuses, ASourceOutsideTheSendersWindow) {
  window = {16, 64, 64};
  const std::string what = message_of({{0, 1, 0, {{8, 8, 0, 12}}}});
  EXPECT_NE(what.find("source bytes [12, 12 + 8) are outside the sender's window of 16 bytes"),
            std::string::npos)
      << what;
  EXPECT_NO_THROW(
      (void)plan_one_sided(std::vector<OneSidedMessage>{{0, 1, 0, {{8, 8, 0, 8}}}}, limits()));
}

TEST_F(OneSidedPlanRefuses, BadRanksLanesAndLimits) {
  EXPECT_THROW((void)plan_one_sided(std::vector<OneSidedMessage>{{0, 3, 0, {}}}, limits()),
               InvalidArgument);
  EXPECT_THROW((void)plan_one_sided(std::vector<OneSidedMessage>{{1, 1, 0, {}}}, limits()),
               InvalidArgument);
  EXPECT_THROW((void)plan_one_sided(std::vector<OneSidedMessage>{{0, 1, 2, {}}}, limits()),
               InvalidArgument);
  const std::vector<std::int64_t> two{1, 2};
  EXPECT_THROW((void)plan_one_sided({}, {3, 1, two, true}), InvalidArgument);
}

TEST(OneSidedPlan, SignalsTokensAndOrdinals) {
  const std::vector<std::int64_t> window{32, 32};
  const std::vector<OneSidedMessage> ms{
      {0, 1, 0, {{8, 8, 0}, {0, 0, 0}, {4, 4, 16}}},  // two puts and the token
      {0, 1, 0, {}},                                  // the token alone
      {1, 0, 1, {{32, 32, 0}}},
  };
  const OneSidedPlan with = plan_one_sided(ms, {2, 2, window, true});
  EXPECT_EQ(with.messages[0].signals, 3);
  EXPECT_EQ(with.messages[1].signals, 1);
  EXPECT_EQ(with.messages[1].ordinal, 3);
  EXPECT_FALSE(with.messages[1].bare_signal);
  EXPECT_EQ(with.wait_count(1, 0, 0), 4);
  EXPECT_EQ(with.wait_count(0, 1, 1), 2);
  EXPECT_EQ(with.wait_count(0, 1, 0), 0);
  const OneSidedPlan without = plan_one_sided(ms, {2, 2, window, false});
  EXPECT_EQ(without.messages[0].signals, 2);
  EXPECT_TRUE(without.messages[1].bare_signal);
  EXPECT_EQ(without.wait_count(1, 0, 0), 3);
  ASSERT_EQ(without.puts.size(), 3u);
  EXPECT_EQ(without.puts[1].offset, 16);
}

}  // namespace
}  // namespace tide::transport
