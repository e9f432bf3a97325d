"""torchao's float8 training on TIDE (NOTE [extension all-gathers]): ``Float8Linear`` with
``enable_fsdp_float8_all_gather=True`` and precomputed dynamic scales, as torchtitan's float8
converter sets it up, trained stock and with TIDE on 4 CPU processes (bench/float8/worker.py,
the benchmark's own worker). Checks: losses within LOSS_RTOL of stock float8's (bitwise here,
asserted as measured by the bound); every group served after the traced iteration, its blocks
all-gathering float8_e4m3fn bytes; a block's landing slot sized by those bytes (about half of
bf16's: NOTE [extension all-gathers] 2). Skips where torchao is not installed
(scripts/install-python-deps.sh installs it). Seed: TIDE_TEST_SEED (printed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ranks import run_ranks
from seed import tide_test_seed

pytest.importorskip("torchao.float8", reason="torchao is not installed")

WORKER = Path(__file__).resolve().parents[2] / "bench" / "float8" / "worker.py"
WORLD = 4
STEPS = 5  # worker.py's "tiny" shape
LOSS_RTOL = 1e-3


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    seed = tide_test_seed()
    print(f"torchao float8: TIDE_TEST_SEED={seed}")
    out = tmp_path_factory.mktemp("float8")
    result = {"seed": seed}
    for mode in ("stock", "tide"):
        run_ranks([str(WORKER), mode, str(out), "tiny"], WORLD, seed, label=f"torchao float8 {mode}",
                  env={"DEVICE": "cpu"})
        result[mode] = [json.loads((out / f"{mode}-rank{r}.json").read_text()) for r in range(WORLD)]
    return result


def test_losses_match_stock_float8(runs):
    for rank, (stock, tide) in enumerate(zip(runs["stock"], runs["tide"])):
        assert len(stock["losses"]) == STEPS
        for step, want in stock["losses"].items():
            got = tide["losses"][step]
            assert abs(got - want) <= LOSS_RTOL * abs(want), (runs["seed"], rank, step, got, want)


def test_every_group_all_gathers_float8_on_tide(runs):
    from tide.fsdp import _fsdp_group  # noqa: PLC0415

    for rank, tide in enumerate(runs["tide"]):
        rows = {row["group"]: row for row in tide["report"]}
        assert set(rows) == {"<root>", "blocks.0", "blocks.1", "blocks.2"}, rows.keys()
        for name, row in rows.items():
            where = (runs["seed"], rank, name, row["reason"], row["stock_reasons"])
            assert row["backend"] == "tide", where
            assert set(row["stock_reasons"]) <= {_fsdp_group.TRACED}, where
            assert row["reduce_scatters"] == STEPS - 1, where
            if name == "<root>":
                assert row["all_gather_dtypes"] == ["bfloat16"], where
                continue
            # forward and backward of every step after the traced one
            assert row["all_gathers"] == 2 * (STEPS - 1), where
            assert "float8_e4m3fn" in row["all_gather_dtypes"], where


def test_landing_slots_hold_float8_bytes(runs):
    for rank, tide in enumerate(runs["tide"]):
        rows = {row["group"]: row for row in tide["report"]}
        bf16_landing = 2 * WORLD * tide["block_params"]  # a block's parameters, unsharded, in bf16
        (arena,) = tide["memory"]["communicators"]
        block_slots = [s for s in arena["slots"] if any(g.startswith("blocks.") for g in s["groups"])]
        assert block_slots, arena["slots"]
        for slot in block_slots:
            float8 = max(rows[g.split(" ")[0]]["all_gather_bytes"] for g in slot["groups"]
                         if g.startswith("blocks."))
            where = (runs["seed"], rank, slot, float8, bf16_landing)
            # the outputs' bytes (float8 matrices, bf16 norm), rounded up to the arena's 4 KiB
            assert float8 <= slot["bytes"] < float8 + 4096, where
            assert slot["bytes"] < 0.6 * bf16_landing, where
