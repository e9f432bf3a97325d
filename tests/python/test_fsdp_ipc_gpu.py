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

from test_fsdp_parity import (
    CASES,
    EMULATED_HOSTS_RUN,
    HOST_CASES,
    check_case,
    check_expert_lanes,
    check_rail_messages,
    run_parity,
)

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
def test_parity_one_gpu_emulated_hosts(mode, case, tmp_path_factory, request):
    run = _emulated_hosts_run(mode, case, tmp_path_factory, request)
    check_case(run, case)
    check_rail_messages(run, case)


# NOTE [runtime] 11 over ipc (App. F): case (p), an MoE layer at 4 processes on the GPU as 2
# emulated hosts of 2, its experts fully_shard-ed over the expert sub-mesh (one rank per host):
# their groups run on the expert-parallel lane through the CUDA sequence runner (both
# collectives "ep", rail messages through the ipc rendezvous transport; the fp32 expert's
# reduce-scatter on TIDE-RS with the reason), the dense group on TIDE-AG/RS; parity against
# stock FSDP2 on gloo as in every case.
@pytest.mark.skipif(not GPU, reason="no GPU: the one-GPU ipc parity run needs one")
@pytest.mark.parametrize("mode", ["in-place", "slot-reuse"])
def test_parity_one_gpu_expert_parallel_lanes(mode, tmp_path_factory, request):
    run = _emulated_hosts_run(mode, "p", tmp_path_factory, request)
    check_case(run, "p")
    check_expert_lanes(run)


def _emulated_hosts_run(mode: str, case: str, tmp_path_factory, request) -> dict:
    """One worker run per mode serves every selected emulated-hosts case (pytest -k narrows
    it: `-k expert_parallel` runs case (p) alone)."""
    chosen = set()
    for item in request.session.items:
        spec = getattr(item, "callspec", None)
        name = getattr(item, "originalname", None)
        if spec is None or spec.params.get("mode") != mode:
            continue
        if name == "test_parity_one_gpu_emulated_hosts":
            chosen.add(spec.params["case"])
        elif name == "test_parity_one_gpu_expert_parallel_lanes":
            chosen.add("p")
    cases = "".join(c for c in EMULATED_HOSTS_RUN if c in chosen) or case
    try:
        run = run_parity(4, tmp_path_factory, device="cuda-shared", cases=cases, mode=mode,
                         hosts=2)
    except pytest.fail.Exception as failed:
        _record_failure(4, mode + "-hosts2", str(failed))
        raise
    _record(4, mode, run, hosts=2)
    return run
