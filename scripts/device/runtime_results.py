#!/usr/bin/env python3
"""Writes bench/results/runtime/enqueue_h200.json from what scripts/device/runtime_enqueue.sh leaves in
$OUT: the GPU tests' log and the enqueue benchmark's raw JSON (the Llama-3.1-70B layer group
and, where run, a synthetic group of 30 parameters as tide_executor_bench builds it).

usage: runtime_results.py OUT_JSON --tests TESTS_LOG --machine TEXT --command TEXT
                          [--llama RAW_JSON] [--synthetic30 RAW_JSON] [--sanitize LOG] [--date ISO]
The *_8x8_p30 keys come from the synthetic 30-parameter run when there is one, else from the
Llama layer run (which has 9 parameters; `p30_source` says which). Fresh calls are the runner's
default path (re-pointed slot graphs after two visits of each event slot); the *_stream_* keys
are fresh calls with graphs off (every op enqueued), where the benchmark measured them."""
import argparse
import datetime
import json
import re


def stats(out, key, part):
    out[key] = part["median"]
    out[key + "_p10"] = part["p10"]
    out[key + "_p90"] = part["p90"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tests", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--llama")
    ap.add_argument("--synthetic30")
    ap.add_argument("--sanitize")
    ap.add_argument("--date")
    a = ap.parse_args()

    log = open(a.tests).read()
    ok = len(re.findall(r"^\[       OK \]", log, re.M))
    failed = len(re.findall(r"^\[  FAILED  \] .*\(\d+ ms\)", log, re.M))
    skipped = len(re.findall(r"^\[  SKIPPED \] .*\(\d+ ms\)", log, re.M))
    out = {
        "machine": a.machine,
        "date": a.date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": a.command,
        # True only when every GPU runtime test ran and passed on this run.
        "gpu_runtime_tests_passed": ok > 0 and failed == 0 and skipped == 0 and "TIMED OUT" not in log,
        "gpu_runtime_tests_ok": ok,
        "gpu_runtime_tests_failed": failed,
        "gpu_runtime_tests_skipped": skipped,
    }
    if a.sanitize:
        s = open(a.sanitize).read()
        m = re.findall(r"ERROR SUMMARY: (\d+) error", s)
        out["compute_sanitizer_errors"] = int(m[-1]) if m else None
    else:
        out["compute_sanitizer_errors"] = None  # not run
    raws = {}
    if a.llama:
        raws["llama3.1-70b layer"] = json.load(open(a.llama))
    if a.synthetic30:
        raws["synthetic P = 30"] = json.load(open(a.synthetic30))
    source = "synthetic P = 30" if "synthetic P = 30" in raws else "llama3.1-70b layer"
    raw = raws[source]
    out["p30_source"] = source + " (" + str(raw["params"]) + " parameters, rows divided by " + \
        str(raw["rows_divided_by"]) + ")"
    stats(out, "ag_enqueue_ms_per_rank_8x8_p30", raw["ag_fresh"])
    stats(out, "rs_enqueue_ms_per_rank_8x8_p30", raw["rs_fresh"])
    worst = max(("ag_replay", "rs_replay"), key=lambda p: raw[p]["median"])
    stats(out, "replay_enqueue_ms_per_rank_8x8_p30", raw[worst])
    out["replay_is_the_slower_of"] = worst
    stats(out, "ag_replay_enqueue_ms_per_rank_8x8_p30", raw["ag_replay"])
    stats(out, "rs_replay_enqueue_ms_per_rank_8x8_p30", raw["rs_replay"])
    for coll in ("ag", "rs"):
        if coll + "_stream" in raw:
            stats(out, coll + "_stream_enqueue_ms_per_rank_8x8_p30", raw[coll + "_stream"])
        if "enqueued_per_call" in raw[coll + "_fresh"]:
            out[coll + "_enqueued_per_call_8x8_p30"] = raw[coll + "_fresh"]["enqueued_per_call"]
    out["goals_ms_per_rank"] = {"fresh": 0.5, "replay": 0.05}
    out["runs"] = raws
    json.dump(out, open(a.out, "w"), indent=2)
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
