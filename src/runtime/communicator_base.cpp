// NOTE [runtime] 1-4, 7-9: registration, the hosts, the arena, the landing slots and call checks,
// for every backend.
#include "communicator_base.hpp"

#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "tide/core/env.hpp"
#include "tide/core/error.hpp"
#include "tide/core/process.hpp"
#include "tide/core/rs_defaults.hpp"

namespace tide::runtime::detail {
namespace {

// The group's reduce-scatter options: the communicator's, the spec's mode and geometry, and
// the sizing solver's rounds in flight for this group's shard (rs_defaults.hpp; 1 at M = 1).
// A layout that cannot be formed keeps the communicator's d: make_group reports it.
RsOptions group_rs_options(const GroupSpec& spec, const Topology& topology, RsOptions o) {
  o.mode = spec.mode;
  o.sub_slices = spec.sub_slices;
  try {
    return with_default_rounds_in_flight(
        o, GroupLayout(topology, spec.params, spec.ag_dtype, spec.grad_dtype));
  } catch (const InvalidArgument&) {
    return o;
  }
}

}  // namespace

CommunicatorBase::CommunicatorBase(const CommunicatorOptions& options)
    : options_(options),
      topology_(options.world / options.gpus_per_node, options.gpus_per_node),
      store_(options.store) {
  options_.store.reset();  // store_ holds it until the arena exists
  std::string id = host_name();
  if (options_.emulation.nodes_as_hosts) {
    id = options_.emulation.host.empty()
             ? id + "#node" + std::to_string(options_.rank / options_.gpus_per_node)
             : options_.emulation.host;
  }
  host_id_ = std::hash<std::string>{}(id);
}

void CommunicatorBase::discover_hosts() {
  const std::vector<std::string> ids =
      all_gather_values(store(), options_.key_prefix + "/hosts", options_.rank, options_.world,
                        std::to_string(host_id_), options_.timeout);
  HostTopology t = topology_of_hosts(ids, options_.gpus_per_node);
  hosts_ = std::move(t.hosts);
  if (!t.topology) {
    hosts_refusal_ = t.refusal;
    return;
  }
  topology_ = *t.topology;
  if (const int hosts = hosts_.back() + 1; hosts > 1) hosts_refusal_ = no_rail_messages(hosts);
}

Registration CommunicatorBase::register_group(const GroupSpec& spec) {
  const int index = registrations_++;
  if (index == 0 && !committed_) {
    try {
      discover_hosts();
    } catch (const CommunicationError& e) {  // the bootstrap failed: raised, as a registration's
      hosts_refusal_ = std::string("the ranks' hosts could not be gathered: ") + e.what();
      throw;  // later registrations are refused with it
    }
  }
  if (!hosts_refusal_.empty()) return Registration{-1, hosts_refusal_};
  if (committed_) {  // every rank makes the same calls: all refuse it, without the store
    return Registration{-1,
                        "registered after the communicator's first call; register every "
                        "group before the first all-gather or reduce-scatter"};
  }
  const std::string key = options_.key_prefix + "/group/" + std::to_string(index);
  RankDescription d;
  d.rank = options_.rank;
  d.world = options_.world;
  d.host_id = host_id_;
  GroupSignature& g = d.group;
  g.name = spec.name;
  g.nodes = topology_.nodes();
  g.gpus_per_node = topology_.gpus_per_node();
  g.virtual_nodes = hosts_.empty() || hosts_.back() == 0;  // NOTE [runtime] 9
  g.params = spec.params;
  g.ag_dtype = spec.ag_dtype;
  g.grad_dtype = spec.grad_dtype;
  RsOptions base = rs_options_;
  // NOTE [one-node TIDE-RS]: at M = 1 the runtime runs the one-node layout on every backend
  // (TIDE_ONE_NODE=0 keeps the multi-node layout, for comparison), in both modes with the peers
  // pushing from wherever the adapter left the gradients (Slot-Reuse: in the vacated slot).
  base.one_node = one_node_layout();
  base.one_node_pull = false;
  const RsOptions rs = group_rs_options(spec, topology_, base);
  g.rs = rs;
  g.ag.mixed_precision_cast = spec.cast;
  g.ag.staged_shards = spec.staged_shards && !spec.cast;
  g.landing_slot = spec.landing_slot;
  g.host_transport = host_transport();
  g.ipc_transport = options_.backend == BackendKind::kIpc;
  d.caps = capabilities();
  Decision decision;
  try {
    const std::vector<std::string> blobs = all_gather_values(
        store(), key, options_.rank, options_.world, serialize(d), options_.timeout);
    decision = agree_serialized(blobs);
  } catch (const InconsistentGroup& e) {
    return Registration{-1, e.what()};
  } catch (const InvalidArgument& e) {
    return Registration{-1, std::string("the group cannot be described: ") + e.what()};
  }
  if (decision.backend != Backend::kTide) return Registration{-1, decision.reason};
  if (spec.landing_slot < -1) {
    return Registration{-1, "landing slot " + std::to_string(spec.landing_slot) +
                                " is not a slot id (>= 0, or -1 for a slot of its own)"};
  }
  if (rs.one_node && topology_.nodes() == 1) {
    // Where TIDE would lose (rs_defaults.hpp contract 10), the group keeps stock's
    // collectives, with the reason: a pure function of the group, the same on every rank.
    try {
      const OneNodeForecast f = one_node_rs_forecast(
          RsPlan(GroupLayout(topology_, spec.params, spec.ag_dtype, spec.grad_dtype), rs));
      if (!f.tide_wins()) return Registration{-1, f.reason()};
    } catch (const InvalidArgument&) {  // make_group below reports what cannot be formed
    }
  }
  try {
    groups_.push_back(
        make_group(static_cast<int>(groups_.size()), spec, topology_, rs, ep_lane_offer()));
  } catch (const Unsupported& e) {
    release_free_heap();
    return Registration{-1, e.what()};
  } catch (const InvalidArgument& e) {
    release_free_heap();
    return Registration{-1, e.what()};
  }
  release_free_heap();  // NOTE [registration scratch]: the check build's pages
  return Registration{static_cast<int>(groups_.size()) - 1, {}};
}

void CommunicatorBase::assign_landing_slots(std::span<const int> slots) {
  if (committed() || laid_out()) {
    throw InvalidArgument(
        "assign_landing_slots: the arena exists already (the first call or "
        "info() created it); assign the slots before");
  }
  if (slots.size() != groups_.size()) {
    throw InvalidArgument("assign_landing_slots: " + std::to_string(slots.size()) + " slots for " +
                          std::to_string(groups_.size()) + " groups");
  }
  for (std::size_t g = 0; g < slots.size(); ++g) {
    if (slots[g] < -1) {
      throw InvalidArgument("assign_landing_slots: slot " + std::to_string(slots[g]) +
                            " of group '" + groups_[g]->spec.name +
                            "' is not a slot id (>= 0, or -1 for a slot of its own)");
    }
    groups_[g]->spec.landing_slot = slots[g];
    groups_[g]->info.landing_slot_id = slots[g];
  }
}

// NOTE [runtime] 11: a group of M >= 2 ranks, each on a host of its own (real or emulated).
EpLaneOffer CommunicatorBase::ep_lane_offer() const {
  EpLaneOffer o;
  o.ranks_one_per_host = options_.world >= 2 && topology_.gpus_per_node() == 1 && !hosts_.empty() &&
                         hosts_.back() + 1 == options_.world;
  if (o.ranks_one_per_host) o.backend_refusal = ep_lane_refusal();
  return o;
}

PeerLivenessOptions CommunicatorBase::liveness_options() const {
  PeerLivenessOptions o;
  o.rank = options_.rank;
  o.world = options_.world;
  o.hosts = hosts();
  o.key_prefix = options_.key_prefix;
  o.timeout = liveness_timeout(options_.timeout);
  return o;
}

void CommunicatorBase::lay_out() {
  if (laid_out_) return;
  // Every rank must lay out the same arena: their slot ids are agreed here.
  std::string mine;
  for (const auto& g : groups_)
    mine += std::to_string(g->spec.landing_slot) + ",";
  const std::vector<std::string> all =
      all_gather_values(store(), options_.key_prefix + "/landing_slots", options_.rank,
                        options_.world, mine, options_.timeout);
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r] != mine) {
      throw InvalidArgument("the ranks assigned different landing slots: rank " +
                            std::to_string(options_.rank) + " has [" + mine + "], rank " +
                            std::to_string(r) + " has [" + all[r] + "]");
    }
  }
  layout_ = arena_of(groups_);
  arena_bytes_ = layout_.arena_bytes;
  signal_words_ = kRuntimeWords + place_groups(groups_, layout_, kRuntimeWords, options_.rank);
  handoffs_[0] = handoff_state(options_.world, program::kAllGatherHandoffWord, options_.rank);
  handoffs_[1] = handoff_state(options_.world, program::kReduceScatterHandoffWord, options_.rank);
  release_free_heap();  // NOTE [registration scratch]: every rank's sequences, built and cut
  occupant_.assign(layout_.slots.size(), -1);
  released_.assign(layout_.slots.size(), false);
  laid_out_ = true;
}

bool CommunicatorBase::take_slot(const Group& g) {
  const auto slot = static_cast<std::size_t>(g.slot);
  const int holder = occupant_[slot];
  if (holder == g.index && g.gradients_staged) {
    throw InvalidArgument("all_gather of group '" + g.spec.name +
                          "': its slot holds its staged gradients; reduce-scatter them first");
  }
  if (holder >= 0 && holder != g.index) {
    throw InvalidArgument(
        "all_gather of group '" + g.spec.name + "': its landing slot " + std::to_string(g.slot) +
        " still holds the parameters of group '" +
        groups_[static_cast<std::size_t>(holder)]->spec.name +
        "' (not released since its all-gather); release that group first, or give the groups "
        "different slots (NOTE [runtime] 7)");
  }
  occupant_[slot] = g.index;
  return released_[slot];
}

void CommunicatorBase::release(int group, std::uintptr_t stream) {
  Group& g = group_at(group);
  commit();
  const auto slot = static_cast<std::size_t>(g.slot);
  if (occupant_[slot] != g.index) {
    throw InvalidArgument("release of group '" + g.spec.name +
                          "': it holds no landing slot (no all-gather since its last release)");
  }
  if (g.gradients_staged) {
    throw InvalidArgument("release of group '" + g.spec.name +
                          "': its slot holds staged gradients; the reduce-scatter releases it");
  }
  record_release(g.slot, stream);
  occupant_[slot] = -1;
  released_[slot] = true;
}

void CommunicatorBase::stage_gradients(int group, std::uintptr_t stream,
                                       std::span<const void* const> grads) {
  Group& g = group_at(group);
  commit();
  const std::size_t params = static_cast<std::size_t>(g.layout.param_count());
  if (grads.size() != params) {
    throw InvalidArgument("stage_gradients of group '" + g.spec.name +
                          "': " + std::to_string(grads.size()) + " gradient pointers for " +
                          std::to_string(params) + " parameters");
  }
  if (g.spec.grad_dtype != g.spec.ag_dtype) {
    throw InvalidArgument("stage_gradients of group '" + g.spec.name +
                          "': gradients in another dtype than the all-gather's do not have the "
                          "slot's geometry; read them in place");
  }
  if (g.gradients_staged) {
    throw InvalidArgument("stage_gradients of group '" + g.spec.name +
                          "': its slot already holds gradients no reduce-scatter has read");
  }
  const bool wait = take_slot(g);  // throws where another group holds it
  std::vector<std::pair<const void*, void*>> copies;
  std::vector<std::int64_t> bytes;
  for (std::size_t p = 0; p < params; ++p) {
    const ParamLayout& pl = g.layout.param(static_cast<int>(p));
    copies.push_back({grads[p], g.info.landing + g.layout.landing_offset(static_cast<int>(p), 0)});
    bytes.push_back(pl.rows * pl.cols * item_bytes(g.spec.grad_dtype));
  }
  copy_into_slot(g.slot, wait, stream, copies, bytes);
  g.gradients_staged = true;
  for (std::int64_t b : bytes) {
    g.stats.copy_bytes_made += b;
    g.stats.gradient_bytes_staged += b;
  }
}

std::vector<const void*> CommunicatorBase::gradients_of(Group& g,
                                                        std::span<const void* const> grads) const {
  if (!grads.empty()) {
    if (g.gradients_staged) {
      throw InvalidArgument("reduce_scatter of group '" + g.spec.name +
                            "': its gradients are staged in its slot; pass no gradient pointers");
    }
    return {grads.begin(), grads.end()};
  }
  if (!g.gradients_staged) {
    throw InvalidArgument("reduce_scatter of group '" + g.spec.name +
                          "': no gradient pointers and none staged (stage_gradients)");
  }
  std::vector<const void*> out;
  for (int p = 0; p < g.layout.param_count(); ++p)
    out.push_back(g.info.landing + g.layout.landing_offset(p, 0));
  return out;
}

void CommunicatorBase::release_staged(Group& g, std::uintptr_t stream) {
  if (!g.gradients_staged) return;
  g.gradients_staged = false;
  record_release(g.slot, stream);
  occupant_[static_cast<std::size_t>(g.slot)] = -1;
  released_[static_cast<std::size_t>(g.slot)] = true;
}

bool CommunicatorBase::holds_slot(int group) const {
  const Group& g = group_at(group);
  return committed() && occupant_[static_cast<std::size_t>(g.slot)] == g.index;
}

ArenaInfo CommunicatorBase::arena() {
  commit();
  ArenaInfo a = describe_arena(layout_);
  a.provided = provided_memory_ != 0;
  return a;
}

const GroupInfo& CommunicatorBase::info(int group) {
  Group& g = group_at(group);
  commit();
  return g.info;
}

std::size_t CommunicatorBase::group_slot(int group) const {
  if (group < 0 || group >= static_cast<int>(groups_.size())) {
    throw InvalidArgument("group id " + std::to_string(group) + " was not registered (" +
                          std::to_string(groups_.size()) + " groups)");
  }
  return static_cast<std::size_t>(group);
}

Group& CommunicatorBase::group_at(int group) {
  return *groups_[group_slot(group)];
}

const Group& CommunicatorBase::group_at(int group) const {
  return *groups_[group_slot(group)];
}

namespace {

// The first parameter with bytes whose pointer is null, or -1.
int null_pointer(const GroupLayout& layout, std::span<const void* const> pointers) {
  for (std::size_t p = 0; p < pointers.size(); ++p) {
    if (pointers[p] == nullptr && layout.param(static_cast<int>(p)).shard_bytes > 0)
      return static_cast<int>(p);
  }
  return -1;
}

}  // namespace

void CommunicatorBase::check_all_gather(const Group& g,
                                        std::span<const void* const> shard_pointers) const {
  const std::size_t shards = shard_pointers.size();
  const std::size_t params = static_cast<std::size_t>(g.layout.param_count());
  if (g.spec.cast && shards != params) {
    throw InvalidArgument("all_gather of group '" + g.spec.name + "': " + std::to_string(shards) +
                          " shard pointers for " + std::to_string(params) +
                          " parameters (a cast group reads every fp32 master shard)");
  }
  if (shards != 0 && shards != params) {
    throw InvalidArgument("all_gather of group '" + g.spec.name + "': " + std::to_string(shards) +
                          " shard pointers for " + std::to_string(params) +
                          " parameters (pass none or all)");
  }
  if (const int p = null_pointer(g.layout, shard_pointers); p >= 0) {
    throw InvalidArgument("all_gather of group '" + g.spec.name +
                          "': the shard pointer of parameter " + std::to_string(p) + " is null");
  }
}

void CommunicatorBase::check_reduce_scatter(const Group& g,
                                            std::span<const void* const> grad_pointers,
                                            const float* out) const {
  const std::size_t grads = grad_pointers.size();
  const std::size_t params = static_cast<std::size_t>(g.layout.param_count());
  if (grads != params && !(grads == 0 && g.gradients_staged)) {
    throw InvalidArgument("reduce_scatter of group '" + g.spec.name +
                          "': " + std::to_string(grads) + " gradient pointers for " +
                          std::to_string(params) + " parameters");
  }
  if (out == nullptr) {
    throw InvalidArgument("reduce_scatter of group '" + g.spec.name + "': no output shard");
  }
  if (const int p = null_pointer(g.layout, grad_pointers); p >= 0) {
    throw InvalidArgument("reduce_scatter of group '" + g.spec.name +
                          "': the gradient pointer of parameter " + std::to_string(p) + " is null");
  }
}

}  // namespace tide::runtime::detail

namespace tide::runtime {

bool one_node_layout() {
  const std::optional<std::string> v = env::value("TIDE_ONE_NODE");
  if (!v || *v == "1") return true;
  if (*v == "0") return false;
  throw InvalidArgument("TIDE_ONE_NODE='" + *v + "' is not 0 or 1");
}

ArenaInfo describe_arena(const program::CommunicatorArena& arena) {
  ArenaInfo a;
  a.arena_bytes = arena.arena_bytes;
  a.resident_bytes = arena.resident_bytes;
  a.stage_bytes = arena.stage_bytes;
  a.landing_bytes = arena.landing_bytes;
  a.reduce_scatter_bytes = arena.reduce_scatter_bytes;
  a.bound_bytes = arena.bound_bytes;
  for (const program::LandingSlot& s : arena.slots)
    a.slots.push_back(ArenaInfo::Slot{s.id, s.bytes, s.groups});
  return a;
}

}  // namespace tide::runtime
