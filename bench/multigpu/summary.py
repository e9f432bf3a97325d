#!/usr/bin/env python3
"""summary.json and README.md of a scripts/device/multigpu.sh run (the multi-GPU results schema).

Reads what the run wrote under OUT (splits.json, train/summary.json, faults.json) and writes
OUT/summary.json with gpus, kind, date, training, collectives, landing, faults and splits, and
OUT/README.md with one table per part. Parts the run did not produce are empty lists or null,
and the README says so: nothing is filled in by hand.

Usage: summary.py OUT --gpus N --kind TEXT
"""

import argparse
import datetime
import json
import os


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def training(out):
    s = load(os.path.join(out, "train", "summary.json"))
    if s is None:
        return None
    gib = 2.0 ** 30
    return {"steps": len(s["steps"]), "model": s.get("model"),
            "loss_max_rel_diff": s.get("loss_max_rel_diff"), "max_loss_diff": s["max_loss_diff"],
            "step_ms_stock": s["step_ms_stock"]["median"], "step_ms_tide": s["step_ms_tide"]["median"],
            "step_ms_stock_p10_p90": [s["step_ms_stock"]["p10"], s["step_ms_stock"]["p90"]],
            "step_ms_tide_p10_p90": [s["step_ms_tide"]["p10"], s["step_ms_tide"]["p90"]],
            "peak_gib_stock": s["peak_memory_bytes_stock"] / gib,
            "peak_gib_tide": s["peak_memory_bytes_tide"] / gib,
            "groups_on_tide": len(s["groups_on_tide"]), "backend": s["backend"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--kind", required=True)
    args = parser.parse_args()
    summary = {"gpus": args.gpus, "kind": args.kind,
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
               "training": training(args.out),
               "collectives": load(os.path.join(args.out, "collectives.json")) or [],
               "landing": load(os.path.join(args.out, "landing.json")) or [],
               "faults": load(os.path.join(args.out, "faults.json")) or [],
               "splits": load(os.path.join(args.out, "splits.json")) or []}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)

    lines = [f"# {args.kind}, {summary['date']}", ""]
    t = summary["training"]
    lines += ["## Training (stock FSDP2, then TIDE; `python -m tide.demo`)", ""]
    if t:
        lines += ["| steps | loss max rel diff | step ms stock (p10, p90) | step ms TIDE (p10, p90) "
                  "| peak GiB stock | peak GiB TIDE |", "|---|---|---|---|---|---|",
                  f"| {t['steps']} | {t['loss_max_rel_diff']:.2e} | {t['step_ms_stock']:.1f} "
                  f"({t['step_ms_stock_p10_p90'][0]:.1f}, {t['step_ms_stock_p10_p90'][1]:.1f}) | "
                  f"{t['step_ms_tide']:.1f} ({t['step_ms_tide_p10_p90'][0]:.1f}, "
                  f"{t['step_ms_tide_p10_p90'][1]:.1f}) | {t['peak_gib_stock']:.2f} | "
                  f"{t['peak_gib_tide']:.2f} |", "", "Loss curves: `train/loss.png`.", ""]
    else:
        lines += ["Not run.", ""]
    lines += ["## Splits (`tide check-runtime`, bitwise against the CPU reference)", ""]
    if summary["splits"]:
        lines += ["| M x L | mode | passed | mismatches | exit |", "|---|---|---|---|---|"]
        lines += [f"| {r['M']}x{r['L']} | {r['mode']} | {r['passed']} | {r['mismatches']} | "
                  f"{r['exit']} |" for r in summary["splits"]]
    else:
        lines += ["Not run."]
    lines += ["", "## Faults", ""]
    if summary["faults"]:
        lines += ["| fault | every rank raised within the timeout | seconds | processes left |",
                  "|---|---|---|---|"]
        lines += [f"| {r['fault']} | {r['all_ranks_raised_within_timeout']} | {r['seconds']} | "
                  f"{r['processes_left']} |" for r in summary["faults"]]
    else:
        lines += ["Not run."]
    for part, what in (("collectives", "Collective benchmarks"), ("landing", "Landing direction")):
        if not summary[part]:
            lines += ["", f"## {what}", "", "Not measured in this run (no harness yet)."]
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
