// The host backend's communicator: the shared-memory arena and calls on the calling thread
// (NOTE [host fabric], NOTE [host execution]).
#include <atomic>
#include <cstring>
#include <exception>

#include "backends.hpp"
#include "communicator_base.hpp"
#include "peer_liveness.hpp"
#include "tide/core/error.hpp"
#include "tide/exec/host_executor.hpp"
#include "tide/fabric/host_fabric.hpp"
#include "tide/transport/host_messages.hpp"

namespace tide::runtime::detail {
namespace {

Unsupported no_graphs() {
  return Unsupported(
      "the host backend runs each call on the calling thread: there is no CUDA graph to "
      "capture calls into (use the nccl backend)");
}

class HostCommunicator final : public CommunicatorBase {
 public:
  using CommunicatorBase::CommunicatorBase;

  void all_gather(int group, std::uintptr_t, std::span<const void* const> shards) override {
    Group& g = group_at(group);
    check_all_gather(g, shards);
    commit();
    // NOTE [runtime] 7: calls run on this thread, so a release has already happened.
    (void)take_slot(g);
    exec::HostCallBindings bindings;
    if (g.ag.options().shard_in_stage()) {
      for (const void* s : shards)
        bindings.tensors.push_back(static_cast<std::byte*>(const_cast<void*>(s)));
    } else {
      for (std::size_t p = 0; p < shards.size(); ++p) {  // copy-in: a local copy of S bytes
        const ParamLayout& pl = g.layout.param(static_cast<int>(p));
        std::memcpy(g.info.resident + pl.offset, shards[p],
                    static_cast<std::size_t>(pl.shard_bytes));
      }
    }
    run(g, g.all_gathers, bindings, 0, "all_gather");
    count_all_gather(g, !shards.empty());
  }

  void reduce_scatter(int group, std::uintptr_t, std::span<const void* const> grads, float* out,
                      float alpha, bool accumulate) override {
    Group& g = group_at(group);
    check_reduce_scatter(g, grads, out);
    commit();
    exec::HostCallBindings bindings;
    for (const void* p : gradients_of(g, grads))
      bindings.tensors.push_back(static_cast<std::byte*>(const_cast<void*>(p)));
    bindings.output = reinterpret_cast<std::byte*>(out);
    bindings.alpha = alpha;
    bindings.accumulate = accumulate;
    run(g, g.reduce_scatters, bindings, 1, "reduce_scatter");
    release_staged(g, 0);  // its reads are done: the call completed on this thread
    count_reduce_scatter(g);
  }

  std::int64_t arena_bytes() const override { return fabric_ ? fabric_->arena_bytes() : 0; }

  // NOTE [arena lending]: calls complete on this thread, so the fence is both lanes' handoffs,
  // now: a barrier of every rank, under the calls' timeout and liveness checks.
  void fence(std::uintptr_t) override {
    if (!committed())
      throw InvalidArgument("fence: the arena does not exist yet (make a call first)");
    guarded([&] {
      for (int collective = 0; collective < 2; ++collective) {
        run_sequence(handoffs_[collective], {}, handoff_tag(collective),
                     std::string("the fence (every rank finishing its earlier ") +
                         (collective == 0 ? "all-gathers" : "reduce-scatters") + ")");
      }
    });
  }

  // Host calls raise on the calling thread; between calls (the adapter checks once per step) a
  // peer's abort is seen here rather than at the next call. A dead peer is not: a peer that
  // finished its job may exit without closing its fabric, and the next call names a real one.
  void check() const override {
    if (!fabric_) return;
    const std::string reason = fabric_->aborted();
    if (!reason.empty()) {
      throw CommunicationError("rank " + std::to_string(options_.rank) +
                               ": communicator aborted: " + reason);
    }
  }

  std::int64_t arena_request() override { return 0; }  // shared memory, not a device's
  void provide_arena(std::uintptr_t, std::int64_t) override {
    throw InvalidArgument(
        "provide_arena: the host backend's arena is POSIX shared memory it creates itself");
  }

  GraphCalls take_graph_calls() override { throw no_graphs(); }
  void prepare_graph_launch(const GraphCalls&) override { throw no_graphs(); }

  void abort(const std::string& reason) override {
    commit();
    fabric_->abort("rank " + std::to_string(options_.rank) + " aborted: " + reason);
    if (liveness_)
      liveness_->mark_failed("rank " + std::to_string(options_.rank) + " aborted: " + reason);
  }

 protected:
  RankCapabilities capabilities() const override { return {}; }  // needs no device

  void copy_into_slot(int, bool, std::uintptr_t,
                      std::span<const std::pair<const void*, void*>> copies,
                      std::span<const std::int64_t> bytes) override {
    for (std::size_t i = 0; i < copies.size(); ++i)
      std::memcpy(copies[i].second, copies[i].first, static_cast<std::size_t>(bytes[i]));
  }
  bool host_transport() const override { return true; }
  // NOTE [runtime] 9: shared memory carries the messages between emulated hosts only.
  std::string no_rail_messages(int hosts) const override {
    if (options_.emulation.nodes_as_hosts) return {};
    return "the ranks are on " + std::to_string(hosts) +
           " hosts, and the host backend's shared memory serves the processes of one host";
  }

  void commit() override {
    if (committed()) return;
    fabric::HostFabricOptions o;
    o.rank = options_.rank;
    o.world = options_.world;
    lay_out();
    o.arena_bytes = arena_bytes_;
    o.counters = signal_words_;
    o.key_prefix = options_.key_prefix;
    o.timeout = options_.timeout;
    o.hosts = hosts();
    fabric_ = std::make_unique<fabric::HostFabric>(store(), o);
    messages_ = std::make_unique<transport::HostMessages>(*fabric_);
    start_liveness();
    for (auto& g : groups_) {
      std::byte* arena = fabric_->arena(options_.rank);
      g->info.landing = arena + g->ag_areas.landing;
      g->info.resident = g->ag.options().shard_in_stage() ? nullptr : arena + g->ag_areas.resident;
    }
    mark_committed();
  }

 private:
  // NOTE [peer liveness]: only where some peer is on another host (whose pid the fabric does
  // not read, NOTE [host fabric] 5). Its verdict aborts the fabric while a call waits, so that
  // the wait raises naming the peer; between calls the next call raises it.
  void start_liveness() {
    if (hosts().empty() || hosts().back() == 0) return;
    liveness_ = std::make_unique<PeerLiveness>(
        shared_store(), liveness_options(), [this](const DeadPeer& d) {
          if (in_call_.load())
            fabric_->abort("rank " + std::to_string(options_.rank) + ": " + d.what);
        });
  }

  // NOTE [lane handoff]: the collective's handoff, then the call. A call that fails says so
  // to the peers on other hosts (NOTE [peer liveness] 6).
  void run(Group& g, SequenceState& s, const exec::HostCallBindings& bindings, int collective,
           const char* name) {
    guarded([&] { run_call(g, s, bindings, collective, name); });
  }

  template <typename F>
  void guarded(F&& body) {
    in_call_.store(true);
    try {
      if (const std::optional<DeadPeer> d =
              liveness_ ? liveness_->remote_verdict() : std::nullopt) {
        const std::string reason = "rank " + std::to_string(options_.rank) + ": " + d->what;
        fabric_->abort(reason);
        throw CommunicationError(reason);
      }
      body();
    } catch (const std::exception& e) {
      in_call_.store(false);
      if (liveness_) liveness_->mark_failed(e.what());
      throw;
    }
    in_call_.store(false);
  }

  void run_call(Group& g, SequenceState& s, const exec::HostCallBindings& bindings, int collective,
                const char* name) {
    const std::string what = std::string(name) + " of group '" + g.spec.name + "'";
    run_sequence(handoffs_[collective], {}, handoff_tag(collective),
                 "the handoff before " + what + " (every rank finishing the previous " +
                     std::string(name) + ")");
    const exec::HostCallTraffic sent = run_sequence(s, bindings, call_tag(g, collective), what);
    g.stats.rail_messages += sent.messages;
    g.stats.rail_message_bytes += sent.bytes;
  }

  exec::HostCallTraffic run_sequence(SequenceState& s, const exec::HostCallBindings& bindings,
                                     std::int64_t tag, std::string what) {
    exec::HostSequencePlace place;
    place.region_offset = 0;
    place.first_counter = s.first_counter;
    place.messages = messages_.get();
    exec::HostCallTag t;
    t.index = next_call_index();
    t.tag = tag;
    t.what = std::move(what);
    const exec::HostCallTraffic sent = exec::run_host_call(
        s.next(), *fabric_, place, s.counter_base, bindings, t, options_.timeout);
    s.advance(options_.rank);
    return sent;
  }

  std::unique_ptr<fabric::HostFabric> fabric_;
  std::unique_ptr<transport::HostMessages> messages_;  // on fabric_
  std::atomic<bool> in_call_{false};                   // read by the liveness thread's on_dead
  std::unique_ptr<PeerLiveness> liveness_;             // after fabric_: stopped before it goes
};

}  // namespace

std::unique_ptr<Communicator> make_host_communicator(const CommunicatorOptions& options) {
  return std::make_unique<HostCommunicator>(options);
}

}  // namespace tide::runtime::detail
