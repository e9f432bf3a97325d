"""Defects a user's training loop met, each as the loop meets it (fsdp_loop_worker.py), on CPU
with gloo and TIDE's host backend: stock FSDP2 and TIDE side by side, every call after the
first iteration on TIDE or counted under its reason. Seed: TIDE_TEST_SEED (printed)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from seed import tide_test_seed

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_loop(scenario: str, world: int, tmp_path: Path, worker: str = "fsdp_loop_worker.py",
             extra_env: dict | None = None, args: tuple = (), timeout: float = 300) -> tuple[dict, str]:
    seed = tide_test_seed()
    print(f"{scenario}: TIDE_TEST_SEED={seed}")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(world), TIDE_TEST_SEED=str(seed), OMP_NUM_THREADS="1",
               **(extra_env or {}))
    procs = [
        subprocess.Popen([sys.executable, str(HERE / worker), scenario, str(tmp_path), *args],
                         env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(world)
    ]
    logs = []
    for proc in procs:
        try:
            logs.append(proc.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"{scenario} hung (seed {seed})")
    context = f"{scenario}, seed {seed}, exit codes {[p.returncode for p in procs]}:\n" + "\n".join(logs)[-6000:]
    results = {}
    for r in range(world):
        path = tmp_path / f"rank{r}.json"
        if path.exists():
            results[r] = json.loads(path.read_text())
    assert len(results) == world and all(p.returncode == 0 for p in procs), context
    return results, context


def _no_failures(results: dict, context: str) -> None:
    for rank, out in results.items():
        assert not out["failures"], f"rank {rank}: {out['failures']}\n{context}"


@pytest.mark.parametrize("world", [2, 4])
def test_no_sync_accumulation_reduces_fp32_gradients_on_tide(world, tmp_path):
    results, context = run_loop("accumulation", world, tmp_path)
    _no_failures(results, context)


def test_an_evaluation_forward_keeps_every_block_on_tide(tmp_path):
    results, context = run_loop("eval", 4, tmp_path)
    _no_failures(results, context)
    assert all(out["evictions"] > 0 for out in results.values()), context


def test_reshard_after_backward_turned_off_midway(tmp_path):
    results, context = run_loop("reshard", 2, tmp_path)
    _no_failures(results, context)


def test_an_explicit_unshard_into_a_held_slot_unshards(tmp_path):
    results, context = run_loop("unshard", 2, tmp_path)
    _no_failures(results, context)


def test_enable_after_an_explicit_unshard_keeps_accumulated_gradients(tmp_path):
    results, context = run_loop("prefetched", 2, tmp_path)
    _no_failures(results, context)


def test_frozen_parameters_read_one_zero_buffer(tmp_path):
    results, context = run_loop("frozen", 2, tmp_path)
    _no_failures(results, context)


def test_a_custom_all_gather_set_after_enable_runs_and_is_reported(tmp_path):
    results, context = run_loop("custom", 2, tmp_path)
    _no_failures(results, context)


def test_comm_debug_mode_and_the_profiler_see_tide(tmp_path):
    results, context = run_loop("tools", 2, tmp_path)
    _no_failures(results, context)
    counts = results[0]["comm_counts"][-1][1]  # a served iteration, TIDE's run
    assert any("allgather" in k for k in counts) and any("reduce_scatter" in k for k in counts), counts


def test_compiled_autograd_runs_stock_with_the_reason_and_returns(tmp_path):
    results, context = run_loop("compiled", 2, tmp_path)
    _no_failures(results, context)


def test_pipeline_stages_each_enable_their_own_sub_mesh(tmp_path):
    results, context = run_loop("stages", 4, tmp_path)
    _no_failures(results, context)
    for out in results.values():
        assert all(r["backend"] == "tide" for r in out["enable_rows"]), out["enable_rows"]


def test_a_tide_failure_leaves_torch_groups_it_did_not_serve(tmp_path):
    results, context = run_loop("abort", 2, tmp_path)
    for rank, out in results.items():
        assert "TIDE communicator" in out["raised"], f"rank {rank}: {out['raised']}\n{context}"
        assert out["other_group"] == 2.0, f"rank {rank}: {out['other_group']}\n{context}"


def test_reasons_name_the_rank_once_and_nothing_leaks_at_exit(tmp_path):
    """A group TIDE refuses (fp16 masters) names one rank once, and a process that enabled
    TIDE and exits leaves no binding object behind (nanobind would report a leak)."""
    results, context = run_loop("prefix", 2, tmp_path, worker="fsdp_exit_worker.py")
    for out in results.values():
        reasons = [r["reason"] for r in out["report"] if r["backend"] == "stock"]
        assert reasons and all(r.count("rank ") == 1 for r in reasons), reasons
    assert "leak" not in context.lower(), context
