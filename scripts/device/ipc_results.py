"""bench/results/ipc/ from scripts/device/ipc.sh runs: summary.json (the issue's fields) and
README.md (tables read at a glance).

    python3 scripts/device/ipc_results.py <files_at directory> [...] [--out bench/results/ipc]

Several runs (calls with different STEPS) merge in the order given: the machine row and the
date of the first, every call's command, and for a row that a later run repeats (an FSDP2
parity run of one world and mode, the demo, the sanitizer) the later one.
"""

from __future__ import annotations

import json
import shutil
import tarfile
import sys
from pathlib import Path


def load_rows(where: Path) -> list[dict]:
    return [json.loads(line) for line in (where / "rows.jsonl").read_text().splitlines() if line.strip()]


def latest_parity(rows: list[dict]) -> list[dict]:
    """The last FSDP2 parity row per (world, mode), in order of first appearance."""
    last: dict = {}
    for r in rows:
        if r["kind"] == "fsdp_parity":
            last[(r["world"], r["mode"])] = r
    return list(last.values())


def summarize(rows: list[dict], demo: dict | None) -> dict:
    machines = [r for r in rows if r["kind"] == "machine"]
    machine = machines[0] if machines else {}
    ends = [r for r in rows if r["kind"] == "end"]
    end = ends[-1] if ends else {}
    out = {
        "machine": machine.get("machine"),
        "date": machine.get("date"),
        "command": " ; ".join(m.get("command", "") for m in machines),
        "splits": [
            {k: r[k] for k in ("procs", "M", "L", "mode", "dtype", "path", "passed", "mismatches",
                               "replays", "calls", "seconds", "arena_bytes", "errors")}
            for r in rows if r["kind"] == "split"
        ],
        "faults": [
            {k: r[k] for k in ("fault", "procs", "all_ranks_raised_within_timeout", "seconds",
                               "left_behind", "ended_process", "errors") if k in r}
            | ({"cuda_device_max_connections": r["connections"]} if "connections" in r else {})
            for r in rows if r["kind"] == "fault"
        ],
        "fsdp_parity": [
            {k: r.get(k) for k in ("world", "mode", "cases", "failed", "passed", "seed")}
            | ({"error": r["error"][-600:]} if r.get("error") else {})
            for r in latest_parity(rows)
        ],
        "sanitizer": next(({k: r[k] for k in ("rc", "summary")} for r in reversed(rows)
                           if r["kind"] == "sanitizer"), None),
        "gpu_memory_used_mib": {"start": machine.get("gpu_used_mib_start"), "end": end.get("gpu_used_mib_end")},
        "tide_processes_left": end.get("tide_processes_left"),
    }
    if demo:
        peaks = lambda v: max(v) if isinstance(v, list) else v  # noqa: E731 (per rank or one)
        out["demo"] = {
            "procs": demo.get("world"),
            "steps": len(demo.get("steps", [])),
            "loss_max_diff": demo.get("max_loss_diff"),
            "peak_bytes_stock": peaks(demo.get("peak_memory_bytes_stock")),
            "peak_bytes_tide": peaks(demo.get("peak_memory_bytes_tide")),
            "arena_bytes": demo.get("arena_bytes_tide"),
            "groups_on_tide": demo.get("groups_on_tide"),
            "backend": demo.get("backend"),
            "note": "the GPU time-slices the processes: step times are not a speed claim",
        }
    return out


def table(rows: list[list], head: list[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def readme(s: dict) -> str:
    splits: dict = {}
    for r in s["splits"]:
        key = (r["procs"], r["M"], r["L"])
        splits.setdefault(key, []).append(r)
    split_rows = []
    for (procs, m, l), runs in sorted(splits.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        ok = sum(r["passed"] for r in runs)
        variants = ", ".join(f"{r['mode']}/{r['dtype']}/{r['path']}" for r in runs)
        split_rows.append([procs, f"{m} x {l}", f"{ok}/{len(runs)}", sum(r["replays"] or 0 for r in runs),
                           f"{max(r['seconds'] for r in runs):.1f}", variants])
    fault_rows = [[f["fault"], f["procs"], f.get("cuda_device_max_connections", "default"),
                   "yes" if f["all_ranks_raised_within_timeout"] else "NO",
                   f"{f['seconds']:.1f}" if f.get("seconds") is not None else "-",
                   f["left_behind"]["processes"],
                   f"{f['left_behind']['gpu_mib_before']} -> {f['left_behind']['gpu_mib_after']}",
                   (f["errors"][0] if f["errors"] else "")[:160].replace("|", "/")]
                  for f in s["faults"]]
    parity_rows = [[p["world"], p["mode"], p["cases"], "passed" if p["passed"] else f"FAILED: {p['failed']}", p["seed"]]
                   for p in s["fsdp_parity"]]
    parts = [
        "# The ipc backend with several processes on one GPU",
        "",
        f"Machine: {s['machine']}. Date: {s['date']}. Made by `{s['command']}`, then "
        "`python3 scripts/device/ipc_results.py <files>`; every row is in `summary.json`.",
        "",
        "Several processes share the one H200 (no MPS): the GPU time-slices their contexts, so the "
        "seconds below are wall times of correctness runs, not speed claims.",
        "",
        "## Splits: `tide check-runtime --backend ipc`, bitwise against the CPU reference",
        "",
        "Each split runs in-place and slot-reuse, with bf16 shards and with fp32 masters cast "
        "(`--cast`), over the ring (`--ring --staged-shards`) with fresh pointers every call; "
        "`replay` is the default path (calls replayed as CUDA graphs, re-pointed), `stream` sets "
        "`TIDE_NO_GRAPH_REPLAY=1`.",
        "",
        table(split_rows, ["procs", "M x L", "passed", "graph replays", "slowest s", "variants"]),
        "",
        "## Faults: every other rank raises within the timeout (5 s), nothing left behind",
        "",
        table(fault_rows, ["fault", "procs", "CUDA_DEVICE_MAX_CONNECTIONS", "all raised in time",
                           "s", "processes left", "GPU MiB used before -> after", "first line"]),
        "",
    ]
    if parity_rows:
        parts += ["## FSDP2 parity: stock on gloo (CUDA tensors) vs TIDE on ipc, one GPU", "",
                  table(parity_rows, ["world", "mode", "cases", "result", "seed"]), ""]
    if "demo" in s:
        d = s["demo"]
        parts += ["## The demo, 4 processes on one GPU", "",
                  table([[d["procs"], d["steps"], d["loss_max_diff"], d["peak_bytes_stock"],
                          d["peak_bytes_tide"], d["arena_bytes"], d["groups_on_tide"], d["backend"]]],
                        ["procs", "steps", "max loss diff", "peak bytes stock", "peak bytes TIDE",
                         "arena bytes", "groups on TIDE", "backend"]),
                  "", d["note"] + ".", ""]
    if s.get("sanitizer"):
        parts += ["## compute-sanitizer memcheck, 2 processes", "",
                  f"rc {s['sanitizer']['rc']}: {s['sanitizer']['summary']}", ""]
    parts += ["What this run did not cover, and what changed after it: `STATUS.md` beside this file.", ""]
    parts += [f"GPU memory used at start / end of the run: {s['gpu_memory_used_mib']['start']} / "
              f"{s['gpu_memory_used_mib']['end']} MiB; TIDE processes left: {s['tide_processes_left']}.", ""]
    return "\n".join(parts)


def sanitizer_summary(where: Path) -> str:
    """compute-sanitizer's ERROR SUMMARY lines from a run's logs ('' where none)."""
    if not (where / "logs.tgz").exists():
        return ""
    with tarfile.open(where / "logs.tgz") as tar:
        for name in ("logs/sanitizer.json", "logs/sanitizer.err"):
            try:
                text = tar.extractfile(name).read().decode(errors="replace")
            except (KeyError, AttributeError):
                continue
            lines = sorted({ln.strip() for ln in text.splitlines() if "ERROR SUMMARY" in ln})
            if lines:
                return "; ".join(lines)
    return ""


def main() -> None:
    args = sys.argv[1:]
    dest = Path("bench/results/ipc")
    if "--out" in args:
        at = args.index("--out")
        dest = Path(args[at + 1])
        del args[at : at + 2]
    runs = [Path(a) for a in args]
    if not runs:
        raise SystemExit(__doc__)
    dest.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    demo = None
    sanitized = ""
    for where in runs:
        rows += load_rows(where)
        if (where / "demo-summary.json").exists():
            demo = json.loads((where / "demo-summary.json").read_text())
        sanitized = sanitizer_summary(where) or sanitized
    s = summarize(rows, demo)
    if s.get("sanitizer") is not None and sanitized:
        # compute-sanitizer writes its report to the run's stdout (sanitizer.json) as well.
        s["sanitizer"]["summary"] = sanitized
    (dest / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    (dest / "README.md").write_text(readme(s))
    for old in dest.glob("device-*"):
        old.unlink()
    for n, where in enumerate(runs, 1):
        for name in ("summary.md", "rows.jsonl", "logs.tgz"):
            if (where / name).exists():
                shutil.copyfile(where / name, dest / f"device-{n}-{name}")
    print((dest / "README.md").read_text())


if __name__ == "__main__":
    main()
