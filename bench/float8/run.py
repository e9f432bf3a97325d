"""torchao float8 training with FSDP2, stock vs TIDE (worker.py), and its table.

    python bench/float8/run.py --device cuda-shared --shape h200 --worlds 2 4 --out DIR
    python bench/float8/run.py --device cpu --shape tiny --worlds 2 --out DIR

For every world N: stock float8, TIDE float8, and (``--bf16 [N ...]``) stock without float8,
each N fresh processes from one seed (printed). Writes DIR/<N>/<mode>-rank<r>.json (the workers'),
DIR/results.json and DIR/README.md: per N and system, the largest relative loss difference to
stock float8 over steps and ranks (and float8's own gap to bf16, the bound it is read against),
the FSDP groups served by TIDE with their all-gather dtypes and bytes, the median step time
over the steps after the first two [min, max], and the peak memory (largest rank).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world: int, mode: str, shape: str, device: str, seed: int, out: Path,
           timeout_s: float) -> list[dict]:
    """Runs the N ranks of one run; their JSONs, or raises with the ranks' output tails."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(world), TIDE_TEST_SEED=str(seed), DEVICE=device, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(HERE / "worker.py"), mode, str(out), shape],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r),
                                       LOCAL_WORLD_SIZE=str(world)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=timeout_s)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"{mode} N={world} hung past {timeout_s:.0f} s") from None
    (out / f"{mode}.log").write_text("\n".join(logs))
    if any(p.returncode for p in procs):
        raise RuntimeError(f"{mode} N={world} failed {[p.returncode for p in procs]}:\n"
                           + "\n".join(logs)[-4000:])
    return [json.loads((out / f"{mode}-rank{r}.json").read_text()) for r in range(world)]


def loss_gap(runs: list[dict], reference: list[dict]) -> float:
    """The largest relative loss difference over steps and ranks."""
    return max(abs(r["losses"][s] - want) / max(abs(want), 1e-30)
               for r, ref in zip(runs, reference) for s, want in ref["losses"].items())


def step_ms(runs: list[dict]) -> tuple[float, float, float]:
    """(median, min, max) over the steps after the first two of the slowest rank's step, ms."""
    steps = sorted({int(s) for r in runs for s in r["step_seconds"]})[2:]
    per = [1e3 * max(r["step_seconds"][str(s)] for r in runs) for s in steps]
    return statistics.median(per), min(per), max(per)


def served(runs: list[dict]) -> dict:
    """Rank 0's report: groups on TIDE with calls served, their dtypes and stock reasons."""
    rows = runs[0]["report"]
    on = [r for r in rows if r["backend"] == "tide" and r["all_gathers"] > 0]
    return {"groups": len(rows), "served": len(on),
            "all_gather_dtypes": sorted({d for r in on for d in r.get("all_gather_dtypes", [])}),
            "all_gather_bytes": {r["group"]: r.get("all_gather_bytes") for r in on},
            "all_gathers": {r["group"]: r["all_gathers"] for r in rows},
            "stock_reasons": {r["group"]: r["stock_reasons"] for r in rows if r["stock_reasons"]},
            "reasons": {r["group"]: r["reason"] for r in rows if r["reason"]}}


def table(results: dict) -> str:
    lines = ["| N | system | loss vs stock float8 | groups on TIDE | all-gather dtypes | step ms, median [min, max] | peak MiB (largest rank) | vs stock float8 |",
             "| ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for world, row in results["worlds"].items():
        stock_peak = row["stock"]["peak_mib"]
        for mode in ("stock", "tide", "bf16"):
            if mode not in row:
                continue
            r = row[mode]
            gap = "0 (reference)" if mode == "stock" else ("bitwise" if r["loss_gap"] == 0 else f"{r['loss_gap']:.2e}")
            groups = f"{r['served']['served']} of {r['served']['groups']}" if mode == "tide" else ""
            dtypes = ", ".join(r["served"]["all_gather_dtypes"]) if mode == "tide" else ""
            med, lo, hi = r["step_ms"]
            peak = f"{r['peak_mib']:.1f}" if r["peak_mib"] is not None else "n/a (CPU)"
            vs = (f"{100 * (r['peak_mib'] / stock_peak - 1):+.1f}%"
                  if r["peak_mib"] is not None and stock_peak and mode != "stock" else "")
            name = {"stock": "stock float8", "tide": "TIDE float8", "bf16": "stock bf16 (no float8)"}[mode]
            lines.append(f"| {world} | {name} | {gap} | {groups} | {dtypes} | {med:.1f} [{lo:.1f}, {hi:.1f}] | {peak} | {vs} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda-shared"], default="cpu")
    ap.add_argument("--shape", default="tiny")
    ap.add_argument("--worlds", type=int, nargs="+", default=[2])
    ap.add_argument("--bf16", type=int, nargs="*", default=None, metavar="N",
                    help="also stock without float8 (the bound), at these worlds (none: every world)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1, 1 << 30)
    print(f"float8 bench: seed {seed}", flush=True)
    results = {"seed": seed, "device": a.device, "shape": a.shape, "worlds": {}}
    for world in a.worlds:
        out = a.out / str(world)
        out.mkdir(parents=True, exist_ok=True)
        bf16 = a.bf16 is not None and (not a.bf16 or world in a.bf16)
        runs = {m: launch(world, m, a.shape, a.device, seed, out, a.timeout)
                for m in ["stock", "tide"] + (["bf16"] if bf16 else [])}
        row = {}
        for mode, ranks in runs.items():
            peaks = [r["peak_bytes"] for r in ranks]
            row[mode] = {"loss_gap": loss_gap(ranks, runs["stock"]), "step_ms": step_ms(ranks),
                         "peak_mib": max(peaks) / 2**20 if peaks[0] is not None else None,
                         "served": served(ranks) if mode == "tide" else None,
                         "losses_rank0": ranks[0]["losses"]}
        results["machine"] = runs["stock"][0]["device"]
        results["torch"] = runs["stock"][0]["torch"]
        results["worlds"][str(world)] = row
        print(table({"worlds": {str(world): row}}), flush=True)
        write(a, results)  # after every world: a run cut short keeps what it measured
    return 0


def write(a, results: dict) -> None:
    bf16 = "" if a.bf16 is None else " --bf16" + "".join(f" {w}" for w in a.bf16)
    (a.out / "results.json").write_text(json.dumps(results, indent=1))
    (a.out / "README.md").write_text(
        f"# torchao float8, stock vs TIDE ({results['machine']}, torch {results['torch']}, seed {results['seed']})\n\n"
        f"    python bench/float8/run.py --device {a.device} --shape {a.shape} --worlds "
        f"{' '.join(map(str, a.worlds))}{bf16} --seed {results['seed']} --out DIR\n\n"
        + table(results) + "\n")


if __name__ == "__main__":
    sys.exit(main())
