"""Launching one process per rank for the multi-process Python tests, in this one place."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def free_port() -> int:
    """A free TCP port on the loopback interface, for torch.distributed's store."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(args: list[str], world: int, seed: int, *, label: str, env: dict | None = None,
              local_world: int | None = None, timeout_s: float = 600.0) -> list[str]:
    """Runs ``python *args`` as ``world`` ranks (RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE,
    MASTER_* and TIDE_TEST_SEED set; ``local_world`` ranks per emulated host) and returns each
    rank's output. Fails the test, naming ``label`` and the seed, when a rank hangs past
    ``timeout_s`` (every rank is killed) or exits with an error (the outputs' tails shown)."""
    local = local_world or world
    base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                WORLD_SIZE=str(world), TIDE_TEST_SEED=str(seed), OMP_NUM_THREADS="1",
                **(env or {}))
    procs = [subprocess.Popen([sys.executable, *args],
                              env=dict(base, RANK=str(r), LOCAL_RANK=str(r % local),
                                       LOCAL_WORLD_SIZE=str(local)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    logs = []
    for proc in procs:
        try:
            logs.append(proc.communicate(timeout=timeout_s)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"{label} hung past {timeout_s:.0f} s, seed {seed}")
    if any(p.returncode for p in procs):
        pytest.fail(f"{label} failed {[p.returncode for p in procs]}, seed {seed}:\n"
                    + "\n".join(logs)[-5000:])
    return logs
