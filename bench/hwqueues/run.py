#!/usr/bin/env python3
"""Runs tide_hwqueues_bench (bench/hwqueues/hwqueues.cu) once per CUDA_DEVICE_MAX_CONNECTIONS
setting (the driver reads it when the context is created: one process each) and writes
results.json and README.md (a table) into --out (default bench/results/hwqueues).

    python3 bench/hwqueues/run.py --bin build/bench/hwqueues/tide_hwqueues_bench

The question (paper App. E): does a stream held by one of TIDE's device-side waits (the stream
path's cuStreamWaitValue64, or the graph path's spinning wait kernel) stall independent work
that a later stream enqueues? A probe "stalled" when its work completed only after the held
streams' gate opened (`--hold-ms` later)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile


def run_one(binary: str, connections: int, args) -> dict:
    env = dict(os.environ, CUDA_DEVICE_MAX_CONNECTIONS=str(connections))
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "r.json"
        cmd = [binary, "--json", str(out), "--trials", str(args.trials), "--hold-ms",
               str(args.hold_ms)]
        if args.held:
            cmd += ["--held", args.held]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} (connections {connections}) exited "
                             f"{proc.returncode}")
        result = json.loads(out.read_text())
    result["connections"] = connections
    return result


def first_stalling(rows: list[dict], wait: str, work: str) -> int | None:
    """The fewest held streams at which every trial's probe stalled (None: never)."""
    held = sorted({r["held"] for r in rows})
    for k in held:
        row = next(r for r in rows if r["held"] == k and r["wait"] == wait and r["work"] == work)
        if row["stalled"] == row["trials"]:
            return k
    return None


def table(results: list[dict]) -> str:
    by = {(res["connections"], r["held"], r["wait"], r["work"]): r
          for res in results for r in res["rows"]}
    conns = [res["connections"] for res in results]
    held = sorted({r["held"] for res in results for r in res["rows"]})
    combos = [(w, k) for w in ("memop", "kernel") for k in ("kernel", "copy")]
    head = "| held streams | " + " | ".join(
        f"{c} conn, {w} wait, {k} probe" for c in conns for w, k in combos) + " |"
    sep = "|" + " --- |" * (1 + len(conns) * len(combos))
    lines = [head, sep]
    for k in held:
        cells = []
        for c in conns:
            for w, p in combos:
                r = by.get((c, k, w, p))
                cells.append("" if r is None else
                             f"{r['stalled']}/{r['trials']} stalled, {r['median_us']:.0f} us")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/bench/hwqueues/tide_hwqueues_bench")
    ap.add_argument("--out", default="bench/results/hwqueues")
    ap.add_argument("--connections", default="8,32")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--hold-ms", type=float, default=20.0)
    ap.add_argument("--held", default="", help="held stream counts, e.g. 0,8,32 (default: the "
                    "binary's list)")
    ap.add_argument("--timeout", type=float, default=240.0)
    args = ap.parse_args()
    results = [run_one(args.bin, int(c), args) for c in args.connections.split(",")]
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "machine": socket.gethostname(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable.split("/")[-1]] + sys.argv),
        "device": results[0]["device"],
        "driver": results[0]["driver"],
        "hold_ms": args.hold_ms,
        "first_stalling": {
            str(res["connections"]): {f"{w} wait, {k} probe": first_stalling(res["rows"], w, k)
                                      for w in ("memop", "kernel") for k in ("kernel", "copy")}
            for res in results},
        "runs": results,
    }
    (out / "results.json").write_text(json.dumps(summary, indent=1) + "\n")
    stalls = "\n".join(
        f"- {c} connections: " + "; ".join(f"{name}: {'never' if k is None else f'from {k}'}"
                                            for name, k in v.items())
        for c, v in summary["first_stalling"].items())
    readme = f"""# Hardware queues: do TIDE's waits stall independent work? (paper App. E)

`{summary['command']}` on {summary['device']} (driver {summary['driver']}), {summary['date']}.

K streams each wait on a gate word in mapped host memory (TIDE's stream-path wait,
`cuStreamWaitValue64` GEQ, or its graph wait, a spinning 1-warp kernel), with a small kernel
queued behind each wait. A probe stream created after them then runs independent work (a
1-block kernel, or a 1 MiB device-to-device copy). The host opens the gate {args.hold_ms:g} ms
after the probe's enqueue. "stalled" counts trials whose probe completed only after the gate
opened; the latency is from the probe's enqueue to its completion as the host saw it (the hold
included where it stalled). One process per `CUDA_DEVICE_MAX_CONNECTIONS` setting.

The fewest held streams at which every probe stalled:
{stalls}

{table(results)}

Source: `bench/hwqueues/hwqueues.cu`; raw rows: `results.json`.
"""
    (out / "README.md").write_text(readme)
    print(f"wrote {out / 'results.json'} and {out / 'README.md'}")


if __name__ == "__main__":
    main()
