// NOTE [host execution]: one rank's ops of a call on the host fabric.
#include "tide/exec/host_executor.hpp"

#include <atomic>
#include <string>
#include <thread>

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

void wait_for(fabric::HostFabric& fabric, std::int64_t* word, std::int64_t threshold, const Op& op,
              const HostCallTag& tag, std::chrono::milliseconds timeout) {
  std::atomic_ref<std::int64_t> value(*word);
  if (value.load(std::memory_order_acquire) >= threshold) return;
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(1);
  for (std::int64_t spins = 0;; ++spins) {
    if (value.load(std::memory_order_acquire) >= threshold) return;
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
                         "': counter " + std::to_string(op.as<program::WaitOp>().counter.id) +
                         " holds " + std::to_string(value.load()) + " < " +
                         std::to_string(threshold) +
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

}  // namespace

void run_host_call(const program::CallTemplate& call, fabric::HostFabric& fabric,
                   const HostSequencePlace& place, std::span<const std::int64_t> counter_base,
                   const HostCallBindings& bindings, const HostCallTag& tag,
                   std::chrono::milliseconds timeout) {
  if (std::string why = fabric.aborted(); !why.empty()) {
    throw CommunicationError("rank " + std::to_string(fabric.rank()) +
                             ": communicator aborted earlier: " + why);
  }
  const int me = fabric.rank();
  fabric.announce({tag.index, tag.tag});
  HostBytes bytes(fabric, place, bindings);
  for (const int index : call.order.order) {
    const Op& op = call.program.ops[static_cast<std::size_t>(index)];
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
      case OpKind::kSum:
        if (op.as<program::SumOp>().alpha != bindings.alpha) {
          Op scaled = op;
          scaled.as<program::SumOp>().alpha = bindings.alpha;
          apply_data(scaled, bytes);
        } else {
          apply_data(op, bytes);
        }
        break;
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
}

}  // namespace tide::exec
