#!/usr/bin/env python3
"""Runs PyTorch's own FSDP2 test files, unmodified, on stock FSDP2 and with TIDE injected.

    python3 bench/fsdp2_upstream/run.py --tests DIR [--files a.py b.py] [-k EXPR]
        [--modes stock,tide] [--out DIR] [--test-timeout S] [--file-timeout S]

DIR holds test/distributed/_composable/fsdp/ of the PyTorch release installed (README.md
here says how to get it; nothing here downloads it). For each mode and file, pytest runs the
file with inject/ first on PYTHONPATH (its sitecustomize.py patches FSDP2 in every process,
the spawned ranks included: TIDE_UPSTREAM_MODE=tide calls tide.fsdp.enable(root) at each
root's first lazy init) and writes a JUnit XML; the ranks append their report rows to
records.jsonl. Then the summary: per file, passed/failed/skipped on each mode; per test, the
outcome on each mode and how many FSDP parameter groups TIDE served (backend "tide" with at
least one TIDE all-gather or reduce-scatter: the first iteration runs on stock FSDP2 while
TIDE traces, so a served group was served after it), written to OUT/summary.json and
OUT/summary.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_FILES = [
    "test_fully_shard_training.py",
    "test_fully_shard_mixed_precision.py",
    "test_fully_shard_state_dict.py",
    "test_fully_shard_frozen.py",
    "test_fully_shard_clip_grad_norm_.py",
    "test_fully_shard_extensions.py",
]

# Named selections (--set): each entry is one pytest run per mode of one file, with its own
# -k and --force-cpu (the files' world sizes differ: 8 for the training file's N-D classes, 4
# for the DTensor file's FSDP + TP cases; the spmd_types file runs in one process on a fake
# process group). Results: bench/results/fsdp2/upstream-spmd-2d-2026-12-07/.
SPMD_2D_K = ("test_2d_mlp_with_nd_mesh or test_3d_mlp_with_nd_mesh or test_train_parity_hsdp "
             "or test_shard_placement_fn_tp_ep")
SETS = {
    "default": [{"file": f} for f in DEFAULT_FILES],
    "spmd-2d": [
        # FSDP + TP ((pp, dp, tp) mesh), HSDP + TP ((dp_replicate, dp_shard, tp), _StridedShard),
        # HSDP, and FSDP + TP + EP with per-parameter mesh infos; 8 CPU processes
        {"file": "test_fully_shard_training.py", "k": SPMD_2D_K, "force_cpu": 8},
        # FSDP2's SPMD-mesh path (dp_mesh_dims=DataParallelMeshDims(...)): FSDP, HSDP, multi-dim
        # shard / replicate, FSDP + TP, HSDP + TP, replicate_with_fsdp; 4 CPU processes
        {"file": "test_fully_shard_dtensor.py", "force_cpu": 4},
        # spmd_types-annotated parameters on a 16-rank fake process group (one process)
        {"file": "test_fully_shard_spmd_types.py"},
    ],
}


def run_file(tests: Path, name: str, mode: str, out: Path, args) -> dict:
    """One pytest run of one file in one mode; returns its wall time and exit status."""
    mode_dir = out / mode
    mode_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE / "inject"), str(tests)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["TIDE_UPSTREAM_MODE"] = mode
    env["TIDE_UPSTREAM_OUT"] = str(mode_dir)
    env["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(args.test_timeout)
    env["TIDE_UPSTREAM_CPU_SHIM"] = "0" if args.no_cpu_shim else "1"
    env["TIDE_UPSTREAM_FORCE_CPU"] = str(args.force_cpu)
    env.setdefault("OMP_NUM_THREADS", "1")
    xml = mode_dir / (name.removesuffix(".py") + ".xml")
    cmd = [sys.executable, "-m", "pytest", str(tests / name), "-p", "no:cacheprovider",
           "-q", "-rfEs", f"--junitxml={xml}", "-o", "junit_logging=no"]
    if args.k:
        cmd += ["-k", args.k]
    log = mode_dir / (name.removesuffix(".py") + ".log")
    start = time.time()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=tests, env=env, stdout=f, stderr=subprocess.STDOUT,
                                timeout=args.file_timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "file timeout"
    return {"file": name, "mode": mode, "rc": rc, "wall_s": round(time.time() - start, 1),
            "cmd": " ".join(cmd)}


def junit_outcomes(xml: Path) -> dict:
    """{test id (module.Class.test): passed | failed | skipped (reason)}."""
    if not xml.exists():
        return {}
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        test = f"{case.get('classname')}.{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped: " + (child.get("message") or "")[:120]
        outcomes[test] = outcome
    return outcomes


def served(records: list) -> dict:
    """Per test: roots, groups and TIDE-served groups (counted on the rank that saw most),
    stock reasons and enable() errors."""
    by_test = collections.defaultdict(list)
    for r in records:
        by_test[r["test"]].append(r)
    out = {}
    for test, recs in by_test.items():
        best = None
        reasons, errors = collections.Counter(), set()
        for r in recs:
            groups = [g for root in r["roots"] for g in root["groups"]]
            n_served = sum(1 for g in groups if g.get("backend") == "tide"
                           and (g.get("all_gathers", 0) or g.get("reduce_scatters", 0)))
            row = {"roots": len(r["roots"]), "groups": len(groups), "served": n_served,
                   "tide_idle": sum(1 for g in groups if g.get("backend") == "tide") - n_served,
                   "stock_calls": sum(int(g.get("stock_calls", 0) or 0) for g in groups)}
            if best is None or (row["served"], row["groups"]) > (best["served"], best["groups"]):
                best = row
            for g in groups:
                if g.get("backend") != "tide" and g.get("reason"):
                    reasons[_short(g["reason"])] += 1
            for root in r["roots"]:
                if root.get("enable_error"):
                    errors.add(root["enable_error"][:300])
        best["ranks"] = len(recs)
        best["stock_reasons"] = dict(reasons.most_common(5))
        best["enable_errors"] = sorted(errors)
        out[test] = best
    return out


def _short(reason: str) -> str:
    reason = reason.split("; stock FSDP2")[0]
    while reason.startswith("rank "):
        reason = reason.split(": ", 1)[-1]
    return reason[:160]


def load_records(path: Path) -> list:
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return records


def summarize(out: Path, files: list, modes: list, runs: list) -> dict:
    outcomes = {m: {} for m in modes}
    for m in modes:
        for name in files:
            outcomes[m].update(junit_outcomes(out / m / (name.removesuffix(".py") + ".xml")))
    tide_modes = [m for m in modes if m.startswith("tide")]
    tide_mode = tide_modes[0] if tide_modes else ""
    served_by_mode = {m: served(load_records(out / m / "records.jsonl")) for m in tide_modes}
    tide_served = served_by_mode.get(tide_mode, {})
    stock_groups = served(load_records(out / "stock" / "records.jsonl")) if "stock" in modes else {}
    tests = sorted(set().union(*[set(o) for o in outcomes.values()]))
    per_test = []
    for t in tests:
        row = {"test": t}
        for m in modes:
            row[m] = outcomes[m].get(t, "not run")
        s = _match(tide_served, t)
        g = _match(stock_groups, t)
        row["groups"] = (s or g or {}).get("groups", 0)
        row["tide_served"] = (s or {}).get("served", 0)
        row["tide_detail"] = s or {}
        # groups served in every TIDE mode (tide-noring serves one-iteration tests too)
        row["served_by_mode"] = {m: (_match(served_by_mode[m], t) or {}).get("served", 0)
                                 for m in tide_modes}
        per_test.append(row)
    per_file = []
    for name in files:
        mod = name.removesuffix(".py")
        # a file that fails to import is one JUnit case named after the module
        rows = [r for r in per_test if r["test"].startswith(mod + ".") or r["test"] == "." + mod]
        counts = {m: collections.Counter(r[m].split(":")[0] for r in rows) for m in modes}
        per_file.append({"file": name, **{m: dict(counts[m]) for m in modes},
                         "tide_served_tests": sum(1 for r in rows if r["tide_served"] > 0)})
    summary = {"runs": runs, "per_file": per_file, "per_test": per_test}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "summary.md").write_text(markdown(summary, modes))
    return summary


def _match(table: dict, junit_id: str) -> dict | None:
    """JUnit ids are module.Class.test as pytest names them; the records use the class's
    __module__, the same for a file run from its folder."""
    if junit_id in table:
        return table[junit_id]
    tail = ".".join(junit_id.split(".")[-2:])
    hits = [v for k, v in table.items() if k.endswith(tail)]
    return hits[0] if hits else None


def markdown(summary: dict, modes: list) -> str:
    lines = ["| file | " + " | ".join(f"{m} pass/fail/skip" for m in modes)
             + " | tests TIDE served |", "|---|" + "---|" * len(modes) + "---|"]
    for f in summary["per_file"]:
        cells = [f"{f[m].get('passed', 0)}/{f[m].get('failed', 0)}/{f[m].get('skipped', 0)}"
                 for m in modes]
        lines.append(f"| {f['file']} | " + " | ".join(cells) + f" | {f['tide_served_tests']} |")
    tide_modes = [m for m in modes if m.startswith("tide")]
    lines += ["", "| test | " + " | ".join(modes) + " | groups | "
              + " | ".join(f"served ({m})" for m in tide_modes)
              + " | stock reasons / enable errors |",
              "|---|" + "---|" * len(modes) + "---|" + "---|" * len(tide_modes) + "---|"]
    for r in summary["per_test"]:
        t = r["tide_detail"]
        why = "; ".join([f"{k} (x{v})" for k, v in t.get("stock_reasons", {}).items()]
                        + t.get("enable_errors", []))
        lines.append(f"| {r['test']} | " + " | ".join(r[m].split(':')[0] for m in modes)
                     + f" | {r['groups']} | "
                     + "".join(f"{r.get('served_by_mode', {}).get(m, 0)} | " for m in tide_modes)
                     + f"{why} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tests", default=os.environ.get("TIDE_UPSTREAM_TESTS", ""),
                   help="folder with PyTorch's test/distributed/_composable/fsdp files")
    p.add_argument("--files", nargs="*", default=None,
                   help="test files (default: the files of --set)")
    p.add_argument("--set", default="default", choices=sorted(SETS),
                   help="a named selection of files, each with its own -k and --force-cpu "
                   "(spmd-2d: FSDP2's SPMD-mesh path and FSDP/HSDP + TP); --files, -k and "
                   "--force-cpu given explicitly apply to every file instead")
    p.add_argument("--modes", default="stock,tide",
                   help="stock, tide (enable(root)), tide-noring (enable(root, ring=False): "
                   "TIDE from the first call)")
    p.add_argument("-k", default=None, help="pytest -k expression")
    p.add_argument("--out", default="/tmp/tide-fsdp2-upstream")
    p.add_argument("--test-timeout", type=int, default=300,
                   help="seconds per test (torch's MultiProcessTestCase timeout)")
    p.add_argument("--file-timeout", type=int, default=3600, help="seconds per file and mode")
    p.add_argument("--no-cpu-shim", action="store_true",
                   help="leave FSDPTest's accelerator-count check alone (on CPU every "
                   "multi-process test then skips: inject/sitecustomize.py)")
    p.add_argument("--force-cpu", type=int, default=None, metavar="N",
                   help="also run tests marked for N or fewer accelerators on CPU, with N CPU "
                   "'devices' (skip_if_lt_x_gpu(x <= N) as if allow_cpu=True; "
                   "torch.cpu.device_count() and common_fsdp.DEVICE_COUNT = N; an FSDPTest "
                   "world size of 0 without an accelerator becomes N; "
                   "instantiate_device_type_tests(except_for=['cpu']) also instantiates CPU)")
    p.add_argument("--summary-only", action="store_true", help="summarize an earlier --out")
    args = p.parse_args()
    tests, out, modes = Path(args.tests), Path(args.out), args.modes.split(",")
    entries = ([{"file": f} for f in args.files] if args.files is not None
               else [dict(e) for e in SETS[args.set]])
    for e in entries:  # explicit options apply to every file
        if args.k is not None:
            e["k"] = args.k
        if args.force_cpu is not None:
            e["force_cpu"] = args.force_cpu
    files = [e["file"] for e in entries]
    if not args.summary_only and not (tests / files[0]).exists():
        print(f"no {files[0]} under --tests {tests!s}: see bench/fsdp2_upstream/README.md",
              file=sys.stderr)
        return 2
    runs = []
    if not args.summary_only:
        for e in entries:
            name = e["file"]
            if not (tests / name).exists():
                runs.append({"file": name, "rc": "missing"})
                continue
            file_args = argparse.Namespace(**{**vars(args), "k": e.get("k", ""),
                                              "force_cpu": e.get("force_cpu", 0)})
            for mode in modes:
                runs.append(run_file(tests, name, mode, out, file_args))
                print(json.dumps(runs[-1]), flush=True)
        (out / "runs.json").write_text(json.dumps(runs, indent=1))
    elif (out / "runs.json").exists():
        runs = json.loads((out / "runs.json").read_text())
    summary = summarize(out, files, modes, runs)
    print(markdown(summary, modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
