"""One TIDE communicator per torch process group, on the runtime backend that can serve it.

The communicator is ``tide._C.Communicator`` (the runtime's binding). It bootstraps over
torch's default store under a prefix that names the process group's ranks, so that the
shard groups of HSDP each get their own.

NOTE [backend selection]
Which runtime backend serves a process group is decided from facts every rank gathers over
that group (``RankFacts``: host, process, device, GPU, what its NCCL and its tide._C can do,
its TIDE_BACKEND), by one pure function (``choose_backend``), so that every rank reaches the
same choice without a second round:
  1. ranks that are threads of one process, or ranks on different device types: stock FSDP2,
     with the reason (the runtime needs one process per rank); a group spanning hosts: ``nccl``
     where its ranks hold CUDA tensors, NCCL can serve them and TIDE_BACKEND=nccl asks for it
     (the host and ipc backends serve one host; NOTE [runtime] 9: opt-in until the nccl backend
     has run on two machines), else stock with the reason; the runtime then refuses,
     with its reason, hosts it cannot form (not host-major, unequal ranks per host);
  2. CPU tensors: ``host`` (POSIX shared memory);
  3. CUDA tensors: ``nccl`` where every rank has a GPU of its own and its NCCL can provide
     symmetric windows (version, NCCL_CUMEM_ENABLE, NCCL_NVLS_ENABLE), else ``ipc`` (CUDA IPC
     between the processes of one host: ranks may share a GPU, no NCCL windows needed), else
     stock with both reasons;
  4. ``TIDE_BACKEND`` (host, nccl or ipc; unset or auto: the rule above) forces a backend; a
     forced backend that cannot serve the group is stock FSDP2 with the reason, never another
     backend.
Before the gather, ``unservable_process_group`` refuses, without any collective, process
groups whose backend TIDE does not know (torch's ``threaded`` and ``fake`` test backends
among them: their ranks are threads of one process, or no processes at all), so nothing
waits on a peer that cannot answer.
The communicator's L (ranks per node) is then the group's ranks per host, counted from the
facts' hosts (``RankFacts.node``: under TIDE_EMULATE_HOSTS the emulated host of each global
rank), never LOCAL_WORLD_SIZE alone: a process group of an expert sub-mesh, one rank per host,
gets L = 1 and with it the expert-parallel lane (NOTE [runtime] 11; ``gpus_per_node``).

NOTE [shared store]
The runtime bootstraps over torch's default store; a process group whose ranks do not share
it (a store of each process's own) would leave every registration waiting until the timeout.
So each rank sets a key of its own before the facts are gathered; the gather is a collective
over the group, so after it every key has been sent, and a rank that does not see them all
keeps the group on stock FSDP2, agreed with its peers. Sent is not stored: torch's TCPStore
answers no set, so a peer's key may reach the server after this rank's check (seen with
torch 2.15 on a loaded machine). A key not yet there is waited for, at most
SHARED_STORE_GRACE_S, before the store counts as not shared. The store's waits are
bounded by the communicator's timeout (``BoundedStore``): a peer that stops answering holds
enable() for ``timeout_s`` once per communicator, never torch's store timeout.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Sequence

import torch
import torch.distributed as dist
from . import _lend, _observe

_generation = 0
SHARED_STORE_GRACE_S = 5.0  # NOTE [shared store]: how long a peer's sent key may take to land
BACKENDS = ("host", "nccl", "ipc")
# Process group backends TIDE runs beside: it needs one process per rank and torch's default
# store shared by them (the runtime moves no data through the process group itself).
KNOWN_PROCESS_GROUP_BACKENDS = ("gloo", "nccl")
# The rules the runtime owns (include/tide/core/rules.hpp), read from tide._C when first used:
# the module attribute as tide._C exports it.
_RULES = {
    "MAX_PARAMS": "MAX_PARAMS_PER_GROUP",  # a group's most parameters (Sec. 2.5)
    "NCCL_WITH_WINDOWS": "NCCL_FABRIC_MIN_VERSION",  # the nccl backend's oldest NCCL (major, minor)
}


def native_rule(name: str) -> Any:
    """A rule that tide._C exports (``_RULES``'s value, or a function of it); a clear error
    where this build of tide._C lacks it."""
    from . import _C  # noqa: PLC0415 (the binding loads only when a rule or communicator is needed)

    if not hasattr(_C, name):
        raise RuntimeError(f"tide._C of this build exports no {name} (the runtime's rules): rebuild tide")
    return getattr(_C, name)


def __getattr__(name: str) -> Any:
    """MAX_PARAMS and NCCL_WITH_WINDOWS, read from tide._C (one source: the runtime's)."""
    if name in _RULES:
        return native_rule(_RULES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def communicator_class() -> Any:
    from . import _C  # noqa: PLC0415 (the binding loads only when a communicator is needed)

    if not hasattr(_C, "Communicator"):
        raise RuntimeError("tide._C of this build has no runtime binding (Communicator)")
    return _C.Communicator


def next_generation() -> int:
    """A counter that every rank advances at each enable(), so that store keys never repeat."""
    global _generation
    _generation += 1
    return _generation


def default_store():
    """The store every communicator bootstraps over: torch's default one."""
    return dist.distributed_c10d._get_default_store()


# --- What a process group's ranks are: the facts the choice is made from -------------------


@dataclass(frozen=True)
class RankFacts:
    """One rank of a process group as the backend choice sees it (NOTE [backend selection])."""

    rank: int  # the global rank, for messages
    host: str
    pid: int
    device: str  # "cpu" or "cuda"
    gpu: str = ""  # the GPU's UUID (cuda), the same in every process that sees it
    nccl_unusable: str = ""  # why this rank's NCCL cannot give TIDE windows ("": it can)
    ipc_unusable: str = ""  # why this rank's tide._C has no ipc backend ("": it has)
    forced: str = "auto"  # this rank's TIDE_BACKEND
    unknown: str = ""  # why this rank could not tell its facts ("": it could)
    # The host as the runtime sees it: ``host``, or under TIDE_EMULATE_HOSTS the emulated one
    # (emulated_host): what L of a process group is counted from (gpus_per_node).
    node: str = ""


@dataclass(frozen=True)
class Choice:
    backend: str  # "host", "nccl", "ipc"; "" keeps stock FSDP2
    reason: str = ""  # stock: why; a backend: why not the first choice ("" when it is)


def forced_backend() -> str:
    """TIDE_BACKEND as given (lower case), "auto" when unset or empty."""
    return os.environ.get("TIDE_BACKEND", "").strip().lower() or "auto"


def process_group_backend(pg) -> str:
    """The process group's backend name as torch registered it ("gloo", "cpu:gloo,cuda:nccl")."""
    try:
        return str(dist.get_backend(pg))
    except (RuntimeError, ValueError, KeyError, AttributeError):
        try:
            return str(pg.name())
        except (RuntimeError, AttributeError):
            return "unknown"


def unservable_process_group(pg) -> str:
    """Why TIDE cannot serve this process group, decided without any collective; '' when it
    may. The backend name is the same on every rank, so every rank decides alike."""
    name = process_group_backend(pg)
    parts = [part.split(":")[-1] for part in name.lower().split(",")]
    if all(part in KNOWN_PROCESS_GROUP_BACKENDS for part in parts):
        return ""
    if "threaded" in parts:
        return (
            "the process group's backend is 'threaded' (torch's test backend): its ranks are "
            "threads of one process, and TIDE's runtime needs one process per rank; stock "
            "FSDP2 (use one process per rank, e.g. gloo, to run TIDE)"
        )
    return (
        f"the process group's backend is '{name}', not one TIDE runs beside "
        f"({', '.join(KNOWN_PROCESS_GROUP_BACKENDS)}); stock FSDP2"
    )


def nccl_unusable(environ=os.environ, version: tuple | None = None) -> str:
    """Why NCCL cannot give the nccl backend its symmetric windows here; '' when it can.
    ``version``: the NCCL torch loaded (read from torch when None)."""
    # The runtime's rule (tide._C.nccl_environment_refusal); an empty value counts as unset.
    refusal = native_rule("nccl_environment_refusal")(
        environ.get("NCCL_NVLS_ENABLE") or None, environ.get("NCCL_CUMEM_ENABLE") or None
    )
    if refusal:
        return refusal
    if version is None:
        try:
            version = _version_tuple(torch.cuda.nccl.version())
        except (AttributeError, RuntimeError, TypeError) as e:
            return f"torch reports no NCCL ({e})"
    oldest = tuple(native_rule(_RULES["NCCL_WITH_WINDOWS"]))
    if tuple(version[:2]) < oldest:
        found = ".".join(map(str, version))
        need = ".".join(map(str, oldest))
        return f"the NCCL torch loaded is {found}; its symmetric windows need NCCL >= {need}"
    return ""


def _version_tuple(version) -> tuple:
    """torch.cuda.nccl.version(): a tuple, or NCCL_VERSION_CODE (major * 10000 + minor * 100
    + patch) on older torch."""
    if isinstance(version, int):
        return (version // 10000, version // 100 % 100, version % 100)
    return tuple(version)


_built: dict = {}


def backend_missing(backend: str, device_index: int) -> str:
    """Why this build of tide._C cannot create a communicator of ``backend`` on the device
    ('' when it can): a communicator of one rank is made and closed (nothing collective runs
    before its first call). Until a tide._C knows the backend, it refuses its name."""
    key = (backend, device_index)
    if key not in _built:
        try:
            communicator_class()(0, 1, 1, backend, dist.HashStore(), 1.0, device_index).close()
            _built[key] = ""
        except (RuntimeError, ValueError, TypeError, OSError) as e:
            _built[key] = f"this tide._C has no {backend} backend: {e}"
    return _built[key]


def gpu_identity(device: torch.device) -> str:
    """The GPU's UUID, the same in every process that sees it (indices are not: each process
    may see other devices, CUDA_VISIBLE_DEVICES)."""
    try:
        return str(torch.cuda.get_device_properties(device).uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return f"{socket.gethostname()}:cuda:{device.index}"


def local_facts(device: torch.device) -> RankFacts:
    rank = dist.get_rank() if dist.is_initialized() else 0
    host = socket.gethostname()
    node = emulated_host(host, rank) if emulated_hosts() else host
    facts = RankFacts(rank, host, os.getpid(), device.type, forced=forced_backend(), node=node)
    if device.type != "cuda":
        return facts
    index = device.index if device.index is not None else torch.cuda.current_device()
    nccl = nccl_unusable() or backend_missing("nccl", index)
    return dataclasses.replace(
        facts, gpu=gpu_identity(device), nccl_unusable=nccl, ipc_unusable=backend_missing("ipc", index)
    )


def gather_facts(pg, device: torch.device) -> list[RankFacts]:
    """Every rank's facts, in group rank order (a collective over ``pg``, which every rank
    reaches: a rank that cannot tell its facts says why instead)."""
    try:
        mine = local_facts(device)
    except Exception as e:  # noqa: BLE001 (the peers wait in the gather: never skip it)
        mine = RankFacts(dist.get_rank(), socket.gethostname(), os.getpid(), device.type,
                         unknown=f"{type(e).__name__}: {e}")
    if pg.size() == 1:
        return [mine]
    return _observe.gather_objects(mine, pg)


# --- The choice: a pure function of the facts -------------------------------------------------


def _first_pair(facts: Sequence[RankFacts], key) -> tuple | None:
    seen: dict = {}
    for f in facts:
        k = key(f)
        if k in seen:
            return seen[k], f
        seen[k] = f
    return None


def choose_backend(facts: Sequence[RankFacts]) -> Choice:
    """The runtime backend for a process group of these ranks (NOTE [backend selection])."""
    unknown = next((f for f in facts if f.unknown), None)
    if unknown is not None:
        return Choice("", f"rank {unknown.rank} could not describe its device: {unknown.unknown}")
    forced = {f.forced for f in facts}
    if len(forced) > 1:
        return Choice("", f"the ranks set TIDE_BACKEND differently ({', '.join(sorted(forced))})")
    forced = forced.pop()
    if forced not in ("auto",) + BACKENDS:
        return Choice("", f"TIDE_BACKEND={forced} is not one of auto, {', '.join(BACKENDS)}")
    hosts = sorted({f.host for f in facts})
    threads = _first_pair(facts, lambda f: (f.host, f.pid))
    if threads:
        a, b = threads
        return Choice(
            "",
            f"ranks {a.rank} and {b.rank} are threads of one process (pid {a.pid}); TIDE's "
            "runtime needs one process per rank",
        )
    devices = sorted({f.device for f in facts})
    if len(devices) > 1:
        return Choice("", f"the ranks hold the group's tensors on different devices ({', '.join(devices)})")
    if len(hosts) > 1:  # NOTE [runtime] 9: only nccl reaches ranks of other hosts
        spans = f"the process group spans hosts ({', '.join(hosts)})"
        if devices != ["cuda"] or forced in ("host", "ipc"):
            which = "the host and ipc backends serve" if forced == "auto" else f"TIDE_BACKEND={forced} serves"
            return Choice("", f"{spans}; {which} the processes of one host, so it stays on stock FSDP2 "
                          "(CUDA tensors and the nccl backend run across hosts)")
        nccl_why = _nccl_why_not(facts)
        if nccl_why:
            return Choice("", f"{spans}, which only the nccl backend serves: {nccl_why}")
        if forced != "nccl":  # NOTE [runtime] 9: opt-in until a run on two machines
            return Choice("", f"{spans}; the nccl backend across hosts is built and tested on emulated "
                          "hosts but has not yet run on two machines, so TIDE takes it only when asked: "
                          "set TIDE_BACKEND=nccl on every rank to use it")
        return Choice("nccl")
    if devices == ["cpu"]:
        if forced in ("auto", "host"):
            return Choice("host")
        return Choice(
            "",
            f"TIDE_BACKEND={forced} serves CUDA tensors and this group's are on the CPU "
            "(unset TIDE_BACKEND or set it to host)",
        )
    if devices != ["cuda"]:
        return Choice("", f"TIDE has no backend for {devices[0]} tensors")
    if forced == "host":
        return Choice(
            "",
            "TIDE_BACKEND=host serves CPU tensors and this group's are on GPUs (unset "
            "TIDE_BACKEND, or set it to nccl or ipc)",
        )
    nccl_why = _nccl_why_not(facts)
    ipc_why = next((f"rank {f.rank}: {f.ipc_unusable}" for f in facts if f.ipc_unusable), "")
    if forced == "nccl":
        return Choice("", f"TIDE_BACKEND=nccl: {nccl_why}") if nccl_why else Choice("nccl")
    if forced == "ipc":
        return Choice("", f"TIDE_BACKEND=ipc: {ipc_why}") if ipc_why else Choice("ipc")
    if not nccl_why:
        return Choice("nccl")
    if not ipc_why:
        return Choice("ipc", f"ipc rather than nccl: {nccl_why}")
    return Choice("", f"no runtime backend can serve the group: nccl: {nccl_why}; ipc: {ipc_why}")


def _nccl_why_not(facts: Sequence[RankFacts]) -> str:
    shared = _first_pair(facts, lambda f: (f.host, f.gpu))
    if shared:
        a, b = shared
        return f"ranks {a.rank} and {b.rank} share GPU {a.gpu}, and NCCL refuses two ranks on one GPU"
    return next((f"rank {f.rank}: {f.nccl_unusable}" for f in facts if f.nccl_unusable), "")


def emulated_hosts() -> bool:
    """TIDE_EMULATE_HOSTS=1 (tests): on the host and ipc backends, each node of LOCAL_WORLD_SIZE
    ranks is a host of its own, reached by rail messages only (NOTE [runtime] 9)."""
    return os.environ.get("TIDE_EMULATE_HOSTS", "").strip() == "1"


def emulated_host(host: str, rank: int) -> str:
    """The emulated host of the job's global ``rank``: its node of LOCAL_WORLD_SIZE ranks, as
    torchrun numbers them (the emulation's definition; L of a group is then counted from these
    hosts, gpus_per_node)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world) or world))
    return f"{host}#host{rank // local}"


def gpus_per_node(facts: Sequence[RankFacts], backend: str) -> int:
    """L: the group's ranks on one host, counted from the hosts its ranks sit on (the first
    rank's; every rank computes the same, and the runtime refuses hosts of unequal sizes), not
    from LOCAL_WORLD_SIZE. A process group of an expert sub-mesh, one rank per (emulated) host,
    has L = 1 and gets the expert-parallel lane (NOTE [runtime] 11). On the GPU backends, whose
    ranks share one host, LOCAL_WORLD_SIZE may still split it into emulated nodes of M x L."""
    world = len(facts)
    node = facts[0].node or facts[0].host if facts else ""
    per_host = sum(1 for f in facts if (f.node or f.host) == node) or world
    if backend == "host":
        return per_host
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world) or world)
    return max(1, min(per_host, local))


# --- The store every rank must share -----------------------------------------------------------


class BoundedStore:
    """The store a communicator bootstraps over, its waits bounded by the communicator's
    timeout: torch's stores wait for their own timeout (the process group's, 30 minutes by
    default), so a peer that never answers would hold enable() that long. The binding uses
    set and a blocking get; a get past the timeout raises (the binding's CommunicationError)."""

    def __init__(self, store, timeout_s: float) -> None:
        self._store = store
        self._timeout = timedelta(seconds=float(timeout_s))

    def set(self, key: str, value) -> None:
        self._store.set(key, value)

    def get(self, key: str):
        self._store.wait([key], self._timeout)
        return self._store.get(key)

    def check(self, keys: list) -> bool:
        return self._store.check(keys)

    def arrives(self, keys: list, within_s: float) -> bool:
        """Whether every key is in the store, waiting at most ``within_s`` for those not yet."""
        missing = [k for k in keys if not self._store.check([k])]
        if not missing:
            return True
        try:
            self._store.wait(missing, timedelta(seconds=min(within_s, self._timeout.total_seconds())))
        except (RuntimeError, ValueError):  # torch's store raises on its timeout
            return False
        return True


def store_for(pg, generation: int, timeout_s: float) -> BoundedStore:
    ranks = dist.get_process_group_ranks(pg)
    prefix = f"tide/{generation}/{'-'.join(map(str, ranks))}/"
    return BoundedStore(dist.PrefixStore(prefix, default_store()), timeout_s)


def announce(store, pg) -> None:
    """This rank's key, set before the facts are gathered: NOTE [shared store]."""
    store.set(f"present/{pg.rank()}", str(os.getpid()))


def store_not_shared(store, pg) -> str:
    """Why this rank does not share the store with its peers ('' when it does), after a
    collective over ``pg``: NOTE [shared store]."""
    keys = [f"present/{rank}" for rank in range(pg.size())]
    if store.arrives(keys, SHARED_STORE_GRACE_S):
        return ""
    for rank, key in enumerate(keys):
        if not store.check([key]):
            return (
                f"torch's default store is not shared by the process group's ranks (group rank "
                f"{rank}'s key is missing on group rank {pg.rank()}); TIDE bootstraps over it"
            )
    return ""


def create(pg, device: torch.device, timeout_s: float, backend: str, store, local: int, node: str = ""):
    """The communicator on ``backend`` (local to this process: nothing collective runs before
    the first registration). ``node``: this rank's emulated host (RankFacts.node) where hosts
    are emulated, so that the runtime sees the hosts the group's ranks sit on."""
    if device.type == "cpu":
        device_index = -1
    else:
        device_index = device.index if device.index is not None else torch.cuda.current_device()
    return communicator_class()(
        pg.rank(), pg.size(), local, backend, store, float(timeout_s), device_index,
        nodes_as_hosts=backend in ("host", "ipc") and emulated_hosts(),
        host=node if backend in ("host", "ipc") and emulated_hosts() else "",
    )


# --- The arena in torch's allocator --------------------------------------------------------------


def _nccl_allocators(group, device: torch.device, errors: list):
    """ncclMemAlloc as torch allocators: the NCCL process group's own, else tide._C's."""
    try:
        yield group._get_backend(device).mem_allocator
    except (AttributeError, RuntimeError, TypeError) as e:
        errors.append(f"the process group's NCCL allocator: {e}")
    from . import _C  # noqa: PLC0415

    if getattr(_C, "nccl_allocator", False):
        try:
            yield torch.cuda.memory.CUDAPluggableAllocator(
                _C.__file__, "tide_nccl_mem_alloc", "tide_nccl_mem_free"
            ).allocator()
        except (AttributeError, RuntimeError, TypeError, OSError) as e:
            errors.append(f"tide's NCCL allocator: {e}")
    else:
        errors.append("this build of tide._C has no NCCL allocator (built without NCCL)")


def _ipc_allocators(errors: list):
    """The ipc backend's exportable windows (NOTE [ipc fabric]) as a torch allocator."""
    from . import _C  # noqa: PLC0415

    if not getattr(_C, "ipc_allocator", False):
        errors.append("this build of tide._C has no ipc allocator (built without CUDA)")
        return
    try:
        yield torch.cuda.memory.CUDAPluggableAllocator(
            _C.__file__, "tide_ipc_mem_alloc", "tide_ipc_mem_free"
        ).allocator()
    except (AttributeError, RuntimeError, TypeError, OSError) as e:
        errors.append(f"tide's ipc allocator: {e}")


def torch_arena(comm, group, device: torch.device, backend: str = "nccl"):
    """The communicator's arena allocated by torch, before the arena exists.

    On GPUs TIDE's arena must be memory its windows can share: ncclMemAlloc memory (nccl
    backend; PyTorch's NCCL process group exposes that allocator, ``mem_allocator``) or the
    ipc fabric's exportable allocations (ipc backend; tide._C's ``tide_ipc_mem_alloc``). The
    arena is a tensor of a ``torch.cuda.MemPool`` over that allocator, so that
    ``memory_allocated``, ``max_memory_allocated`` and ``memory_reserved`` include it. Returns
    (tensor, pool, "") with the memory handed to the communicator, or (None, None, why not)
    where the backend allocates it itself. ``arena_request`` is collective on GPUs (the ranks
    agree the slots); the allocation is this rank's alone (``allocate_arena``)."""
    needed = int(comm.arena_request())
    # NOTE [arena lending]: a segment longer than the window, so that it splits at its data bytes
    lends = needed > 0 and device.type == "cuda" and not _lend.lending_refusal()
    padded = needed + (_lend.LOAN_PAD if lends else 0)
    tensor, pool, why = allocate_arena(padded, group, device, backend)
    if tensor is not None:
        comm.provide_arena(tensor.data_ptr(), needed)
    return tensor, pool, why


def allocate_arena(needed: int, group, device: torch.device, backend: str):
    """(tensor, pool, '') of ``needed`` bytes in a MemPool over the backend's allocator, or
    (None, None, why not) where the backend must allocate the arena itself."""
    if needed == 0 or device.type != "cuda":
        return None, None, "the host backend's arena is shared memory (in the RSS)"
    errors: list = []
    allocators = _ipc_allocators(errors) if backend == "ipc" else _nccl_allocators(group, device, errors)
    for allocator in allocators:
        try:
            pool = torch.cuda.MemPool(allocator)
            with torch.cuda.use_mem_pool(pool, device=device):
                tensor = torch.empty(needed, dtype=torch.uint8, device=device)
            return tensor, pool, ""
        except (AttributeError, RuntimeError, TypeError) as e:
            errors.append(str(e))
    return None, None, "outside torch's allocator: " + "; ".join(errors)
