"""One rank of a failure or fallback scenario (test_fsdp_failure.py launches every rank).

    python fsdp_failure_worker.py SCENARIO OUT_DIR      (RANK, WORLD_SIZE, MASTER_* set)

A TIDE model and a stock FSDP2 model of the same random shapes and initial weights train on
the same per-rank random batches (seed TIDE_TEST_SEED), on gloo with the TIDE host backend.
After every optimizer step TIDE's sharded parameters are set to stock's, so that every step
starts from the same point: losses are then bitwise equal, and gradients equal within
reassociation (or bitwise, where both run stock FSDP2). Scenarios:
  close      3 steps on TIDE, close(), 3 on stock FSDP2, enable() again, 3 on TIDE
  arena      rank 1's arena allocation fails: every rank falls back at once, and trains
  store      torch's default store is replaced by one per process: not shared, stock
  unreachable  rank 1's registration fails at once; rank 0's waits for it until the timeout,
             and every rank trains on stock FSDP2
  abort      rank 1 aborts the communicator inside step 4's backward: CommunicationError
  kill       rank 2 ends itself (SIGKILL) inside step 4's forward: CommunicationError
  watchdog   rank 1's check() fails (as after a watchdog abort) at step 4's post-backward
Each rank writes OUT_DIR/rank<r>.json: what happened, for the test to assert.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

import tide.fsdp
from tide import _C, _runtime
from tide.demo.teardown import end_distributed_run
from seed import tide_test_seed

TIMEOUT_S = 20.0
UNREACHABLE_TIMEOUT_S = 4.0


def _model(widths: list[int]) -> nn.Module:
    torch.manual_seed(1000 + sum(widths))
    layers = [nn.Linear(a, b) for a, b in zip(widths, widths[1:])]
    model = nn.Sequential(*layers)
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    return model


def _batch(seed: int, step: int, rank: int, width: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed * 1000 + step * 10 + rank)
    return torch.randn(3, width, generator=generator)


def _sync(tide_model: nn.Module, stock: nn.Module) -> None:
    with torch.no_grad():
        for mine, theirs in zip(tide_model.parameters(), stock.parameters()):
            mine.copy_(theirs)


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.to_local().clone() for p in model.parameters()]


class Run:
    def __init__(self, seed: int, rank: int) -> None:
        rng = random.Random(seed)
        self.widths = [rng.randrange(5, 23) for _ in range(4)]
        self.seed, self.rank = seed, rank
        self.stock, self.tide = _model(self.widths), _model(self.widths)
        self.stock_opt = torch.optim.SGD(self.stock.parameters(), lr=0.05)
        self.tide_opt = torch.optim.SGD(self.tide.parameters(), lr=0.05)
        self.step_index = 0
        self.losses: list[list[float]] = []
        self.failures: list[str] = []

    def step(self, exact_grads: bool = False) -> None:
        """One step of both models on the same batch; records the losses and any mismatch."""
        x = _batch(self.seed, self.step_index, self.rank, self.widths[0])
        losses = []
        grads = []
        for model, opt in ((self.stock, self.stock_opt), (self.tide, self.tide_opt)):
            loss = model(x).square().mean()
            loss.backward()
            losses.append(loss.item())
            grads.append(_grads(model))
            opt.step()
            opt.zero_grad()
        if losses[0] != losses[1]:
            self.failures.append(f"step {self.step_index}: loss {losses[1]!r} != stock {losses[0]!r}")
        for p, (g_stock, g_tide) in enumerate(zip(*grads)):
            same = torch.equal(g_stock, g_tide) if exact_grads else torch.allclose(
                g_stock, g_tide, rtol=1e-5, atol=1e-6)
            if not same:
                self.failures.append(f"step {self.step_index}: gradient {p} differs from stock's")
        self.losses.append(losses)
        _sync(self.tide, self.stock)
        self.step_index += 1

    def tide_step(self) -> None:
        """A step of the TIDE model alone (its peers may be dead)."""
        x = _batch(self.seed, self.step_index, self.rank, self.widths[0])
        self.tide(x).square().mean().backward()
        self.tide_opt.step()
        self.tide_opt.zero_grad()
        self.step_index += 1


def _communicator(model: nn.Module):
    return getattr(model, tide.fsdp._ATTRIBUTE).communicators[0]


def scenario_close(run: Run, out: dict) -> None:
    tide.fsdp.enable(run.tide, timeout_s=TIMEOUT_S)
    for _ in range(3):
        run.step()
    before = tide.fsdp.report(run.tide)
    out["before_close"] = before
    tide.fsdp.close(run.tide)
    out["after_close"] = tide.fsdp.report(run.tide)
    out["params_on_tide_after_close"] = sum(
        fp in tide._fsdp_group.GROUP_OF_PARAM for _, g in tide.fsdp._fsdp_groups(run.tide) for fp in g.fsdp_params
    )
    for _ in range(3):
        run.step(exact_grads=True)  # stock FSDP2 on both sides: bitwise equal
    out["reenabled"] = tide.fsdp.enable(run.tide, timeout_s=TIMEOUT_S)
    for _ in range(3):
        run.step()
    out["after_reenable"] = tide.fsdp.report(run.tide)
    tide.fsdp.close(run.tide)


def scenario_arena(run: Run, out: dict) -> None:
    if run.rank == 1:
        def allocate_arena(*args, **kwargs):
            raise RuntimeError("CUDA out of memory (simulated by the test)")

        _runtime.allocate_arena = allocate_arena
    start = time.monotonic()
    tide.fsdp.enable(run.tide, timeout_s=TIMEOUT_S)
    for _ in range(4):
        run.step()
    out["seconds"] = time.monotonic() - start
    out["report"] = tide.fsdp.report(run.tide)


def scenario_unreachable(run: Run, out: dict) -> None:
    if run.rank == 1:  # its bootstrap fails at once: rank 0 waits for it until the timeout
        def register(self, comm, pg, mode, **options):
            raise _C.CommunicationError("store: unreachable (simulated by the test)")

        tide._fsdp_group.TideGroup.register = register
    start = time.monotonic()
    out["report"] = tide.fsdp.enable(run.tide, timeout_s=UNREACHABLE_TIMEOUT_S)
    out["seconds"] = time.monotonic() - start
    for _ in range(3):
        run.step(exact_grads=True)


def scenario_store(run: Run, out: dict) -> None:
    own = dist.HashStore()  # this process's alone
    _runtime.default_store = lambda: own
    start = time.monotonic()
    out["report"] = tide.fsdp.enable(run.tide, timeout_s=TIMEOUT_S)
    out["seconds"] = time.monotonic() - start
    for _ in range(3):
        run.step(exact_grads=True)


def _failing_step(run: Run, out: dict) -> None:
    start = time.monotonic()
    try:
        run.tide_step()
        out["raised"] = None
    except Exception as e:  # noqa: BLE001 (recorded for the test to judge)
        out["raised"] = type(e).__module__ + "." + type(e).__qualname__
        out["message"] = str(e)
        out["traceback"] = traceback.format_exc()[-4000:]
    out["seconds"] = time.monotonic() - start
    out["torch_initialized_after"] = dist.is_initialized()


def scenario_abort(run: Run, out: dict) -> None:
    tide.fsdp.enable(run.tide, timeout_s=TIMEOUT_S)
    for _ in range(3):
        run.tide_step()
    if run.rank == 1:
        comm = _communicator(run.tide)
        handle = run.tide[1].register_full_backward_pre_hook(
            lambda *_: comm.abort("injected by the test on rank 1 in the backward")
        )
        out["hook"] = bool(handle)
    _failing_step(run, out)


def scenario_kill(run: Run, out: dict) -> None:
    tide.fsdp.enable(run.tide, timeout_s=TIMEOUT_S)
    for _ in range(3):
        run.tide_step()
    if run.rank == 2:
        run.tide[1].register_forward_pre_hook(lambda *_: os.kill(os.getpid(), signal.SIGKILL))
    _failing_step(run, out)


def scenario_watchdog(run: Run, out: dict) -> None:
    tide.fsdp.enable(run.tide, timeout_s=TIMEOUT_S)
    for _ in range(3):
        run.tide_step()
    if run.rank == 1:
        comm = _communicator(run.tide)
        found = []  # armed in step 4's backward: the first check after it must raise

        def check():
            if found:
                raise _C.CommunicationError("rank 1: a call stalled (simulated watchdog finding)")

        comm.__dict__["check"] = comm._guard(check)
        run.tide[-1].register_full_backward_pre_hook(lambda *_: found.append(True))
    _failing_step(run, out)
    if out["raised"] is None:  # rank 0: its next TIDE call must find the abort
        _failing_step(run, out)


def main() -> None:
    scenario, out_dir = sys.argv[1], Path(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    seed = tide_test_seed(required=True)
    run = Run(seed, rank)
    out: dict = {"rank": rank, "scenario": scenario, "seed": seed, "widths": run.widths}
    globals()[f"scenario_{scenario}"](run, out)
    out["losses"] = run.losses
    out["failures"] = run.failures
    (out_dir / f"rank{rank}.json").write_text(json.dumps(out, default=str))
    print(f"rank {rank}: {scenario} done", flush=True)
    # No barrier: a scenario's peer may be dead, and its groups aborted (NOTE [gloo teardown]).
    end_distributed_run(barrier=False)


if __name__ == "__main__":
    main()
