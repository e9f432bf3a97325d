// Happens-before checking of the reference executor: missing event waits, missing credits,
// early releases, deadlocks, never-satisfiable waits and landings that sum a partial twice are
// reported naming the ops; a correct multi-rank program is clean under 20 seeds with identical
// outputs.
#include <gtest/gtest.h>

#include <algorithm>

#include "exec_test_util.hpp"
#include "tide/exec/fault_detection.hpp"

namespace tide::exec::testing {
namespace {

bool names(const ExecError& e, const Program& p, int op) {
  return e.message.find("'" + p.ops[static_cast<std::size_t>(op)].label + "'") != std::string::npos;
}

bool is_race(ErrorKind k) {
  return k == ErrorKind::kUnorderedRead || k == ErrorKind::kUnorderedWrite ||
         k == ErrorKind::kReleasedRead;
}

// Finds a race error between ops a and b (either way round).
const ExecError* race_between(const RunResult& r, const Program& p, int a, int b) {
  for (const ExecError& e : r.errors) {
    if (!is_race(e.kind)) continue;
    if ((e.op == a && e.other_op == b) || (e.op == b && e.other_op == a)) {
      if (names(e, p, a) && names(e, p, b)) return &e;
    }
  }
  return nullptr;
}

// Producer on stream 0, consumer on stream 1 of the same rank; `with_event` orders them.
Program producer_consumer(bool with_event, int* producer, int* consumer) {
  Program p = make_program(1, 256, {}, 0, {"compute", "copy"});
  p.events = 1;
  *producer = add(p, copy_op(0, 0, "producer", bytes(arena(0), 0, 64), bytes(arena(0), 64, 64)));
  if (with_event) add(p, sync_op(OpKind::kEventRecord, 0, 0, "record produced", 0, 0, 0, 0));
  if (with_event) add(p, sync_op(OpKind::kEventWait, 0, 1, "wait produced", 0, 0, 0, 0));
  *consumer = add(p, copy_op(0, 1, "consumer", bytes(arena(0), 64, 64), bytes(arena(0), 128, 64)));
  return p;
}

TEST(ReferenceRaces, MissingEventWaitIsARaceNamingBothOps) {
  int producer = 0, consumer = 0;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Program p = producer_consumer(false, &producer, &consumer);
    ReferenceExecutor ex(p);
    ex.input(arena(0), 0, 128);  // stale contents in the consumer's source too
    const RunResult r = ex.run(seeded(seed, 0.9));
    EXPECT_NE(race_between(r, p, producer, consumer), nullptr) << error_list(r);
  }
  const Program ok = producer_consumer(true, &producer, &consumer);
  ReferenceExecutor ex(ok);
  ex.input(arena(0), 0, 128);
  const RunResult r = ex.run();
  EXPECT_TRUE(r.clean()) << error_list(r);
}

// Rank 0 produces a block, signals rank 1; rank 1 pulls it over NVLink and (with credits)
// signals back; rank 0 then overwrites the block with the next one.
Program credit_program(bool with_credit, int* pull, int* overwrite) {
  Program p = make_program(2, 512);
  p.counters = 2;  // 0: data ready (on rank 1), 1: credit (on rank 0)
  add(p, copy_op(0, 0, "produce block 0", bytes(arena(0), 256, 64), bytes(arena(0), 0, 64)));
  add(p, sync_op(OpKind::kSignal, 0, 0, "signal ready 0", 1, 0, 1));
  if (with_credit) add(p, sync_op(OpKind::kWait, 0, 0, "wait credit", 0, 1, 1));
  *overwrite =
      add(p, copy_op(0, 0, "produce block 1", bytes(arena(0), 320, 64), bytes(arena(0), 0, 64)));
  add(p, sync_op(OpKind::kWait, 1, 0, "wait ready 0", 1, 0, 1));
  *pull = add(p, copy_op(1, 0, "pull block 0", bytes(arena(0), 0, 64), bytes(arena(1), 0, 64)));
  add(p, sync_op(OpKind::kSignal, 1, 0, "credit to rank 0", 0, 1, 1));
  return p;
}

TEST(ReferenceRaces, OverwriteBeforePeerReadIsReported) {
  int pull = 0, overwrite = 0;
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Program p = credit_program(false, &pull, &overwrite);
    ReferenceExecutor ex(p);
    ex.input(arena(0), 256, 128);
    const RunResult r = ex.run(seeded(seed, 0.5));
    const ExecError* e = race_between(r, p, pull, overwrite);
    ASSERT_NE(e, nullptr) << error_list(r);
    EXPECT_EQ(e->buffer, arena(0));
    EXPECT_EQ(e->begin, 0);
    EXPECT_EQ(e->end, 64);
  }
  const Program ok = credit_program(true, &pull, &overwrite);
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    ReferenceExecutor ex(ok);
    ex.input(arena(0), 256, 128);
    const RunResult r = ex.run(seeded(seed, 0.5));
    EXPECT_TRUE(r.clean()) << error_list(r);
  }
}

TEST(ReferenceRaces, ReleaseBeforeReadCompletesIsReported) {
  for (bool with_event : {false, true}) {
    Program p = make_program(1, 256, {128}, 0, {"rs", "host"});
    p.events = 1;
    const int read =
        add(p, copy_op(0, 0, "read grad", bytes(tensor(0, 0), 0, 128), bytes(arena(0), 0, 128)));
    if (with_event) add(p, sync_op(OpKind::kEventRecord, 0, 0, "readEv", 0, 0, 0, 0));
    if (with_event) add(p, sync_op(OpKind::kEventWait, 0, 1, "wait readEv", 0, 0, 0, 0));
    Op rel;
    rel.payload = program::ReleaseOp{bytes(tensor(0, 0), 0, 128)};
    rel.rank = 0;
    rel.stream = 1;
    rel.label = "free grad";
    const int release = add(p, rel);
    for (std::uint64_t seed = 0; seed < 6; ++seed) {
      ReferenceExecutor ex(p);
      ex.input(tensor(0, 0));
      const RunResult r = ex.run(seeded(seed, 0.9));
      if (with_event) {
        EXPECT_TRUE(r.clean()) << error_list(r);
      } else {
        EXPECT_NE(race_between(r, p, read, release), nullptr) << error_list(r);
      }
    }
  }
}

TEST(ReferenceRaces, WaitNobodySignalsIsStaticAndDeadlock) {
  Program p = make_program(1, 64, {}, 0, {"a", "b"});
  p.counters = 1;
  const int wait = add(p, sync_op(OpKind::kWait, 0, 0, "wait forever", 0, 0, 1));
  add(p, copy_op(0, 0, "after", bytes(arena(0), 0, 8), bytes(arena(0), 8, 8)));
  add(p, sync_op(OpKind::kSignal, 0, 1, "signal other", 0, 0, 0));  // adds 0
  ReferenceExecutor ex(p);
  ex.input(arena(0));
  const RunResult r = ex.run();
  EXPECT_FALSE(r.completed);
  EXPECT_TRUE(r.deadlock);
  ASSERT_EQ(r.count(ErrorKind::kUnsatisfiableWait), 1) << error_list(r);
  ASSERT_EQ(r.count(ErrorKind::kDeadlock), 1) << error_list(r);
  for (const ExecError& e : r.errors) {
    EXPECT_EQ(e.op, wait);
    EXPECT_NE(e.message.find("wait forever"), std::string::npos);
  }
  EXPECT_EQ(r.ops_run, 1);  // only the other stream's signal
}

TEST(ReferenceRaces, CyclicWaitsDeadlockNamingEachStreamHead) {
  Program p = make_program(2, 64);
  p.counters = 1;
  const int w0 = add(p, sync_op(OpKind::kWait, 0, 0, "rank 0 waits for rank 1", 0, 0, 1));
  add(p, sync_op(OpKind::kSignal, 0, 0, "rank 0 signals", 1, 0, 1));
  const int w1 = add(p, sync_op(OpKind::kWait, 1, 0, "rank 1 waits for rank 0", 1, 0, 1));
  add(p, sync_op(OpKind::kSignal, 1, 0, "rank 1 signals", 0, 0, 1));
  ReferenceExecutor ex(p);
  const RunResult r = ex.run();
  EXPECT_EQ(r.count(ErrorKind::kUnsatisfiableWait), 0);
  ASSERT_EQ(r.count(ErrorKind::kDeadlock), 2) << error_list(r);
  std::vector<int> heads;
  for (const ExecError& e : r.errors)
    heads.push_back(e.op);
  std::sort(heads.begin(), heads.end());
  EXPECT_EQ(heads, (std::vector<int>{w0, w1}));
  EXPECT_NE(r.errors[0].message.find("to reach 1; it holds 0"), std::string::npos);
}

TEST(ReferenceRaces, EventNeverRecordedIsStatic) {
  Program p = make_program(1, 64);
  p.events = 2;
  add(p, sync_op(OpKind::kEventRecord, 0, 0, "rec 0", 0, 0, 0, 0));
  add(p, sync_op(OpKind::kEventWait, 0, 0, "wait 1", 0, 0, 0, 1));
  ReferenceExecutor ex(p);
  const RunResult r = ex.run();
  EXPECT_EQ(r.count(ErrorKind::kUnsatisfiableWait), 1) << error_list(r);
  EXPECT_EQ(r.count(ErrorKind::kDeadlock), 1) << error_list(r);
}

// A ring reduce over R ranks with one inbox slot per rank, reused every round under credits:
// round k, rank r rail-puts its running fp32 partial to rank r+1's inbox (after r+1's credit
// for round k-1), r+1 waits for the arrival, lands it into its output (wave k) and returns
// the credit. A fork to a copy stream with events snapshots each rank's output at the end.
Program ring_program(int ranks, int rounds, std::int64_t elems) {
  const std::int64_t b = elems * 4;
  // arena: [0, b) inbox, [b, 2b) partial to send, [2b, 3b) snapshot.
  Program p = make_program(ranks, 3 * b, {}, b, {"comm", "copy"});
  p.counters = 2;  // 0: arrivals (on the receiver), 1: credits (on the sender)
  p.events = 1;    // event ids are per rank: every rank records its own event 0
  for (int r = 0; r < ranks; ++r) {
    const int next = (r + 1) % ranks, prev = (r + ranks - 1) % ranks;
    for (int k = 0; k < rounds; ++k) {
      const std::string rk = "r" + std::to_string(r) + " round " + std::to_string(k);
      if (k > 0) add(p, sync_op(OpKind::kWait, r, 0, rk + " wait credit", r, 1, k));
      Op put = copy_op(r, 0, rk + " put", bytes(arena(r), b, b), bytes(arena(next), 0, b));
      put.payload =
          program::RailPutOp{put.as<program::CopyOp>().copies, program::Counter{next, 0}, 1};
      add(p, put);
      add(p, sync_op(OpKind::kWait, r, 0, rk + " wait arrival", r, 0, k + 1));
      Op land;
      auto& land_op = land.payload.emplace<program::LandOp>();
      land.rank = r;
      land.label = rk + " land";
      land_op.dst = bytes(output(r), 0, b);
      land_op.sources = {bytes(arena(r), 0, b)};
      land_op.wave_index = k;
      land_op.ctas = 2;
      add(p, land);
      add(p, sync_op(OpKind::kSignal, r, 0, rk + " credit", prev, 1, 1));
    }
    add(p, sync_op(OpKind::kEventRecord, r, 0, "r" + std::to_string(r) + " done", 0, 0, 0, 0));
    add(p, sync_op(OpKind::kEventWait, r, 1, "r" + std::to_string(r) + " wait done", 0, 0, 0, 0));
    add(p, copy_op(r, 1, "r" + std::to_string(r) + " snapshot", bytes(output(r), 0, b),
                   bytes(arena(r), 2 * b, b)));
  }
  return p;
}

TEST(ReferenceRaces, CorrectProgramCleanUnder20SeedsWithIdenticalOutputs) {
  constexpr int kRanks = 4, kRounds = 3;
  constexpr std::int64_t kElems = 257;
  const Program p = ring_program(kRanks, kRounds, kElems);
  const tide::testing::TestSeed data;
  const std::uint64_t data_seed = data.value();
  std::vector<std::byte> first;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("schedule seed " + std::to_string(seed));
    std::mt19937_64 rng(data_seed);
    ReferenceExecutor ex(p);
    std::vector<std::vector<float>> partial;
    for (int r = 0; r < kRanks; ++r)
      partial.push_back(fill_normal(ex.input(arena(r), kElems * 4, kElems * 4), DType::kFp32, rng));
    const RunResult r = ex.run(seeded(seed, 0.9));
    ASSERT_TRUE(r.clean()) << error_list(r);
    std::vector<std::byte> all;
    for (int rank = 0; rank < kRanks; ++rank) {
      const auto out = ex.memory(output(rank));
      all.insert(all.end(), out.begin(), out.end());
      // The output is the previous rank's partial landed kRounds times.
      const std::vector<float> got = read_fp32(out);
      const std::vector<float>& in =
          partial[static_cast<std::size_t>((rank + kRanks - 1) % kRanks)];
      for (std::size_t e = 0; e < got.size(); ++e) {
        float want = 0;
        for (int k = 0; k < kRounds; ++k)
          want = arith::land(want, in[e], k, false);
        ASSERT_EQ(bits(got[e]), bits(want));
      }
      const auto snap = ex.memory(arena(rank)).subspan(2 * kElems * 4, kElems * 4);
      ASSERT_TRUE(std::equal(snap.begin(), snap.end(), out.begin()));
    }
    if (first.empty()) first = all;
    EXPECT_EQ(all, first);
  }
}

TEST(ReferenceRaces, DroppedCreditInRingIsCaught) {
  Program p = ring_program(3, 3, 64);
  // Drop rank 1's credit wait for round 2: its put may overwrite rank 2's inbox too early.
  const auto it = std::find_if(p.ops.begin(), p.ops.end(),
                               [](const Op& o) { return o.label == "r1 round 2 wait credit"; });
  ASSERT_NE(it, p.ops.end());
  p.ops.erase(it);
  int caught = 0;
  for (std::uint64_t seed = 0; seed < 10; ++seed) {
    ReferenceExecutor ex(p);
    for (int r = 0; r < 3; ++r)
      ex.input(arena(r), 256, 256);
    const RunResult r = ex.run(seeded(seed, 0.9));
    caught += r.count(ErrorKind::kUnorderedWrite) + r.count(ErrorKind::kUnorderedRead) > 0;
  }
  EXPECT_EQ(caught, 10);
}

// Two landings on one stream: the first sums partials a and b, the second a' and c, where a'
// is the bytes of a as `between` left them (NOTE [reference execution semantics] 4).
enum class Between { kNothing, kRewrite, kZeroBoth };

Program two_landings(Between between, int* first, int* second) {
  constexpr std::int64_t kB = 16 * 4;
  Program p = make_program(1, 3 * kB, {kB}, 2 * kB);
  auto land = [&](std::string label, Region x, Region y, std::int64_t out) {
    Op op;
    op.label = std::move(label);
    auto& l = op.payload.emplace<program::LandOp>();
    l.dst = bytes(output(0), out, kB);
    l.sources = {x, y};
    return add(p, op);
  };
  auto zero = [&](std::string label) {
    Op op;
    op.label = std::move(label);
    op.payload.emplace<program::ZeroOp>().dst = bytes(arena(0), 0, kB);
    add(p, op);
  };
  if (between == Between::kZeroBoth) zero("zero a");
  *first = land("land a + b", bytes(arena(0), 0, kB), bytes(arena(0), kB, kB), 0);
  if (between == Between::kRewrite) {
    add(p, copy_op(0, 0, "a' <- next partial", bytes(tensor(0, 0), 0, kB), bytes(arena(0), 0, kB)));
  }
  *second = land("land a' + c", bytes(arena(0), 0, kB), bytes(arena(0), 2 * kB, kB), kB);
  return p;
}

RunResult run_two_landings(Between between, int* first, int* second) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  const Program p = two_landings(between, first, second);
  ReferenceExecutor ex(p);
  constexpr std::int64_t kB = 16 * 4;
  if (between != Between::kZeroBoth) fill_normal(ex.input(arena(0), 0, kB), DType::kFp32, rng);
  fill_normal(ex.input(arena(0), kB, 2 * kB), DType::kFp32, rng);
  fill_normal(ex.input(tensor(0, 0)), DType::kFp32, rng);
  return ex.run();
}

TEST(ReferenceRaces, LandingThatSumsAnAlreadySummedPartialIsAnUninitialisedRead) {
  int first = 0, second = 0;
  const RunResult r = run_two_landings(Between::kNothing, &first, &second);
  ASSERT_EQ(r.error_count, 1) << error_list(r);
  const ExecError& e = r.errors[0];
  EXPECT_EQ(e.kind, ErrorKind::kConsumedRead) << error_list(r);
  EXPECT_EQ(e.op, second);
  EXPECT_EQ(e.other_op, first);
  EXPECT_EQ(e.begin, 0);  // only a: c is fresh
  EXPECT_EQ(e.end, 16 * 4);
  EXPECT_NE(e.message.find("'land a' + c'"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("'land a + b'"), std::string::npos) << e.message;
  EXPECT_EQ(program::detection_name(classify_run(r, true, false)), "uninitialised-read");
}

TEST(ReferenceRaces, LandingsOfRewrittenPartialsOrZerosAreClean) {
  for (Between between : {Between::kRewrite, Between::kZeroBoth}) {
    int first = 0, second = 0;
    const RunResult r = run_two_landings(between, &first, &second);
    EXPECT_TRUE(r.clean()) << error_list(r);
  }
}

TEST(ReferenceRaces, ErrorsAreCapped) {
  Program p = make_program(1, 4096);
  for (int i = 0; i < 20; ++i)
    add(p, copy_op(0, 0, "unset " + std::to_string(i), bytes(arena(0), 64 * i, 32),
                   bytes(arena(0), 2048 + 64 * i, 32)));
  ReferenceExecutor ex(p);
  const RunResult r = ex.run(seeded(0, 0.0, 5));
  EXPECT_EQ(r.errors.size(), 5u);
  EXPECT_EQ(r.error_count, 20);
  EXPECT_EQ(r.count(ErrorKind::kUnwrittenRead), 20);
}

}  // namespace
}  // namespace tide::exec::testing
