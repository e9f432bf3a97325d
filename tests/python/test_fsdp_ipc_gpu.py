"""The FSDP2 parity run with several processes on ONE GPU: stock FSDP2 on gloo with CUDA
tensors against TIDE on its ipc backend (NOTE [ipc fabric]), every rank on GPU 0. World 2 runs
every case; world 4 adds (d) HSDP 2 x 2. Both TIDE modes at world 2. Skips where no GPU is
present. Where TIDE_IPC_RESULTS names a directory, one JSON row per run goes there
(scripts/device/ipc.sh collects them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from test_fsdp_parity import CASES, HOST_CASES, check_case, check_rail_messages, run_parity

GPU = torch.cuda.is_available() and torch.cuda.device_count() > 0
RUNS = [(2, "in-place"), (2, "slot-reuse"), (4, "in-place")]


def _record(world: int, mode: str, run: dict, hosts: int = 1) -> None:
    where = os.environ.get("TIDE_IPC_RESULTS")
    if not where:
        return
    cases = sorted(run["cases"])
    failed = [c for c in cases if run["cases"][c]["failures"]]
    row = {
        "kind": "fsdp_parity",
        "world": world,
        "mode": mode,
        "cases": "".join(cases),
        "failed": "".join(failed),
        "passed": not failed,
        "seed": run.get("seed"),
        "hosts": hosts,
    }
    name = f"fsdp-ipc-{world}-{mode}" + (f"-hosts{hosts}" if hosts > 1 else "")
    Path(where, f"{name}.json").write_text(json.dumps(row))


def _record_failure(world: int, mode: str, error: str) -> None:
    """A run that did not finish: its row says so, with the workers' last output."""
    where = os.environ.get("TIDE_IPC_RESULTS")
    if where:
        row = {"kind": "fsdp_parity", "world": world, "mode": mode, "cases": "", "failed": "run",
               "passed": False, "error": error[-6000:]}
        Path(where, f"fsdp-ipc-{world}-{mode}.json").write_text(json.dumps(row))


@pytest.mark.skipif(not GPU, reason="no GPU: the one-GPU ipc parity run needs one")
@pytest.mark.parametrize("world,mode", RUNS, ids=[f"{w}-{m}" for w, m in RUNS])
@pytest.mark.parametrize("case", list(CASES))
def test_parity_one_gpu(world, mode, case, tmp_path_factory):
    if case == "d" and world < 4:
        pytest.skip("HSDP 2 x 2 needs 4 ranks")
    try:
        run = run_parity(world, tmp_path_factory, device="cuda-shared", cases=CASES, mode=mode)
    except pytest.fail.Exception as failed:
        _record_failure(world, mode, str(failed))
        raise
    _record(world, mode, run)
    check_case(run, case)


# NOTE [runtime] 9 over ipc: 4 processes on the GPU as 2 emulated hosts of 2
# (TIDE_EMULATE_HOSTS): the groups that span both hosts send their rail traffic as two-sided
# messages through the ipc rendezvous transport; HSDP (d) shards within a host, so its groups
# send none.
@pytest.mark.skipif(not GPU, reason="no GPU: the one-GPU ipc parity run needs one")
@pytest.mark.parametrize("mode", ["in-place", "slot-reuse"])
@pytest.mark.parametrize("case", HOST_CASES)
def test_parity_one_gpu_emulated_hosts(mode, case, tmp_path_factory):
    try:
        run = run_parity(4, tmp_path_factory, device="cuda-shared", cases=HOST_CASES, mode=mode,
                         hosts=2)
    except pytest.fail.Exception as failed:
        _record_failure(4, mode + "-hosts2", str(failed))
        raise
    _record(4, mode, run, hosts=2)
    check_case(run, case)
    check_rail_messages(run, case)
