"""NOTE [arena lending] on the host backend: ``Communicator.fence`` is a barrier of every rank,
and between two fences with no call between them no rank needs its arena. Three processes run
an all-gather and a reduce-scatter, fence, poison their landing slots, fence (rank 0 late), and
run them again: every output equals the float64 reference and the late rank held the others."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import torch

from seed import tide_test_seed

WORLD = 3
SHAPES = [(7, 3), (10, 5)]  # (D_p, K_p): rows padded to R_p = ceil(D_p / N) per rank
LATE_S = 0.6


def _tensors(seed: int, rank: int, step: int) -> tuple[list, list]:
    """Rank ``rank``'s shards (R_p K_p fp32) and gradients (D_p K_p fp32) at ``step``."""
    g = torch.Generator().manual_seed(seed * 1000 + rank * 10 + step)
    shards, grads = [], []
    for d, k in SHAPES:
        rows = -(-d // WORLD)
        shards.append(torch.randn(rows * k, generator=g, dtype=torch.float32) + 0.5)
        grads.append(torch.randn(d * k, generator=g, dtype=torch.float32) + 0.5)
    return shards, grads


def _step(comm, gid: int, info: dict, seed: int, rank: int, step: int) -> list[str]:
    """One all-gather and one reduce-scatter (alpha 1/N) checked against the reference."""
    from tide._memory import tensor_at  # noqa: PLC0415

    problems = []
    shards, grads = _tensors(seed, rank, step)
    comm.all_gather(gid, 0, [s.data_ptr() for s in shards])
    everyone = [_tensors(seed, r, step) for r in range(WORLD)]
    for p, (d, k) in enumerate(SHAPES):
        rows = info["rows_per_rank"][p]
        landed = tensor_at(info["landing_ptr"] + info["landing_offsets"][p], WORLD * rows * k,
                           torch.float32, torch.device("cpu"))
        expect = torch.cat([everyone[r][0][p] for r in range(WORLD)])
        if not torch.equal(landed, expect):
            problems.append(f"step {step}: all-gather of parameter {p} differs")
    comm.release(gid, 0)
    out = torch.full((info["shard_elems"],), float("nan"), dtype=torch.float32)  # poisoned
    comm.reduce_scatter(gid, 0, [g.data_ptr() for g in grads], out.data_ptr(), 1.0 / WORLD, False)
    for p, (d, k) in enumerate(SHAPES):
        rows = info["rows_per_rank"][p]
        first, last = rank * rows, min((rank + 1) * rows, d)
        full = sum(everyone[r][1][p].double().view(d, k) for r in range(WORLD)) / WORLD
        got = out[info["out_offsets"][p]:][: (last - first) * k].double().view(-1, k)
        if not torch.allclose(got, full[first:last], rtol=1e-6, atol=1e-6):
            problems.append(f"step {step}: reduce-scatter of parameter {p} differs")
    return problems


def _worker(rank: int, path: str, seed: int, results) -> None:
    import torch.distributed as dist  # noqa: PLC0415

    from tide import _C  # noqa: PLC0415
    from tide._memory import tensor_at  # noqa: PLC0415

    try:
        store = dist.FileStore(path, WORLD)
        comm = _C.Communicator(rank, WORLD, WORLD, "host", store, 30.0, -1)
        gid, reason = comm.register_group("g", SHAPES, "fp32", "fp32", staged_shards=True)
        assert gid >= 0, reason
        try:
            comm.fence(0)
            problems = ["a fence before the arena exists did not raise"]
        except ValueError as e:
            problems = [] if "does not exist yet" in str(e) else [f"wrong refusal: {e}"]
        info = comm.group_info(gid)
        problems += _step(comm, gid, info, seed, rank, 0)
        comm.fence(0)
        landing = tensor_at(info["landing_ptr"], info["landing_bytes"] // 4, torch.float32,
                            torch.device("cpu"))
        landing.fill_(float("nan"))  # the loan: this rank's bytes, used by nobody else
        if rank == 0:
            time.sleep(LATE_S)
        start = time.monotonic()
        comm.fence(0)
        waited = time.monotonic() - start
        problems += _step(comm, gid, info, seed, rank, 1)
        comm.close()
        results.put((rank, problems, waited))
    except Exception as e:  # noqa: BLE001 (reported to the test)
        results.put((rank, [f"{type(e).__name__}: {e}"], 0.0))


def test_fence_is_a_barrier_and_the_arena_idles_between_two(tmp_path):
    seed = tide_test_seed()
    print(f"TIDE_TEST_SEED={seed}")
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, str(tmp_path / "store"), seed, results))
             for r in range(WORLD)]
    for p in procs:
        p.start()
    got = {}
    for _ in range(WORLD):
        rank, problems, waited = results.get(timeout=120)
        got[rank] = (problems, waited)
    for p in procs:
        p.join(timeout=30)
    for rank, (problems, _) in sorted(got.items()):
        assert not problems, f"rank {rank} (seed {seed}): {problems}"
    for rank in range(1, WORLD):  # they reached the fence first and waited for rank 0
        assert got[rank][1] > LATE_S * 0.5, f"rank {rank} left the fence after {got[rank][1]:.3f} s"


def test_lend_helpers_refuse_bad_settings(monkeypatch):
    from tide import _lend  # noqa: PLC0415

    monkeypatch.setenv("TIDE_LEND_ARENA", "0")
    assert _lend.lending_refusal() == "TIDE_LEND_ARENA=0"
    monkeypatch.setenv("TIDE_LEND_ARENA", "yes")
    with pytest.raises(ValueError, match="TIDE_LEND_ARENA must be 0 or 1"):
        _lend.lending_refusal()
    monkeypatch.delenv("TIDE_LEND_ARENA")
    assert _lend.lending_refusal() == ""


def test_optimizer_state_decides_a_loan():
    """A first step of a stateful optimizer creates state that outlives it: no loan then."""
    from tide import _lend  # noqa: PLC0415

    torch.manual_seed(tide_test_seed())
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    for optimizer, stateful in ((torch.optim.AdamW(model.parameters()), True),
                                (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), True),
                                (torch.optim.SGD(model.parameters(), lr=0.1), False)):
        assert _lend.optimizer_state_complete(optimizer) is not stateful
        model(torch.randn(4, 8)).square().sum().backward()
        optimizer.step()
        assert _lend.optimizer_state_complete(optimizer)
        optimizer.zero_grad()
