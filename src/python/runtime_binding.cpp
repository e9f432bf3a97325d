// The runtime's Communicator for Python (tide._C.Communicator). Tensors cross as integer data
// pointers and streams as integer handles (architecture invariant 4); the store is any Python
// object with set(key, value) and a blocking get(key) -> bytes, such as torch's Store.
// Calls release the GIL while they run: a host-backend call waits for its peers.
#include "runtime_binding.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tide/core/error.hpp"
#include "tide/runtime/communicator.hpp"

namespace nb = nanobind;

namespace tide::python {
namespace {

// A Python store as the runtime's Store. Its get blocks in Python until the key exists (with
// the store's own timeout), so `timeout` is the store's to enforce.
class PythonStore final : public Store {
 public:
  explicit PythonStore(nb::object store) : store_(std::move(store)) {}
  ~PythonStore() override {
    nb::gil_scoped_acquire gil;
    store_.reset();
  }

  void set(const std::string& key, const std::string& value) override {
    nb::gil_scoped_acquire gil;
    store_.attr("set")(key, nb::bytes(value.data(), value.size()));
  }

  std::string get(const std::string& key, std::chrono::milliseconds) override {
    nb::gil_scoped_acquire gil;
    try {
      nb::object value = store_.attr("get")(key);
      if (nb::isinstance<nb::bytes>(value)) {
        nb::bytes b = nb::cast<nb::bytes>(value);
        return std::string(b.c_str(), b.size());
      }
      return nb::cast<std::string>(value);
    } catch (const nb::python_error& e) {
      throw CommunicationError("store: key '" + key + "': " + e.what());
    }
  }

 private:
  nb::object store_;
};

RsMode parse_mode(const std::string& mode) {
  if (mode == "in-place") return RsMode::kInPlace;
  if (mode == "slot-reuse") return RsMode::kSlotReuse;
  throw InvalidArgument("mode '" + mode + "' is not one of: in-place, slot-reuse");
}

std::vector<const void*> pointers(const std::vector<std::uintptr_t>& addresses) {
  std::vector<const void*> out;
  out.reserve(addresses.size());
  for (std::uintptr_t a : addresses)
    out.push_back(reinterpret_cast<const void*>(a));
  return out;
}

// Holds the communicator; close() destroys it, and every later use raises.
class PyCommunicator {
 public:
  PyCommunicator(int rank, int world, int gpus_per_node, const std::string& backend,
                 nb::object store, double timeout_s, int device, bool nodes_as_hosts,
                 const std::string& host) {
    runtime::CommunicatorOptions o;
    o.rank = rank;
    o.world = world;
    o.gpus_per_node = gpus_per_node;
    o.backend = runtime::parse_backend(backend);
    o.store = std::make_shared<PythonStore>(std::move(store));
    if (!(timeout_s > 0)) throw InvalidArgument("timeout_s must be positive");
    o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000.0));
    o.device = device;
    o.emulation.nodes_as_hosts = nodes_as_hosts;  // tests only (TIDE_EMULATE_HOSTS)
    o.emulation.host = host;                      // with it: this rank's emulated host
    comm_ = runtime::Communicator::create(o);
  }

  std::pair<int, std::string> register_group(
      const std::string& name, const std::vector<std::pair<std::int64_t, std::int64_t>>& shapes,
      const std::string& ag_dtype, const std::string& grad_dtype, const std::string& mode,
      bool cast, bool staged_shards, int landing_slot) {
    runtime::GroupSpec spec;
    spec.name = name;
    for (std::size_t p = 0; p < shapes.size(); ++p)
      spec.params.push_back(ParamShape{"p" + std::to_string(p), shapes[p].first, shapes[p].second});
    spec.ag_dtype = parse_dtype(ag_dtype, "ag_dtype");
    spec.grad_dtype = parse_dtype(grad_dtype, "grad_dtype");
    spec.mode = parse_mode(mode);
    spec.cast = cast;
    spec.staged_shards = staged_shards;
    spec.landing_slot = landing_slot;
    runtime::Registration r;
    {
      nb::gil_scoped_release release;
      r = get().register_group(spec);
    }
    return {r.group, r.reason};
  }

  void assign_landing_slots(const std::vector<int>& slots) { get().assign_landing_slots(slots); }

  nb::dict group_info(int group, bool create_arena) {
    const runtime::GroupInfo* info = nullptr;
    if (create_arena) {
      nb::gil_scoped_release release;  // the first use creates the arena (collective)
      info = &get().info(group);
    } else {
      info = &get().planned_info(group);
    }
    nb::dict d;
    d["name"] = info->name;
    d["shard_elems"] = info->shard_elems;
    d["rows_per_rank"] = info->rows_per_rank;
    d["shard_offsets"] = info->shard_offsets;
    d["out_offsets"] = info->out_offsets;
    d["landing_offsets"] = info->landing_offsets;
    d["landing_ptr"] = reinterpret_cast<std::uintptr_t>(info->landing);
    d["landing_bytes"] = info->landing_bytes;
    d["resident_ptr"] = reinterpret_cast<std::uintptr_t>(info->resident);
    d["landing_slot"] = info->landing_slot;
    d["landing_slot_id"] = info->landing_slot_id;
    d["all_gather_lane"] = info->all_gather_lane;  // NOTE [runtime] 11
    d["reduce_scatter_lane"] = info->reduce_scatter_lane;
    d["lane_reason"] = info->lane_reason;
    d["ag_period"] = info->ag_period;
    d["rs_period"] = info->rs_period;
    d["graph_period"] = info->graph_period;
    return d;
  }

  void all_gather(int group, std::uintptr_t stream,
                  const std::optional<std::vector<std::uintptr_t>>& shards) {
    const std::vector<const void*> ptrs = shards ? pointers(*shards) : std::vector<const void*>{};
    nb::gil_scoped_release release;
    get().all_gather(group, stream, ptrs);
  }

  void reduce_scatter(int group, std::uintptr_t stream, const std::vector<std::uintptr_t>& grads,
                      std::uintptr_t out, float alpha, bool accumulate) {
    const std::vector<const void*> ptrs = pointers(grads);
    nb::gil_scoped_release release;
    get().reduce_scatter(group, stream, ptrs, reinterpret_cast<float*>(out), alpha, accumulate);
  }

  nb::dict stats(int group) {
    const runtime::GroupStats s = get().stats(group);
    nb::dict d;
    d["all_gathers"] = s.all_gathers;
    d["reduce_scatters"] = s.reduce_scatters;
    d["copy_bytes_avoided"] = s.copy_bytes_avoided;
    d["copy_bytes_made"] = s.copy_bytes_made;
    d["gradient_bytes_staged"] = s.gradient_bytes_staged;
    d["all_gather_replays"] = s.all_gather_replays;
    d["reduce_scatter_replays"] = s.reduce_scatter_replays;
    d["all_gather_graph_captures"] = s.all_gather_graph_captures;
    d["reduce_scatter_graph_captures"] = s.reduce_scatter_graph_captures;
    d["all_gather_repoint_failure"] = s.all_gather_repoint_failure;
    d["reduce_scatter_repoint_failure"] = s.reduce_scatter_repoint_failure;
    d["message_path"] = s.message_path;
    d["message_path_reason"] = s.message_path_reason;
    d["rail_messages"] = s.rail_messages;
    d["rail_message_bytes"] = s.rail_message_bytes;
    return d;
  }

  void release(int group, std::uintptr_t stream) {
    nb::gil_scoped_release release;
    get().release(group, stream);
  }

  bool holds_slot(int group) { return get().holds_slot(group); }

  void fence(std::uintptr_t stream) {
    nb::gil_scoped_release release;
    get().fence(stream);
  }

  void stage_gradients(int group, std::uintptr_t stream, const std::vector<std::uintptr_t>& grads) {
    const std::vector<const void*> ptrs = pointers(grads);
    nb::gil_scoped_release release;
    get().stage_gradients(group, stream, ptrs);
  }

  std::int64_t arena_bytes() { return get().arena_bytes(); }

  std::int64_t arena_request() {
    nb::gil_scoped_release release;  // lays the arena out: the slots are agreed (collective)
    return get().arena_request();
  }

  void provide_arena(std::uintptr_t memory, std::int64_t bytes) {
    get().provide_arena(memory, bytes);
  }

  nb::dict arena() {
    runtime::ArenaInfo a;
    {
      nb::gil_scoped_release release;  // the first use creates the arena (collective)
      a = get().arena();
    }
    nb::dict d;
    d["arena_bytes"] = a.arena_bytes;
    d["resident_bytes"] = a.resident_bytes;
    d["stage_bytes"] = a.stage_bytes;
    d["landing_bytes"] = a.landing_bytes;
    d["reduce_scatter_bytes"] = a.reduce_scatter_bytes;
    d["bound_bytes"] = a.bound_bytes;
    d["provided"] = a.provided;
    nb::list slots;
    for (const runtime::ArenaInfo::Slot& s : a.slots) {
      nb::dict slot;
      slot["id"] = s.id;
      slot["bytes"] = s.bytes;
      slot["groups"] = s.groups;
      slots.append(slot);
    }
    d["slots"] = slots;
    return d;
  }
  int rank() { return get().rank(); }
  int world() { return get().world(); }

  void abort(const std::string& reason) {
    nb::gil_scoped_release release;
    get().abort(reason);
  }

  void check() {
    nb::gil_scoped_release release;
    get().check();
  }

  runtime::GraphCalls take_graph_calls() { return get().take_graph_calls(); }

  void prepare_graph_launch(const runtime::GraphCalls& calls) { get().prepare_graph_launch(calls); }

  void close() {
    nb::gil_scoped_release release;
    comm_.reset();
  }
  // Collected without close(): also without the GIL, since a communicator spanning hosts joins
  // its heartbeat thread, which may be waiting for the GIL in the store (NOTE [peer liveness]).
  ~PyCommunicator() {
    if (comm_) close();
  }

 private:
  runtime::Communicator& get() {
    if (!comm_) throw CommunicationError("this TIDE communicator was closed");
    return *comm_;
  }
  std::unique_ptr<runtime::Communicator> comm_;
};

}  // namespace

void bind_runtime(nb::module_& m) {
  nb::exception<CommunicationError>(m, "CommunicationError", PyExc_RuntimeError);
  nb::class_<runtime::GraphCalls>(
      m, "GraphCalls",
      "The TIDE calls a CUDA graph captured (NOTE [runtime] 6): pass it to "
      "Communicator.prepare_graph_launch before every launch of that graph")
      .def_prop_ro("calls",
                   [](const runtime::GraphCalls& g) {  // the groups' collectives
                     int n = 0;
                     for (const auto& q : g.sequences)
                       n += q.group >= 0 ? q.calls : 0;
                     return n;
                   })
      .def_prop_ro("handoffs",
                   [](const runtime::GraphCalls& g) {  // NOTE [lane handoff]: one per call
                     int n = 0;
                     for (const auto& q : g.sequences)
                       n += q.group < 0 ? q.calls : 0;
                     return n;
                   })
      .def("__repr__", [](const runtime::GraphCalls& g) {
        std::string text = "GraphCalls(";
        for (std::size_t i = 0; i < g.sequences.size(); ++i) {
          const auto& q = g.sequences[i];
          text += (i ? ", " : "") +
                  (q.group >= 0 ? "group " + std::to_string(q.group) : std::string("handoffs")) +
                  (q.reduce_scatter ? " reduce-scatter" : " all-gather") + " x" +
                  std::to_string(q.calls);
        }
        return text + ")";
      });
  nb::class_<PyCommunicator>(m, "Communicator",
                             "One TIDE communicator per process group (NOTE [runtime])")
      .def(nb::init<int, int, int, const std::string&, nb::object, double, int, bool,
                    const std::string&>(),
           nb::arg("rank"), nb::arg("world"), nb::arg("gpus_per_node"), nb::arg("backend"),
           nb::arg("store"), nb::arg("timeout_s") = 300.0, nb::arg("device") = -1,
           nb::arg("nodes_as_hosts") = false, nb::arg("host") = "")
      .def("register_group", &PyCommunicator::register_group, nb::arg("name"), nb::arg("shapes"),
           nb::arg("ag_dtype") = "bf16", nb::arg("grad_dtype") = "bf16",
           nb::arg("mode") = "in-place", nb::arg("cast") = false, nb::arg("staged_shards") = false,
           nb::arg("landing_slot") = -1,
           "(group id, reason): id -1 when TIDE cannot run the group (reason says why). "
           "ag_dtype: bf16, fp32, fp8 or u8 (fp8, u8: 1-byte items, all-gather only); "
           "grad_dtype: bf16 or fp32")
      .def("group_info", &PyCommunicator::group_info, nb::arg("group"),
           nb::arg("create_arena") = true,
           "The group's layout and (creating the arena, a collective, at the first use) pointers")
      .def("assign_landing_slots", &PyCommunicator::assign_landing_slots, nb::arg("slots"),
           "Every group's landing slot id by group id, before the arena exists (NOTE [runtime] 7)")
      .def("all_gather", &PyCommunicator::all_gather, nb::arg("group"), nb::arg("stream"),
           nb::arg("shards").none())
      .def("reduce_scatter", &PyCommunicator::reduce_scatter, nb::arg("group"), nb::arg("stream"),
           nb::arg("grads"), nb::arg("out"), nb::arg("alpha") = 1.0f, nb::arg("accumulate") = false)
      .def("stats", &PyCommunicator::stats, nb::arg("group"))
      .def("release", &PyCommunicator::release, nb::arg("group"), nb::arg("stream"),
           "The caller is done with the group's landing slot after `stream`'s work so far "
           "(NOTE [runtime] 7)")
      .def("holds_slot", &PyCommunicator::holds_slot, nb::arg("group"))
      .def("fence", &PyCommunicator::fence, nb::arg("stream"),
           "A barrier of both lanes on `stream` (host: now); between two fences with no call "
           "between them no rank touches any arena (NOTE [arena lending])")
      .def("stage_gradients", &PyCommunicator::stage_gradients, nb::arg("group"), nb::arg("stream"),
           nb::arg("grads"),
           "Slot-Reuse: copies the gradients into the group's vacated slot (NOTE [runtime] 8)")
      .def("arena_bytes", &PyCommunicator::arena_bytes)
      .def("arena_request", &PyCommunicator::arena_request,
           "Device bytes the arena needs, to allocate through torch (0: the backend allocates)")
      .def("provide_arena", &PyCommunicator::provide_arena, nb::arg("memory"), nb::arg("bytes"),
           "Memory from ncclMemAlloc for the arena, before it exists; it must outlive the "
           "communicator")
      .def("arena", &PyCommunicator::arena,
           "The arena's layout: bytes by kind, the Sec. 5.4 bound, the landing slots")
      .def("rank", &PyCommunicator::rank)
      .def("world", &PyCommunicator::world)
      .def("abort", &PyCommunicator::abort, nb::arg("reason"))
      .def("check", &PyCommunicator::check,
           "Raises CommunicationError when the communicator has failed (NOTE [runtime] 5)")
      .def("take_graph_calls", &PyCommunicator::take_graph_calls,
           "After a CUDA graph capture: the TIDE calls it holds (nccl backend)")
      .def("prepare_graph_launch", &PyCommunicator::prepare_graph_launch, nb::arg("calls"),
           "Before every launch of a graph that captured TIDE calls (NOTE [runtime] 6)")
      .def("close", &PyCommunicator::close);
}

}  // namespace tide::python
