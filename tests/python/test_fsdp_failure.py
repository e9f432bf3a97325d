"""Failure and fallback across processes (gloo, TIDE host backend): close() returns a model to
stock FSDP2 and enable() works again; a failed arena allocation on one rank and a store that
is not shared fall back on every rank at once; an abort, a killed rank and a failed health
check make every surviving rank raise tide.fsdp.CommunicationError within the timeout, and
torch's process groups are aborted. Each scenario runs fsdp_failure_worker.py on every rank
(seed: TIDE_TEST_SEED, printed with every failure)."""

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
TIMEOUT_S = 20.0  # fsdp_failure_worker.TIMEOUT_S: the communicators' timeout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_scenario(scenario: str, world: int, tmp_path: Path) -> tuple[dict, dict, int, str]:
    """({rank: its JSON}, {rank: exit code}, seed, context); fails the test on a hang."""
    seed = tide_test_seed()
    print(f"{scenario}: TIDE_TEST_SEED={seed}")
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE=str(world),
        TIDE_TEST_SEED=str(seed),
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    )
    env.pop("TIDE_BACKEND", None)
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "fsdp_failure_worker.py"), scenario, str(tmp_path)],
            env=dict(env, RANK=str(r), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    logs = []
    for proc in procs:
        try:
            logs.append(proc.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"{scenario} hung (seed {seed}):\n" + "\n".join(p.communicate()[0] or "" for p in procs)[-4000:])
    codes = {r: p.returncode for r, p in enumerate(procs)}
    results = {}
    for r in range(world):
        path = tmp_path / f"rank{r}.json"
        if path.exists():
            results[r] = json.loads(path.read_text())
    context = f"{scenario}, seed {seed}, exit codes {codes}:\n" + "\n".join(logs)[-6000:]
    return results, codes, seed, context


def _on_tide(rows) -> bool:
    return bool(rows) and all(r["backend"] == "tide" for r in rows)


def test_close_returns_to_stock_and_enable_works_again(tmp_path):
    results, codes, seed, context = run_scenario("close", 2, tmp_path)
    assert codes == {0: 0, 1: 0} and len(results) == 2, context
    for rank, out in results.items():
        assert not out["failures"], f"{context}\nrank {rank}: {out['failures']}"
        assert len(out["losses"]) == 9, context
        assert _on_tide(out["before_close"]), out["before_close"]
        assert all(r["all_gathers"] > 0 and r["reduce_scatters"] > 0 for r in out["before_close"]), out
        assert all(r["backend"] == "stock" and "close" in r["reason"] for r in out["after_close"]), out
        assert out["params_on_tide_after_close"] == 0, out
        assert _on_tide(out["reenabled"]), out["reenabled"]
        # The second enable() traces its first iteration on stock, then TIDE serves the calls.
        assert all(r["active"] and r["all_gathers"] > 0 and r["reduce_scatters"] > 0
                   for r in out["after_reenable"]), out["after_reenable"]


def test_an_arena_failure_on_one_rank_falls_back_everywhere(tmp_path):
    results, codes, seed, context = run_scenario("arena", 2, tmp_path)
    assert codes == {0: 0, 1: 0} and len(results) == 2, context
    for rank, out in results.items():
        assert not out["failures"], f"{context}\nrank {rank}: {out['failures']}"
        assert len(out["losses"]) == 4, context
        rows = out["report"]
        assert rows and all(r["backend"] == "stock" for r in rows), rows
        assert all("rank 1" in r["reason"] and "simulated" in r["reason"] for r in rows), rows
        assert out["seconds"] < TIMEOUT_S, f"{context}: the fallback waited for a timeout"


def test_a_store_not_shared_falls_back_before_the_timeout(tmp_path):
    # It waits NOTE [shared store]'s grace (5 s) for keys sent but not yet stored, then falls back.
    results, codes, seed, context = run_scenario("store", 2, tmp_path)
    assert codes == {0: 0, 1: 0} and len(results) == 2, context
    for rank, out in results.items():
        assert not out["failures"], f"{context}\nrank {rank}: {out['failures']}"
        rows = out["report"]
        assert rows and all(r["backend"] == "stock" and "not shared" in r["reason"] for r in rows), rows
        assert out["seconds"] < TIMEOUT_S, context


def test_an_unreachable_peer_falls_back_within_the_timeout(tmp_path):
    results, codes, seed, context = run_scenario("unreachable", 2, tmp_path)
    assert codes == {0: 0, 1: 0} and len(results) == 2, context
    for rank, out in results.items():
        assert not out["failures"], f"{context}\nrank {rank}: {out['failures']}"
        rows = out["report"]
        assert rows and all(r["backend"] == "stock" and "registration" in r["reason"] for r in rows), rows
        assert all("\n" not in r["reason"] and "Traceback" not in r["reason"] for r in rows), rows
        # One timeout (4 s) for the communicator, not one per group.
        assert out["seconds"] < 2 * 4.0 + 3, f"{context}: {out['seconds']:.1f} s"


def _assert_job_stopped(out: dict, context: str) -> None:
    assert out["raised"] == "tide._failure.CommunicationError", f"{context}\n{out.get('traceback')}"
    assert "The job must stop" in out["message"], out["message"]
    assert out["torch_initialized_after"] is False, f"{context}: torch's process groups were not aborted"
    assert out["seconds"] < TIMEOUT_S + 5, f"{context}: raised after {out['seconds']:.1f} s"


def test_an_abort_in_the_backward_stops_every_rank(tmp_path):
    results, codes, seed, context = run_scenario("abort", 3, tmp_path)
    assert codes == {0: 0, 1: 0, 2: 0} and len(results) == 3, context
    for out in results.values():
        _assert_job_stopped(out, context)
        assert "injected by the test on rank 1" in out["message"], out["message"]


def test_a_killed_rank_stops_every_other_rank(tmp_path):
    results, codes, seed, context = run_scenario("kill", 3, tmp_path)
    assert codes[2] == -9 and 2 not in results, context
    assert codes[0] == 0 and codes[1] == 0 and set(results) == {0, 1}, context
    for out in results.values():
        _assert_job_stopped(out, context)
        assert "rank 2 died" in out["message"], out["message"]


def test_a_failed_health_check_at_post_backward_stops_the_job(tmp_path):
    results, codes, seed, context = run_scenario("watchdog", 2, tmp_path)
    assert codes == {0: 0, 1: 0} and len(results) == 2, context
    for out in results.values():
        _assert_job_stopped(out, context)
        assert "simulated watchdog finding" in out["message"], out["message"]
    # Rank 1 found it at the root's post-backward (NOTE [job stop] 2), not at a later call.
    assert "_root_post_backward_final_callback" in results[1]["traceback"] or "checked" in results[1]["traceback"], (
        results[1]["traceback"]
    )
