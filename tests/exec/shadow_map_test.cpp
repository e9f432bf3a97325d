// The interval map behind race checking, against a per-byte model on random operations;
// and edge cases of the IR the executor accepts (empty copies, signal-only rail puts,
// prefix semantics of counter waits).
#include "reference/shadow_map.hpp"

#include <gtest/gtest.h>

#include <random>

#include "exec_test_util.hpp"

namespace tide::exec::testing {
namespace {

using detail::Access;
using detail::ByteState;
using detail::Shadow;
using detail::ShadowMap;

TEST(ShadowMap, MatchesPerByteModelOnRandomOperations) {
  const tide::testing::TestSeed seed;
  std::mt19937_64 rng = seed.engine();
  constexpr std::int64_t kSize = 300;
  ShadowMap map(kSize);
  std::vector<Shadow> model(kSize);
  for (int step = 0; step < 3000; ++step) {
    std::int64_t b = static_cast<std::int64_t>(rng() % (kSize + 1));
    std::int64_t e = static_cast<std::int64_t>(rng() % (kSize + 1));
    if (b > e) std::swap(b, e);
    const Access a{static_cast<std::int32_t>(rng() % 4), static_cast<std::uint32_t>(rng() % 5),
                   static_cast<std::int32_t>(step)};
    if (rng() % 2) {
      Shadow s;
      s.state = rng() % 3 ? ByteState::kWritten : ByteState::kReleased;
      s.writer = a;
      map.assign(b, e, s);
      for (std::int64_t i = b; i < e; ++i)
        model[static_cast<std::size_t>(i)] = s;
    } else {
      // A read: add or replace the reader of component a.comp.
      auto add_reader = [&](Shadow& s) {
        for (Access& r : s.readers)
          if (r.comp == a.comp) {
            r = a;
            return;
          }
        s.readers.push_back(a);
      };
      std::int64_t next = b;
      map.visit(b, e, [&](std::int64_t pb, std::int64_t pe, Shadow& s) {
        ASSERT_EQ(pb, next);
        ASSERT_LT(pb, pe);
        next = pe;
        for (std::int64_t i = pb; i < pe; ++i)
          ASSERT_EQ(s, model[static_cast<std::size_t>(i)]) << "byte " << i;
        add_reader(s);
      });
      ASSERT_EQ(next, b < e ? e : b);
      for (std::int64_t i = b; i < e; ++i)
        add_reader(model[static_cast<std::size_t>(i)]);
    }
  }
  std::int64_t next = 0;
  map.visit(0, kSize, [&](std::int64_t pb, std::int64_t pe, Shadow& s) {
    next = pe;
    for (std::int64_t i = pb; i < pe; ++i)
      ASSERT_EQ(s, model[static_cast<std::size_t>(i)]);
  });
  EXPECT_EQ(next, kSize);
}

TEST(ShadowMap, WritesCoalesce) {
  ShadowMap map(1 << 20);
  Shadow s;
  s.state = ByteState::kWritten;
  for (std::int64_t i = 0; i < 64; ++i)
    map.assign(i * (1 << 14), (i + 1) * (1 << 14), s);
  EXPECT_EQ(map.pieces(), 1u);
}

TEST(ReferenceIr, EmptyCopyAndSignalOnlyRailPutAreLegal) {
  Program p = make_program(2, 64);
  p.counters = 1;
  Op empty;
  empty.payload = program::CopyOp{};
  empty.label = "empty";
  add(p, empty);
  Op signal = sync_op(OpKind::kRailPut, 0, 0, "signal-only put", 1, 0, 1);
  add(p, signal);
  add(p, sync_op(OpKind::kWait, 1, 0, "wait", 1, 0, 1));
  ReferenceExecutor ex(p);
  const RunResult r = ex.run();
  EXPECT_TRUE(r.clean()) << error_list(r);
}

// Streams a and b each write a block and signal one counter; the reader waits for `need`
// additions and reads both blocks. b is slow, so its addition lands second: waiting for 1
// orders the reader after a only.
Program two_signals(std::int64_t need) {
  Program p = make_program(1, 64 << 20, {}, 0, {"a", "b", "reader"});
  p.counters = 1;
  add(p, copy_op(0, 0, "a writes", bytes(arena(0), 0, 64), bytes(arena(0), 1024, 64)));
  add(p, sync_op(OpKind::kSignal, 0, 0, "a signals", 0, 0, 1));
  add(p, copy_op(0, 1, "b writes", bytes(arena(0), 32 << 20, 16 << 20),
                 bytes(arena(0), 2048, 16 << 20)));
  add(p, sync_op(OpKind::kSignal, 0, 1, "b signals", 0, 0, 1));
  add(p, sync_op(OpKind::kWait, 0, 2, "wait", 0, 0, need));
  Op read =
      copy_op(0, 2, "read a", bytes(arena(0), 1024, 64), bytes(arena(0), 4096 + (16 << 20), 64));
  read.as<program::CopyOp>().copies.push_back(
      program::CopyDescriptor{bytes(arena(0), 2048, 64), bytes(arena(0), 8192 + (16 << 20), 64)});
  read.label = "read both";
  add(p, read);
  return p;
}

TEST(ReferenceIr, WaitIsOrderedOnlyAfterTheAdditionsItNeeded) {
  {
    const Program p = two_signals(1);
    ReferenceExecutor ex(p);
    ex.input(arena(0), 0, 64);
    ex.input(arena(0), 32 << 20, 16 << 20);
    const RunResult r = ex.run();
    EXPECT_GE(r.count(ErrorKind::kUnwrittenRead) + r.count(ErrorKind::kUnorderedRead) +
                  r.count(ErrorKind::kUnorderedWrite),
              1)
        << error_list(r);
  }
  {
    const Program p = two_signals(2);
    ReferenceExecutor ex(p);
    ex.input(arena(0), 0, 64);
    ex.input(arena(0), 32 << 20, 16 << 20);
    const RunResult r = ex.run();
    EXPECT_TRUE(r.clean()) << error_list(r);
  }
}

TEST(ReferenceIr, EventWaitBeforeItsRecordOnTheSameStreamDeadlocks) {
  Program p = make_program(1, 64);
  p.events = 1;
  const int wait = add(p, sync_op(OpKind::kEventWait, 0, 0, "wait first", 0, 0, 0, 0));
  const int record = add(p, sync_op(OpKind::kEventRecord, 0, 0, "record after", 0, 0, 0, 0));
  ReferenceExecutor ex(p);
  const RunResult r = ex.run();
  ASSERT_EQ(r.count(ErrorKind::kDeadlock), 1) << error_list(r);
  EXPECT_EQ(r.errors[0].op, wait);
  EXPECT_EQ(r.errors[0].other_op, record);
}

}  // namespace
}  // namespace tide::exec::testing
