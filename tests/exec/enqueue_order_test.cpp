// NOTE [enqueue order] (src/exec/cuda/enqueue_order.hpp) on the host: a legal order passes
// unchanged, an event wait placed before its record (unplaced ops in program order) is
// deferred with the later ops of its stream, and an event-wait cycle or a deferred message is
// refused naming the op. No GPU needed.
#include "enqueue_order.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tide/core/error.hpp"

namespace tide::exec::cuda_detail {
namespace {

using program::Op;
using program::Program;

// An op of rank 0 on `stream` carrying `payload`.
template <class Payload>
Op on(int stream, Payload payload, const char* label) {
  Op op;
  op.stream = stream;
  op.label = label;
  op.payload = payload;
  return op;
}

// An event record or wait (EventRecordOp, EventWaitOp) of `event`.
template <class EventOp>
Op event_op(int stream, int event, const char* label) {
  EventOp e;
  e.event = event;
  return on(stream, e, label);
}

Op record(int stream, int event, const char* label) {
  return event_op<program::EventRecordOp>(stream, event, label);
}

Op wait_event(int stream, int event, const char* label) {
  return event_op<program::EventWaitOp>(stream, event, label);
}

Op copy(int stream, const char* label) {
  return on(stream, program::CopyOp{}, label);
}

// One rank, streams a and b, one event.
Program two_streams() {
  Program p;
  p.ranks = 1;
  p.stream("a");
  p.stream("b");
  p.events = 1;
  p.buffers.resize(1);
  return p;
}

const auto no_messages = [](const Op&) { return false; };

TEST(EnqueueOrder, LegalOrderUnchanged) {
  Program p = two_streams();
  p.ops = {record(0, 0, "rec"), wait_event(1, 0, "wait"), copy(1, "after")};
  const std::vector<int> order = {0, 1, 2};
  const EnqueueOrder o = enqueue_order(p, order, {}, no_messages);
  EXPECT_EQ(o.ops, order);
  EXPECT_EQ(o.deferred, 0);
}

TEST(EnqueueOrder, WaitBeforeItsRecordIsDeferredWithItsStream) {
  Program p = two_streams();
  p.ops = {wait_event(1, 0, "wait"), copy(1, "behind the wait"), copy(0, "other stream"),
           record(0, 0, "rec")};
  const std::vector<int> order = {0, 1, 2, 3};
  const EnqueueOrder o = enqueue_order(p, order, {}, no_messages);
  EXPECT_EQ(o.ops, (std::vector<int>{2, 3, 0, 1}));
  EXPECT_EQ(o.deferred, 2);
}

TEST(EnqueueOrder, AWaitOnAnEarlierCallIsNotDeferred) {
  Program p = two_streams();
  p.ops = {wait_event(1, 0, "wait of age 1"), record(0, 0, "rec")};
  const std::vector<int> order = {0, 1};
  const std::vector<int> age = {1, 0};
  const EnqueueOrder o = enqueue_order(p, order, age, no_messages);
  EXPECT_EQ(o.ops, order);
  EXPECT_EQ(o.deferred, 0);
}

TEST(EnqueueOrder, EventWaitCycleIsRefusedNamingTheWait) {
  Program p = two_streams();
  p.events = 2;
  // a: wait 1, record 0; b: wait 0, record 1.
  p.ops = {wait_event(0, 1, "a waits for b"), record(0, 0, "a records"),
           wait_event(1, 0, "b waits for a"), record(1, 1, "b records")};
  const std::vector<int> order = {0, 1, 2, 3};
  try {
    (void)enqueue_order(p, order, {}, no_messages);
    ADD_FAILURE() << "a cycle was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("event-wait cycle"), std::string::npos) << e.what();
  }
}

TEST(EnqueueOrder, MessageBehindADeferredWaitIsRefused) {
  Program p = two_streams();
  p.ops = {wait_event(1, 0, "wait"), copy(1, "a message"), record(0, 0, "rec")};
  const std::vector<int> order = {0, 1, 2};
  const auto message = [&](const Op& op) { return op.label == "a message"; };
  try {
    (void)enqueue_order(p, order, {}, message);
    ADD_FAILURE() << "a deferred message was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("a message"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tide::exec::cuda_detail
