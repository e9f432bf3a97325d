"""The runtime backend choice (NOTE [backend selection] in tide/_runtime.py): the pure rule
over random groups of rank facts, NCCL's settings, a tide._C without a backend, and enable()
on CPU with TIDE_BACKEND forcing a backend that cannot serve (stock with the reason, strict:
an error naming it). Seed: TIDE_TEST_SEED (printed)."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

import tide.fsdp
from tide import _runtime
from tide._runtime import Choice, RankFacts, choose_backend
from seed import tide_test_seed

SEED = tide_test_seed()


@pytest.fixture
def rng():
    print(f"TIDE_TEST_SEED={SEED}")
    return random.Random(SEED)


def _gpu_ranks(rng, world: int, *, share: bool = False, hosts: int = 1, **overrides) -> list[RankFacts]:
    """``world`` CUDA ranks, one process each, on ``hosts`` hosts, each on a GPU of its own
    (or, with ``share``, two of them on one GPU), in a random order of GPUs."""
    gpus = rng.sample(range(64), world)
    if share:
        a, b = rng.sample(range(world), 2)
        gpus[b] = gpus[a]
    pids = rng.sample(range(100, 1 << 20), world)
    facts = []
    for r in range(world):
        host = f"host{r % hosts}"
        facts.append(RankFacts(r, host, pids[r], "cuda", f"GPU-{host}-{gpus[r]}", **overrides))
    return facts


def _with(facts: list[RankFacts], rank: int, **changes) -> list[RankFacts]:
    out = list(facts)
    fields = {**out[rank].__dict__, **changes}
    out[rank] = RankFacts(**fields)
    return out


@pytest.mark.parametrize("trial", range(5))
def test_gpus_of_their_own_with_windows_get_nccl(rng, trial):
    facts = _gpu_ranks(rng, rng.randrange(1, 9))
    assert choose_backend(facts) == Choice("nccl")


@pytest.mark.parametrize("trial", range(5))
def test_ranks_sharing_a_gpu_get_ipc_with_the_reason(rng, trial):
    facts = _gpu_ranks(rng, rng.randrange(2, 9), share=True)
    choice = choose_backend(facts)
    assert choice.backend == "ipc" and "share GPU" in choice.reason and "NCCL refuses" in choice.reason, choice


@pytest.mark.parametrize(
    "nccl_says",
    [
        "NCCL_NVLS_ENABLE=1 lets NCCL use NVLink multicast",
        "NCCL_CUMEM_ENABLE=0 turns off the cuMem allocator",
        "the NCCL torch loaded is 2.27.3; its symmetric windows need NCCL >= 2.28",
    ],
)
def test_nccl_without_windows_on_one_rank_gets_ipc(rng, nccl_says):
    facts = _gpu_ranks(rng, rng.randrange(2, 9))
    rank = rng.randrange(len(facts))
    choice = choose_backend(_with(facts, rank, nccl_unusable=nccl_says))
    assert choice == Choice("ipc", f"ipc rather than nccl: rank {rank}: {nccl_says}"), choice


def test_neither_backend_keeps_stock_with_both_reasons(rng):
    facts = _gpu_ranks(rng, 4, share=True, ipc_unusable="this tide._C has no ipc backend: backend 'ipc' is not one of: host, nccl")
    choice = choose_backend(facts)
    assert choice.backend == "" and "nccl: ranks" in choice.reason and "ipc: rank 0" in choice.reason, choice


def test_a_group_spanning_hosts_gets_nccl_or_stock_with_the_reason(rng):
    facts = _gpu_ranks(rng, rng.randrange(2, 5) * 2, hosts=2)
    choice = choose_backend(facts)  # NOTE [runtime] 9: real hosts on nccl, asked for
    assert choice.backend == "" and "set TIDE_BACKEND=nccl on every rank" in choice.reason, choice
    facts = [RankFacts(**{**f.__dict__, "forced": "nccl"}) for f in facts]
    assert choose_backend(facts) == Choice("nccl")
    forced = [RankFacts(**{**f.__dict__, "forced": "ipc"}) for f in facts]
    choice = choose_backend(forced)
    assert choice.backend == "" and "spans hosts (host0, host1)" in choice.reason, choice
    assert "TIDE_BACKEND=ipc serves the processes of one host" in choice.reason, choice
    rank = rng.randrange(len(facts))
    choice = choose_backend(_with(facts, rank, nccl_unusable="NCCL_CUMEM_ENABLE=0"))
    assert choice.backend == "" and f"only the nccl backend serves: rank {rank}: NCCL_CUMEM_ENABLE=0" in choice.reason, choice
    cpu = [RankFacts(r, f"host{r % 2}", 100 + r, "cpu") for r in range(4)]
    choice = choose_backend(cpu)
    assert choice.backend == "" and "the host and ipc backends serve the processes of one host" in choice.reason, choice


def test_threads_of_one_process_stay_stock(rng):
    facts = _gpu_ranks(rng, 4)
    facts = _with(facts, 3, pid=facts[1].pid)
    choice = choose_backend(facts)
    assert choice.backend == "" and "ranks 1 and 3 are threads of one process" in choice.reason, choice
    cpu = [RankFacts(r, "h", 7, "cpu") for r in range(3)]
    assert "threads of one process (pid 7)" in choose_backend(cpu).reason


def test_cpu_gets_host(rng):
    pids = rng.sample(range(100, 1 << 20), 4)
    facts = [RankFacts(r, "h", pids[r], "cpu") for r in range(4)]
    assert choose_backend(facts) == Choice("host")
    assert choose_backend([RankFacts(**{**f.__dict__, "forced": "host"}) for f in facts]) == Choice("host")


@pytest.mark.parametrize(
    ("device", "forced", "expected"),
    [
        ("cpu", "nccl", "TIDE_BACKEND=nccl serves CUDA tensors"),
        ("cpu", "ipc", "TIDE_BACKEND=ipc serves CUDA tensors"),
        ("cuda", "host", "TIDE_BACKEND=host serves CPU tensors"),
        ("cuda", "sideways", "TIDE_BACKEND=sideways is not one of auto, host, nccl, ipc"),
    ],
)
def test_a_forced_backend_that_cannot_serve_is_stock(rng, device, forced, expected):
    facts = _gpu_ranks(rng, 2, forced=forced)
    if device == "cpu":
        facts = [RankFacts(f.rank, f.host, f.pid, "cpu", forced=forced) for f in facts]
    choice = choose_backend(facts)
    assert choice.backend == "" and expected in choice.reason, choice


def test_forced_nccl_and_ipc(rng):
    own = _gpu_ranks(rng, 4, forced="ipc")
    assert choose_backend(own) == Choice("ipc")  # ipc also serves GPUs of their own
    shared = _gpu_ranks(rng, 4, share=True, forced="nccl")
    choice = choose_backend(shared)
    assert choice.backend == "" and choice.reason.startswith("TIDE_BACKEND=nccl: ranks"), choice
    old = _with(_gpu_ranks(rng, 4, forced="ipc"), 2, ipc_unusable="no ipc")
    assert choose_backend(old) == Choice("", "TIDE_BACKEND=ipc: rank 2: no ipc")


def test_ranks_forcing_different_backends_stay_stock(rng):
    facts = _with(_gpu_ranks(rng, 3), 1, forced="ipc")
    choice = choose_backend(facts)
    assert choice.backend == "" and "TIDE_BACKEND differently (auto, ipc)" in choice.reason


@pytest.mark.parametrize(
    ("environ", "version", "expected"),
    [
        ({}, (2, 28, 3), ""),
        ({"NCCL_NVLS_ENABLE": "0"}, (2, 29, 1), ""),
        ({"NCCL_NVLS_ENABLE": "1"}, (2, 29, 1), "NCCL_NVLS_ENABLE=1"),
        ({"NCCL_NVLS_ENABLE": "2"}, (2, 29, 1), "set it to 0"),
        ({"NCCL_CUMEM_ENABLE": "0"}, (2, 29, 1), "NCCL_CUMEM_ENABLE=0"),
        ({"NCCL_CUMEM_ENABLE": "1"}, (2, 28, 0), ""),
        ({}, (2, 27, 7), "2.27.7; its symmetric windows need NCCL >= 2.28"),
    ],
)
def test_nccl_settings(environ, version, expected):
    why = _runtime.nccl_unusable(environ, version)
    assert (why == "") if not expected else (expected in why), why


def test_a_tide_c_refusing_a_backend_name_is_a_reason(monkeypatch):
    class OldCommunicator:  # a tide._C from before the ipc backend
        def __init__(self, rank, world, local, backend, store, timeout_s, device):
            if backend not in ("host", "nccl"):
                raise ValueError(f"backend '{backend}' is not one of: host, nccl")

        def close(self):
            pass

    monkeypatch.setattr(_runtime, "communicator_class", lambda: OldCommunicator)
    monkeypatch.setattr(_runtime, "_built", {})
    assert _runtime.backend_missing("nccl", 0) == ""
    why = _runtime.backend_missing("ipc", 0)
    assert why == "this tide._C has no ipc backend: backend 'ipc' is not one of: host, nccl", why


def test_a_rank_that_cannot_describe_itself_keeps_stock(rng):
    facts = _with(_gpu_ranks(rng, 3), 2, unknown="RuntimeError: CUDA driver error (simulated)")
    choice = choose_backend(facts)
    assert choice == Choice("", "rank 2 could not describe its device: RuntimeError: CUDA driver error (simulated)")
    assert _runtime._version_tuple(22803) == (2, 28, 3) and _runtime._version_tuple((2, 29, 1)) == (2, 29, 1)


def test_the_process_group_backend_names():
    class Named:
        def __init__(self, name):
            self._name = name

        def name(self):
            return self._name

    assert _runtime.unservable_process_group(Named("gloo")) == ""
    assert _runtime.unservable_process_group(Named("cpu:gloo,cuda:nccl")) == ""
    assert "threads of one process" in _runtime.unservable_process_group(Named("threaded"))
    assert "'fake', not one TIDE runs beside" in _runtime.unservable_process_group(Named("fake"))
    assert "'mpi'" in _runtime.unservable_process_group(Named("mpi"))


# --- enable() on CPU (gloo, world 1) -------------------------------------------------------------


def _model(rng) -> nn.Module:
    widths = [rng.randrange(3, 17) for _ in range(3)]
    torch.manual_seed(rng.randrange(1 << 30))
    model = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(widths, widths[1:])])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    return model, widths[0]


@pytest.mark.usefixtures("world_of_one")
def test_enable_on_cpu_reports_the_host_backend(rng, monkeypatch):
    monkeypatch.delenv("TIDE_BACKEND", raising=False)
    model, _ = _model(rng)
    rows = tide.fsdp.enable(model)
    assert rows and all(r["backend"] == "tide" and r["runtime_backend"] == "host" for r in rows), rows
    assert all(r["runtime_backend_reason"] == "" for r in rows), rows
    tide.fsdp.close(model)


@pytest.mark.usefixtures("world_of_one")
@pytest.mark.parametrize("forced", ["nccl", "ipc", "sideways"])
def test_enable_with_a_forced_backend_that_cannot_serve_trains_on_stock(rng, monkeypatch, forced):
    monkeypatch.setenv("TIDE_BACKEND", forced)
    model, width = _model(rng)
    reference = [p.detach().clone() for p in model.parameters()]
    rows = tide.fsdp.enable(model)
    assert rows and all(r["backend"] == "stock" and f"TIDE_BACKEND={forced}" in r["reason"] for r in rows), rows
    for _ in range(2):  # the job still trains
        model(torch.randn(2, width)).sum().backward()
        assert all(p.grad is not None for p in model.parameters())
    assert all(r["reduce_scatters"] == 0 for r in tide.fsdp.report(model))
    other, _ = _model(rng)
    with pytest.raises(RuntimeError, match=rf"strict=True.*TIDE_BACKEND={forced}.*without strict=True"):
        tide.fsdp.enable(other, strict=True)
    assert tide.fsdp.report(other)[0]["reason"] == "tide.fsdp.enable was not called"  # untouched
    assert len(reference) == len(list(model.parameters()))


@pytest.mark.usefixtures("world_of_one")
def test_a_communicator_that_cannot_be_created_is_a_reason(rng, monkeypatch):
    def create(*args, **kwargs):
        raise RuntimeError("this TIDE was built without CUDA (simulated by the test)")

    monkeypatch.setattr(_runtime, "create", create)
    model, width = _model(rng)
    rows = tide.fsdp.enable(model)
    assert rows and all(
        r["backend"] == "stock" and "host communicator could not be created" in r["reason"]
        and "simulated" in r["reason"] for r in rows
    ), rows
    model(torch.randn(2, width)).sum().backward()


def test_ranks_per_node_come_from_the_hosts_of_the_group(rng):
    """NOTE [runtime] 11: L is a process group's ranks per (emulated) host, not LOCAL_WORLD_SIZE:
    a group of an expert sub-mesh, one rank per host, has L = 1 (the expert-parallel lane)."""
    hosts, local = rng.randint(2, 4), rng.randint(2, 4)
    world = hosts * local
    node = [f"h#host{r // local}" for r in range(world)]  # the job's emulated hosts
    every = [RankFacts(r, "h", 100 + r, "cpu", node=node[r]) for r in range(world)]
    lane = rng.randrange(local)
    expert = [f for f in every if f.rank % local == lane]  # ranks lane, lane + local, ...
    assert _runtime.gpus_per_node(every, "host") == local
    assert _runtime.gpus_per_node(expert, "host") == 1
    within = [f for f in every if f.rank // local == 0]  # a shard group inside one host
    assert _runtime.gpus_per_node(within, "host") == local
    one_host = [RankFacts(r, "h", 100 + r, "cpu", node="h") for r in range(world)]
    assert _runtime.gpus_per_node(one_host, "host") == world
