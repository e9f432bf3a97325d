"""Markdown table of torchtitan runs, stock vs TIDE, from the recorder's JSONs
(tests/python/torchtitan_cpu/recorder.py; the multi-GPU step of scripts/device/multigpu.sh
writes the same layout):

    python bench/torchtitan/table.py DIR        # DIR/<variant>/{stock,tide}/rank<r>.json

One row per variant: FSDP groups on TIDE (x of y, rank 0's report; "all ranks" where every rank
agrees), the largest relative loss difference over the steps (0 printed as "bitwise"), the
median step time of stock and of TIDE over the steps after the first two (the first traces
on stock FSDP2 and compiles where compile is on) and TIDE's change against stock; a variant
whose stock or TIDE run failed (no JSON) says so. Prints the table; ``--out FILE`` also writes
it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def load(run_dir: Path) -> list[dict]:
    files = sorted(run_dir.glob("rank*.json"), key=lambda p: int(p.stem[4:]))
    return [json.loads(p.read_text()) for p in files]


def loss_difference(stock: list[dict], tide: list[dict]) -> tuple[float, bool]:
    """(largest relative difference over steps and ranks, bitwise equal everywhere)."""
    worst, bitwise = 0.0, True
    for s, t in zip(stock, tide):
        for step, want in s["losses"].items():
            got = t["losses"].get(step)
            if got is None:
                return float("inf"), False
            bitwise &= got == want
            worst = max(worst, abs(got - want) / max(abs(want), 1e-30))
    return worst, bitwise


def median_step(ranks: list[dict], skip: int = 2) -> float:
    """Median over steps > skip of the slowest rank's step time (the step ends for all ranks
    with the slowest)."""
    steps = sorted({int(k) for r in ranks for k in r["step_seconds"]})
    per_step = [max(r["step_seconds"].get(str(s), 0.0) for r in ranks) for s in steps if s > skip]
    return statistics.median(per_step) if per_step else float("nan")


def groups_on_tide(ranks: list[dict]) -> str:
    counts = {(sum(row["backend"] == "tide" for row in r["report"]), len(r["report"])) for r in ranks}
    on, total = min(counts)
    return f"{on} of {total}" + ("" if len(counts) == 1 else " (ranks differ)")


def row(variant: str, stock: list[dict], tide: list[dict]) -> str:
    diff, bitwise = loss_difference(stock, tide)
    s, t = median_step(stock), median_step(tide)
    change = f"{100 * (t - s) / s:+.1f}%" if s == s and s > 0 else "n/a"
    return (f"| {variant} | {groups_on_tide(tide)} | {'bitwise' if bitwise else f'{diff:.2e}'} | "
            f"{s * 1e3:.0f} ms | {t * 1e3:.0f} ms | {change} |")


def table(root: Path) -> str:
    lines = ["| variant | groups on TIDE | max rel. loss diff | median step, stock | "
             "median step, TIDE | TIDE vs stock |", "|---|---|---|---|---|---|"]
    for variant in sorted(p.name for p in root.iterdir() if (p / "stock").is_dir() or (p / "tide").is_dir()):
        stock, tide = load(root / variant / "stock"), load(root / variant / "tide")
        if stock and tide:
            lines.append(row(variant, stock, tide))
        else:  # a run that failed writes no JSON (its log says why)
            missing = " and ".join(k for k, v in (("stock", stock), ("TIDE", tide)) if not v)
            lines.append(f"| {variant} | no result: the {missing} run failed | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    text = table(args.dir)
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
