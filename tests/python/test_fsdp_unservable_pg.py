"""Process groups TIDE cannot serve fall back at once and never hang (NOTE [backend selection]),
tried as FSDP2 tests from outside this project are written: ranks that are threads of one
process (torch's FSDPTestMultiThread, the ``threaded`` backend) and torch's ``fake`` backend
(no peers at all). enable() keeps stock FSDP2 with the reason, and a training step runs.
Seed: TIDE_TEST_SEED (printed)."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import time

import threading

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

import tide.fsdp
from seed import tide_test_seed

try:  # torch's FSDP test harness needs expecttest (a torch test dependency)
    from torch.testing._internal.common_fsdp import FSDPTestMultiThread
except ImportError as e:
    FSDPTestMultiThread, HARNESS_MISSING = None, str(e)
else:
    HARNESS_MISSING = ""

SEED = tide_test_seed()
BOUND_S = 30.0  # the threads must finish long before any TIDE or torch timeout


def _train_one_step(rank: int) -> tuple[list[dict], float]:
    rng = random.Random(SEED)
    widths = [rng.randrange(4, 20) for _ in range(3)]
    torch.manual_seed(SEED)  # the same weights on every rank
    model = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(widths, widths[1:])])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    start = time.monotonic()
    rows = tide.fsdp.enable(model, timeout_s=BOUND_S)
    x = torch.randn(3, widths[0], generator=torch.Generator().manual_seed(SEED + rank))
    before = [p.detach().to_local().clone() for p in model.parameters()]
    model(x).square().mean().backward()
    optimizer.step()
    moved = any(not torch.equal(b, p.detach().to_local()) for b, p in zip(before, model.parameters()))
    assert moved, "the optimizer step changed no parameter"
    return rows, time.monotonic() - start


def _check_threaded_rank() -> None:
    """One thread-rank's checks: every group stock with the reason, and the step ran."""
    assert dist.get_world_size() == 2
    rows, seconds = _train_one_step(dist.get_rank())
    assert rows, rows
    for row in rows:
        assert row["backend"] == "stock", rows
        assert "'threaded'" in row["reason"] and "one process per rank" in row["reason"], rows
    assert seconds < BOUND_S, f"enable() and a step took {seconds:.1f} s"


def test_threaded_ranks_keep_stock_and_train():
    """The threaded backend directly, as FSDPTestMultiThread sets it up."""
    from torch.testing._internal.distributed import multi_threaded_pg  # noqa: PLC0415

    print(f"TIDE_TEST_SEED={SEED}")
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    world = multi_threaded_pg._install_threaded_pg()
    store = dist.HashStore()
    errors: list = []

    def rank_main(rank: int) -> None:
        try:
            dist.init_process_group("threaded", rank=rank, world_size=2, store=store)
            _check_threaded_rank()
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(f"rank {rank}: {type(e).__name__}: {e}")
            multi_threaded_pg.ProcessLocalGroup.exception_handle(e)  # wakes the other rank
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    try:
        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=2 * BOUND_S)
        hung = [r for r, t in enumerate(threads) if t.is_alive()]
        multi_threaded_pg.ProcessLocalGroup.reset()
    finally:
        multi_threaded_pg._uninstall_threaded_pg()
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
    assert world is not None and not hung and not errors, (hung, errors)


if FSDPTestMultiThread is not None:

    class TestFSDPMultiThread(FSDPTestMultiThread):
        """torch's own harness for FSDP2 tests with ranks as threads."""

        @property
        def world_size(self) -> int:
            return 2

        def test_enable_keeps_stock_and_trains(self):
            print(f"TIDE_TEST_SEED={SEED}")
            _check_threaded_rank()

else:

    @pytest.mark.skip(reason=f"torch's FSDP test harness does not import: {HARNESS_MISSING}")
    def test_fsdp_multithread_harness():
        pass


FAKE = textwrap.dedent(
    """
    import time, torch, torch.distributed as dist, torch.nn as nn
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore
    import tide.fsdp
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    torch.manual_seed({seed})
    model = nn.Sequential(nn.Linear(8, 12), nn.Linear(12, 4))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    start = time.monotonic()
    rows = tide.fsdp.enable(model, timeout_s=30)
    model(torch.randn(2, 8)).sum().backward()
    assert rows and all(r["backend"] == "stock" and "'fake'" in r["reason"] for r in rows), rows
    print("FAKE-PASSED", round(time.monotonic() - start, 2), rows[0]["reason"])
    """
)


def test_the_fake_backend_keeps_stock_without_waiting():
    result = subprocess.run(
        [sys.executable, "-c", FAKE.format(seed=SEED)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0 and "FAKE-PASSED" in result.stdout, result.stdout + result.stderr
