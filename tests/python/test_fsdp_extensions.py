"""FSDP2 all-gather extensions on TIDE (NOTE [extension all-gathers] in tide/_fsdp_extensions.py):
parameters whose ``fsdp_pre_all_gather`` chooses what is all-gathered, trained stock and with
TIDE on 4 CPU processes (fsdp_extension_worker.py): a float8 cast with an all-reduced scale
(one float8 output, padded shards), rowwise float8 (two outputs per parameter: float8 rows and
fp32 scales), NF4-like frozen 4-bit codes (uint8 and fp32 outputs), an output with an odd
byte count per rank (landed in single bytes), and one whose float64 output would land at an
offset that is not a multiple of 8, which stays stock with the reason. Checks: losses within the loss bound
of stock's (bitwise here: the all-gathers move the same bytes and the groups reduce in the
same order on the host backend, so this is asserted as measured); every group served, with its
all-gather dtypes in report(); the landing byte-equal to a reference all-gather of every rank's
pre-all-gather outputs. Seed: TIDE_TEST_SEED (printed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ranks import run_ranks
from seed import tide_test_seed

HERE = Path(__file__).resolve().parent
WORLD = 4
LOSS_RTOL = 1e-3
# The dtypes each case's blocks all-gather (report()'s all_gather_dtypes), the root's: bfloat16.
DTYPES = {
    "float8": ["float8_e4m3fn", "bfloat16"],
    "rowwise": ["float8_e4m3fn", "float32", "bfloat16"],
    "nf4": ["uint8", "float32", "bfloat16"],
    "odd": ["uint8", "float32", "bfloat16"],
}
CASES = tuple(DTYPES) + ("misaligned",)


def _launch(case: str, mode: str, out: Path, seed: int) -> list[dict]:
    run_ranks([str(HERE / "fsdp_extension_worker.py"), case, mode, str(out)], WORLD, seed,
              label=f"extensions {case} {mode}")
    return [json.loads((out / f"{mode}-rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.fixture(scope="module", params=CASES)
def runs(request, tmp_path_factory):
    case = request.param
    seed = tide_test_seed()
    print(f"extensions {case}: TIDE_TEST_SEED={seed}")
    out = tmp_path_factory.mktemp(case)
    return {"case": case, "seed": seed, "stock": _launch(case, "stock", out, seed),
            "tide": _launch(case, "tide", out, seed)}


def test_losses_match_stock(runs):
    for rank, (stock, tide) in enumerate(zip(runs["stock"], runs["tide"])):
        assert tide["losses"]["0"] == stock["losses"]["0"], (runs["case"], runs["seed"], rank)
        for step, want in stock["losses"].items():
            got = tide["losses"][step]
            assert abs(got - want) <= LOSS_RTOL * abs(want), (runs["case"], runs["seed"], rank, step, got, want)


def test_landing_is_byte_equal_to_a_reference_all_gather(runs):
    for rank, tide in enumerate(runs["tide"]):
        assert tide["byte_equal"] and all(tide["byte_equal"].values()), (runs["case"], runs["seed"], rank, tide["byte_equal"])


def test_every_group_served_in_its_all_gather_dtypes(runs):
    from tide.fsdp import _fsdp_group  # noqa: PLC0415

    if runs["case"] not in DTYPES:
        pytest.skip("the misaligned case stays stock: test_misaligned_output_stays_stock_with_the_reason")
    for rank, tide in enumerate(runs["tide"]):
        for row in tide["report"]:
            where = (runs["case"], runs["seed"], rank, row["group"], row["reason"], row["stock_reasons"])
            assert row["backend"] == "tide", where
            assert row["all_gathers"] > 0 and row["reduce_scatters"] > 0, where
            assert set(row["stock_reasons"]) <= {_fsdp_group.TRACED}, where
            want = ["bfloat16"] if row["group"] == "<root>" else DTYPES[runs["case"]]
            assert row["all_gather_dtypes"] == want, where
            assert row["all_gather_bytes"] > 0, where


def test_misaligned_output_stays_stock_with_the_reason(runs):
    if runs["case"] != "misaligned":
        pytest.skip("only the misaligned case")
    for rank, tide in enumerate(runs["tide"]):
        for row in tide["report"]:
            if row["group"] == "<root>":
                assert row["backend"] == "tide" and row["all_gathers"] > 0, row
                continue
            assert row["backend"] == "stock", row
            assert "extra.weight" in row["reason"] and "not a multiple of its 8-byte elements" in row["reason"], row
