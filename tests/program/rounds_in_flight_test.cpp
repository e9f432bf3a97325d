// TIDE-RS with several network rounds in flight (RsOptions::rounds_in_flight): the program
// waits for round i - d + 1's arrivals after round i's sends, every round is still observed,
// and the outputs are bitwise those of lockstep rounds on the CPU reference executor (with
// its race and deadlock checks), for several seeds and topologies.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_seed.hpp"
#include "tide/testing/cases.hpp"

namespace tide::program {
namespace {

// Labels of the net stream's puts ("put") and round waits ("arrivals") of rank 0, in order.
std::vector<std::string> net_sequence(const Program& p) {
  std::vector<std::string> out;
  for (const Op& op : p.ops) {
    if (op.rank != 0) continue;
    if (op.is<program::RailPutOp>()) out.push_back("put");
    if (const auto* wait = op.get_if<program::WaitOp>(); wait != nullptr && wait->network_round)
      out.push_back(op.label);
  }
  return out;
}

TEST(RoundsInFlight, WaitsLagTheSendsByDMinusOneRounds) {
  // 9 x 4, k = 2: 8 remote contributors in waves of 4, two rounds per wave, 4 rounds.
  const tide::testing::TestSeed seed;
  for (int d : {1, 2, 3, 6}) {
    testing::RsCaseOptions o;
    o.round_width = 2;
    o.rounds_in_flight = d;
    const testing::CollectiveCase c = testing::rs_case(9, 4, seed.value(), o);
    const std::vector<std::string> seq = net_sequence(c.program);
    // Every round is observed once, in order; before round i's wait come min(i + d, 4)
    // rounds of puts (2 each).
    int waits = 0, puts = 0;
    for (const std::string& s : seq) {
      if (s == "put") {
        ++puts;
        continue;
      }
      EXPECT_NE(s.find("round " + std::to_string(waits) + " arrivals"), std::string::npos)
          << "d = " << d << ": " << s;
      EXPECT_EQ(puts, 2 * std::min(waits + d, 4)) << "d = " << d << ", wait " << waits;
      ++waits;
    }
    EXPECT_EQ(waits, 4) << "d = " << d;
    EXPECT_EQ(puts, 8) << "d = " << d;
  }
}

TEST(RoundsInFlight, OutputsAreBitwiseThoseOfLockstepRounds) {
  const tide::testing::TestSeed base;
  const std::uint64_t seed = base.value();
  struct Topo {
    int m, l, k;
  };
  for (const Topo t : {Topo{9, 4, 2}, Topo{6, 2, 1}, Topo{5, 8, 3}}) {
    for (std::uint64_t s = seed; s < seed + 3; ++s) {
      for (RsMode mode : {RsMode::kInPlace, RsMode::kSlotReuse}) {
        testing::RsCaseOptions o;
        o.round_width = t.k;
        o.mode = mode;
        const auto lockstep = testing::reference_outputs(testing::rs_case(t.m, t.l, s, o));
        for (int d : {2, 4}) {
          o.rounds_in_flight = d;
          // reference_outputs throws on a race or deadlock.
          const auto pipelined = testing::reference_outputs(testing::rs_case(t.m, t.l, s, o));
          EXPECT_EQ(pipelined, lockstep)
              << t.m << " x " << t.l << " k = " << t.k << " d = " << d << " mode "
              << mode_name(mode) << " (case seed " << s << ")";
        }
      }
    }
  }
}

}  // namespace
}  // namespace tide::program
