"""FSDP2 with DTensor parameters on TIDE (NOTE [DTensor parameters] in tide/_fsdp_group.py):
FSDP2's SPMD-mesh path (``dp_mesh_dims``) alone, with TP and with HSDP, and FSDP + TP as
``parallelize_module`` builds it. Each case trains stock and with TIDE on 4 CPU processes
(fsdp_dtensor_worker.py) and checks: losses within the loss bound of stock's; every FSDP group
on TIDE, with TIDE all-gathers and reduce-scatters after the first iteration; no stock call
but the traced iteration's; the lanes report() names (the expert-parallel lane where TP spans
each emulated host). Seed: TIDE_TEST_SEED (printed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ranks import run_ranks
from seed import tide_test_seed

HERE = Path(__file__).resolve().parent
WORLD = 4
# Both runs all-gather bitwise equal parameters; the reduce-scatters sum in other orders
# (NOTE [reassociation bound] in fsdp_parity_worker.py), and AdamW carries that on.
LOSS_RTOL = 1e-3
# "tp-across-hosts": the "tp" case on 2 emulated hosts of 2 ranks (TIDE_EMULATE_HOSTS), TP
# within a host, so every FSDP group has one rank per host: the expert-parallel lane, as FSDP
# beside a TP that spans each host on GPUs.
CASES = ("spmd", "spmd-tp", "spmd-hsdp", "tp", "tp-across-hosts")
HOSTS = {"tp-across-hosts": 2}


def _launch(case: str, mode: str, out: Path, seed: int) -> list[dict]:
    hosts = HOSTS.get(case, 1)
    run_ranks([str(HERE / "fsdp_dtensor_worker.py"), case.removesuffix("-across-hosts"), mode, str(out)],
              WORLD, seed, label=f"dtensor {case} {mode}", local_world=WORLD // hosts,
              env={"TIDE_EMULATE_HOSTS": "1" if hosts > 1 else "0"})
    return [json.loads((out / f"{mode}-rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.fixture(scope="module", params=CASES)
def runs(request, tmp_path_factory):
    case = request.param
    seed = tide_test_seed()
    print(f"dtensor {case}: TIDE_TEST_SEED={seed}")
    out = tmp_path_factory.mktemp(case)
    return {"case": case, "seed": seed, "stock": _launch(case, "stock", out, seed),
            "tide": _launch(case, "tide", out, seed)}


def test_losses_match_stock(runs):
    for rank, (stock, tide) in enumerate(zip(runs["stock"], runs["tide"])):
        assert tide["losses"]["0"] == stock["losses"]["0"], (runs["case"], runs["seed"], rank)
        for step, want in stock["losses"].items():
            got = tide["losses"][step]
            assert abs(got - want) <= LOSS_RTOL * abs(want), (runs["case"], runs["seed"], rank, step, got, want)


def test_every_group_served_after_the_first_iteration(runs):
    from tide.fsdp import _fsdp_group  # noqa: PLC0415

    for rank, tide in enumerate(runs["tide"]):
        assert len(tide["report"]) == 4, tide["report"]  # 3 blocks and the root
        for row in tide["report"]:
            where = (runs["case"], runs["seed"], rank, row["group"], row["reason"], row["stock_reasons"])
            assert row["backend"] == "tide", where
            assert row["all_gathers"] > 0 and row["reduce_scatters"] > 0, where
            assert set(row["stock_reasons"]) <= {_fsdp_group.TRACED}, where
            # One host: TIDE-AG and TIDE-RS; TP within each of several hosts: the FSDP groups
            # have one rank per host, the expert-parallel lane. report() says why either way.
            lanes = ("ep", "ep") if runs["case"] in HOSTS else ("tide-ag", "tide-rs")
            assert (row["all_gather_lane"], row["reduce_scatter_lane"]) == lanes, where
            assert row["lane_reason"], where


def test_stock_run_is_reported_stock(runs):
    for row in runs["stock"][0]["report"]:
        assert row["backend"] == "stock" and row["reason"] == "tide.fsdp.enable was not called", row
