// NOTE [host execution]: one rank's ops of a call on the host fabric.
#include "tide/exec/host_executor.hpp"

#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tide/core/error.hpp"
#include "tide/exec/data_effects.hpp"

namespace tide::exec {
namespace {

using program::Buffer;
using program::Op;
using program::OpKind;
using program::Space;

class HostBytes final : public ByteSpace {
 public:
  HostBytes(fabric::HostFabric& fabric, const HostSequencePlace& place,
            const HostCallBindings& bindings)
      : fabric_(fabric), place_(place), bindings_(bindings) {}

  std::byte* at(const Buffer& buffer, std::int64_t offset) override {
    if (buffer.space == Space::kArena) {
      return fabric_.arena(buffer.rank) + place_.region_offset + offset;
    }
    if (buffer.rank != fabric_.rank()) {
      throw InternalError("host executor: rank " + std::to_string(fabric_.rank()) +
                          " touched rank " + std::to_string(buffer.rank) +
                          "'s tensors, which only that rank binds");
    }
    if (buffer.space == Space::kOutput) return bindings_.output + offset;
    return bindings_.tensors.at(static_cast<std::size_t>(buffer.index)) + offset;
  }

 private:
  fabric::HostFabric& fabric_;
  const HostSequencePlace& place_;
  const HostCallBindings& bindings_;
};

[[noreturn]] void fail(fabric::HostFabric& fabric, const std::string& reason) {
  fabric.abort(reason);
  throw CommunicationError(reason);
}

// A peer that announced this call's index with another tag issued its calls in another order.
void check_call_order(fabric::HostFabric& fabric, const HostCallTag& tag) {
  for (int r = 0; r < fabric.world(); ++r) {
    if (r == fabric.rank()) continue;
    const fabric::HostFabric::CallAnnouncement peer = fabric.announced(r);
    if (peer.index == tag.index && peer.tag != tag.tag) {
      fail(fabric, "call-order mismatch: rank " + std::to_string(r) + " and rank " +
                       std::to_string(fabric.rank()) + " issued different collectives as call " +
                       std::to_string(tag.index) + " (rank " + std::to_string(fabric.rank()) +
                       ": " + tag.what +
                       "); every rank must issue the same calls in the same order");
    }
  }
}

// Returns once done() holds; throws CommunicationError (after aborting the fabric) on a
// peer's abort, a call-order mismatch, a dead peer or the timeout. `stalled()` says what the
// wait waited for, for the timeout's message.
template <class Done, class Stalled>
void wait_until(fabric::HostFabric& fabric, Done&& done, Stalled&& stalled, const Op& op,
                const HostCallTag& tag, std::chrono::milliseconds timeout) {
  if (done()) return;
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(1);
  for (std::int64_t spins = 0;; ++spins) {
    if (done()) return;
    if (spins < 256) continue;
    if (spins % 64 == 0) {
      if (std::string why = fabric.aborted(); !why.empty()) {
        throw CommunicationError("rank " + std::to_string(fabric.rank()) +
                                 ": communicator aborted: " + why);
      }
      check_call_order(fabric, tag);
      if (const int dead = fabric.dead_peer(); dead >= 0) {
        fail(fabric, "rank " + std::to_string(dead) + " died; rank " +
                         std::to_string(fabric.rank()) + " was waiting in '" + op.label + "'");
      }
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > timeout) {
        fail(fabric, "rank " + std::to_string(fabric.rank()) + " timed out in " + tag.what +
                         " after " + std::to_string(timeout.count()) + " ms in '" + op.label +
                         "': " + stalled() +
                         " (a peer stalled or issued its calls in another order)");
      }
    }
    if (spins < 4096) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(200));
    }
  }
}

void wait_for(fabric::HostFabric& fabric, std::int64_t* word, std::int64_t threshold, const Op& op,
              const HostCallTag& tag, std::chrono::milliseconds timeout) {
  std::atomic_ref<std::int64_t> value(*word);
  wait_until(
      fabric, [&] { return value.load(std::memory_order_acquire) >= threshold; },
      [&] {
        return "counter " + std::to_string(op.as<program::WaitOp>().counter.id) + " holds " +
               std::to_string(value.load()) + " < " + std::to_string(threshold);
      },
      op, tag, timeout);
}

// NOTE [host execution] 5: whether `op` travels as a rail message (a put or a signal to a rank
// of another host), and its addition.
std::optional<program::CounterUse> message_of(const Op& op, const fabric::HostFabric& fabric) {
  std::optional<program::CounterUse> add = program::addition_of(op);
  if (!add || add->counter.rank == op.rank || fabric.load_store(op.rank, add->counter.rank)) {
    return std::nullopt;
  }
  return add;
}

// The message's tag: the call and the op's place in it, the same on both ranks (the op's id
// among the template's built ops: each process keeps other ops, NOTE [kept ranks]).
std::int64_t message_tag(const program::CallTemplate& call, int op_index, const HostCallTag& tag) {
  return tag.index * static_cast<std::int64_t>(call.op_id_count()) +
         call.op_id(static_cast<std::size_t>(op_index));
}

// The bytes of a put's descriptors, in order, on the side that owns `region_of`'s regions.
template <class RegionOf>
std::int64_t message_bytes(const Op& op, RegionOf&& region_of) {
  std::int64_t total = 0;
  for (const program::CopyDescriptor& c : program::copies_of(op))
    total += region_of(c).bytes();
  return total;
}

// The place's transport (NOTE [host execution] 5).
transport::HostMessages& messages_of(const HostSequencePlace& place) {
  if (place.messages == nullptr) {
    throw Unsupported(
        "host executor: a rail message and no transport (HostSequencePlace::messages)");
  }
  return *place.messages;
}

// Returns the bytes sent.
std::int64_t send_message(const program::CallTemplate& call, const Op& op, int op_index,
                          const program::CounterUse& add, HostBytes& bytes,
                          fabric::HostFabric& fabric, transport::HostMessages& messages,
                          const HostCallTag& tag, std::chrono::milliseconds timeout) {
  std::vector<std::byte> packed;
  packed.reserve(static_cast<std::size_t>(
      message_bytes(op, [](const program::CopyDescriptor& c) { return c.src; })));
  for (const program::CopyDescriptor& c : program::copies_of(op)) {
    if (c.dst.buffer.rank != add.counter.rank) {
      throw Unsupported("a put whose destination (rank " + std::to_string(c.dst.buffer.rank) +
                        ") is not its counter's rank (" + std::to_string(add.counter.rank) +
                        ") cannot travel as a rail message");
    }
    for_each_run(c.src, [&](std::int64_t offset, std::int64_t n) {
      const std::byte* from = bytes.at(c.src.buffer, offset);
      packed.insert(packed.end(), from, from + n);
    });
  }
  messages.send(add.counter.rank, packed, message_tag(call, op_index, tag),
                [&](const std::function<bool()>& done, const std::string& what) {
                  wait_until(
                      fabric, done, [&] { return "waiting for " + what; }, op, tag, timeout);
                });
  return static_cast<std::int64_t>(packed.size());
}

void receive_message(const program::CallTemplate& call, const Op& op, int op_index,
                     const program::CounterUse& add, HostBytes& bytes, fabric::HostFabric& fabric,
                     const HostSequencePlace& place, const HostCallTag& tag,
                     std::chrono::milliseconds timeout) {
  std::vector<std::byte> packed(static_cast<std::size_t>(
      message_bytes(op, [](const program::CopyDescriptor& c) { return c.dst; })));
  try {
    messages_of(place).recv(op.rank, packed, message_tag(call, op_index, tag),
                            [&](const std::function<bool()>& done, const std::string& what) {
                              wait_until(
                                  fabric, done, [&] { return "waiting for " + what; }, op, tag,
                                  timeout);
                            });
  } catch (const InternalError&) {
    // A message of another order: where the sender announced this call as another
    // collective, that is the cause to name (a message can arrive before any wait looks).
    check_call_order(fabric, tag);
    throw;
  }
  std::size_t at = 0;
  for (const program::CopyDescriptor& c : program::copies_of(op)) {
    for_each_run(c.dst, [&](std::int64_t offset, std::int64_t n) {
      std::memcpy(bytes.at(c.dst.buffer, offset), packed.data() + at, static_cast<std::size_t>(n));
      at += static_cast<std::size_t>(n);
    });
  }
  std::atomic_ref<std::int64_t>(
      *fabric.counter(fabric.rank(), place.first_counter + add.counter.id))
      .fetch_add(add.value, std::memory_order_acq_rel);
}

}  // namespace

HostCallTraffic run_host_call(const program::CallTemplate& call, fabric::HostFabric& fabric,
                              const HostSequencePlace& place,
                              std::span<const std::int64_t> counter_base,
                              const HostCallBindings& bindings, const HostCallTag& tag,
                              std::chrono::milliseconds timeout) {
  if (std::string why = fabric.aborted(); !why.empty()) {
    throw CommunicationError("rank " + std::to_string(fabric.rank()) +
                             ": communicator aborted earlier: " + why);
  }
  const int me = fabric.rank();
  fabric.announce({tag.index, tag.tag});
  HostBytes bytes(fabric, place, bindings);
  HostCallTraffic traffic;
  for (const int index : call.order.order) {
    const Op& op = call.program.ops[static_cast<std::size_t>(index)];
    const std::optional<program::CounterUse> message = message_of(op, fabric);
    if (message) {  // NOTE [host execution] 5: both ends, at the op's place in the order
      if (op.rank == me) {
        traffic.bytes += send_message(call, op, index, *message, bytes, fabric, messages_of(place),
                                      tag, timeout);
        ++traffic.messages;
      } else if (message->counter.rank == me) {
        receive_message(call, op, index, *message, bytes, fabric, place, tag, timeout);
      }
      continue;
    }
    if (op.rank != me) continue;
    switch (op.kind()) {
      case OpKind::kWait: {
        const auto& wait = op.as<program::WaitOp>();
        wait_for(fabric, fabric.counter(me, place.first_counter + wait.counter.id),
                 counter_base[static_cast<std::size_t>(wait.counter.id)] + wait.value, op, tag,
                 timeout);
        break;
      }
      case OpKind::kSignal: {
        const auto& signal = op.as<program::SignalOp>();
        std::atomic_ref<std::int64_t>(
            *fabric.counter(signal.counter.rank, place.first_counter + signal.counter.id))
            .fetch_add(signal.value, std::memory_order_acq_rel);
        break;
      }
      case OpKind::kRailPut: {
        const auto& put = op.as<program::RailPutOp>();
        apply_data(op, bytes);
        std::atomic_ref<std::int64_t>(
            *fabric.counter(put.counter.rank, place.first_counter + put.counter.id))
            .fetch_add(put.value, std::memory_order_acq_rel);
        break;
      }
      case OpKind::kSum: {
        // A sum into the output (NOTE [one-node TIDE-RS]) takes the call's accumulate too.
        const auto& sum = op.as<program::SumOp>();
        const bool into_output = sum.dst.buffer.space == program::Space::kOutput;
        if (sum.alpha != bindings.alpha || (into_output && sum.accumulate != bindings.accumulate)) {
          Op scaled = op;
          scaled.as<program::SumOp>().alpha = bindings.alpha;
          if (into_output) scaled.as<program::SumOp>().accumulate = bindings.accumulate;
          apply_data(scaled, bytes);
        } else {
          apply_data(op, bytes);
        }
        break;
      }
      case OpKind::kLand:
        if (op.as<program::LandOp>().accumulate != bindings.accumulate) {
          Op folded = op;
          folded.as<program::LandOp>().accumulate = bindings.accumulate;
          apply_data(folded, bytes);
        } else {
          apply_data(op, bytes);
        }
        break;
      case OpKind::kCopy:
      case OpKind::kCast:
      case OpKind::kZero:
        apply_data(op, bytes);
        break;
      case OpKind::kRelease:
      case OpKind::kEventRecord:
      case OpKind::kEventWait:
        break;
    }
  }
  return traffic;
}

}  // namespace tide::exec
