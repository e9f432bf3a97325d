#!/usr/bin/env python3
"""The simulator as a predictor: `tide simulate`'s cost model (NOTE [cost model]) against every
GPU measurement in bench/results/, one row per measured time.

Rows (the measured file is each row's `source`):
  - FSDP2's own layout copies on one H200 (bench/results/fsdp2/fsdp2_copies.json): copy-out
    (split_with_sizes_copy), packing (_chunk_cat) and copy-in of a Llama-3.1-70B and a
    Qwen3-30B-A3B layer at N = 8, 16, 64; predicted: the op's duration in
    `tide simulate all-gather|reduce-scatter --baseline` at 1 x 8, 2 x 8, 8 x 8.
  - NCCL alone on 2 x H200 (bench/results/nccl/run-2026-11-29-x2-final/bench.json, 1 x 2):
    all-gather and reduce-scatter of four cases; predicted: the span of the stock program's
    NCCL streams (from the kernel's start to its last ring step), slowest rank.
  - The stock C++ path (NCCL + FSDP2's copies) on 2 x H200, same file: predicted: the stock
    program's makespan.
  - TIDE over NCCL on 2 x H200, same file (32 sum / 32 landing CTAs) and the library's
    defaults (run-2026-11-29-x2/bench.json), both splits (1 x 2, 2 x 1); predicted:
    `tide simulate ... --json` predicted_ms.
  - The one-GPU CUDA executor (bench/results/executor/bench.json, one H200): N virtual ranks
    on one GPU; predicted: the same program on the H200 virtual-fabric machine
    (bench/results/simulate/virtual_fabric_h200.json, NOTE [virtual-fabric machine]).
  - tide_onenode_bench on one H100 (bench/results/onenode/h100-2026-12-07/onenode.json):
    predicted by tide_onenode_predict on the H100 virtual-fabric machine, which also rewrites
    bench/results/simulate/onenode_virtual_fabric.{json,md}.

The 2 x H200 rows use the machine file below (MACHINE_X2, each value with its source): the
cost model's defaults describe the paper's network platform; on two GPUs of one host TIDE's
transfers between declared nodes are copy-engine copies over NVLink and there is no network
round. The FSDP2-copy rows use the defaults. Goal: every row within 15%; a row that misses
names the model term at fault (MISS_TERMS).

Writes bench/results/simulate/validation.md and validation.json. Run after building the
targets tide and tide_onenode_predict:
    python3 bench/simulate/validation.py [path/to/tide]
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIDE = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build/src/cli/tide")
RESULTS = ROOT / "bench/results"
FINAL = "bench/results/nccl/run-2026-11-29-x2-final/bench.json"
DEFAULTS = "bench/results/nccl/run-2026-11-29-x2/bench.json"
PROBE = "bench/results/nccl/run-2026-11-29-x2/probe.json"
SWEEP = "bench/results/nccl/run-2026-11-29-x2-rs-sweep"
FSDP2 = "bench/results/fsdp2/fsdp2_copies.json"
EXECUTOR = "bench/results/executor/bench.json"
ONENODE = "bench/results/onenode/h100-2026-12-07/onenode.json"
VF_H100 = "bench/results/simulate/virtual_fabric_h100.json"
VF_H200 = "bench/results/simulate/virtual_fabric_h200.json"
ONENODE_PREDICT = str(ROOT / "build/bench/onenode/predict/tide_onenode_predict")
GOAL = 0.15


def load(rel):
    return json.loads((ROOT / rel).read_text())


def machine_x2():
    """Cost-model overrides for 2 x H200 over NVLink, each (value, source)."""
    probe = load(PROBE)["rates"]
    sweep = {name: load(f"{SWEEP}/rs-sweep-{name}.json") for name in ("default", "land32-sum32")}

    def landing_gbps(name):  # fp32 bytes a rank lands per second, Llama layer 1 x 2
        r = next(r for r in sweep[name]["rows"] if r["case"] == "llama3.1-70b"
                 and r["gpus_per_node"] == 2 and r["collective"] == "reduce-scatter")
        return r["shard_bytes_fp32"] / (r["tide_landing_ms"] * 1e6), r["rs_landing_ctas"]

    def sum_cta_gbps(name):  # Level 1 logical bytes per CTA, Llama layer 1 x 2 (L = 2):
        r = next(r for r in sweep[name]["rows"] if r["case"] == "llama3.1-70b"  # 2 bf16 reads
                 and r["gpus_per_node"] == 2 and r["collective"] == "reduce-scatter")
        elems = r["shard_bytes_fp32"] / 4  # + 1 fp32 write per output element
        return elems * (2 * 2 + 4) / (r["tide_sum_ms"] * 1e6) / r["rs_sum_ctas"], r["rs_sum_ctas"]

    land4, ctas4 = landing_gbps("default")
    sum16, ctas16 = sum_cta_gbps("default")
    land32, _ = landing_gbps("land32-sum32")
    push = probe["push to next rank's window"]["GB_per_s"]
    local = probe["local device to device"]["GB_per_s"]
    return {
        "nvlink_gbps": (round(push), f"{PROBE}: copy-engine push to the peer, both GPUs at once"),
        "nic_gbps": (round(push), "transfers between the declared nodes of 2 x 1 are copy-engine "
                                  f"pushes over NVLink (LSA peers): {PROBE} push"),
        "rail_latency_us": (2.0, "a copy-engine copy's start (copy_launch_us), not an RDMA write"),
        "round_wait_us": (0.0, "no network round: a round's wait is a stream memop on NVLink"),
        "ce_copy_gbps": (round(local), f"{PROBE}: local device to device"),
        "sum_cta_gbps": (round(sum16, 1), f"{SWEEP}/rs-sweep-default.json: Llama layer 1 x 2 "
                                           f"Level 1 sum at {ctas16} CTAs, per CTA"),
        "land_cta_gbps": (round(land4 / ctas4, 1),
                          f"{SWEEP}/rs-sweep-default.json: Llama layer 1 x 2 landing at "
                          f"{ctas4} CTAs, per CTA"),
        "land_cap_gbps": (round(land32), f"{SWEEP}/rs-sweep-land32-sum32.json: Llama layer "
                                          "1 x 2 landing at 32 CTAs"),
    }


def tide(args, cost=None, trace=None):
    cmd = [TIDE, "simulate", *args, "--timing-only", "--json", "--jitter", "0"]
    if cost:
        cmd += ["--cost-model", cost]
    if trace:
        cmd += ["--trace", trace]
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def group_args(case, n):
    """`tide simulate` arguments of a bench case at world size n."""
    if case == "flat32m":
        return ["--shapes", f"{n * 4096}x4096"]
    if case == "flat128m":
        return ["--shapes", f"{n * 16384}x4096"]
    return ["--model", case]


def trace_ops(path):
    """(rank, stream name, label, kind, start_us, end_us) of every op in a Chrome trace."""
    doc = json.loads(Path(path).read_text())
    names = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    return [(e["pid"], names.get((e["pid"], e["tid"]), ""), e["name"], e["cat"], e["ts"],
             e["ts"] + e["dur"]) for e in doc["traceEvents"] if e.get("ph") == "X"]


def stock_run(collective, case, nodes, gpus, cost, tmp):
    """The stock program: (makespan ms, NCCL span ms, {label suffix: max duration ms})."""
    trace = os.path.join(tmp, "trace.json")
    out = tide([collective, "--nodes", str(nodes), "--gpus-per-node", str(gpus), "--baseline",
                *group_args(case, nodes * gpus)], cost, trace)
    ops = trace_ops(trace)
    # NCCL alone: from the moment its input is ready (the copy-in's or the pack's event) to
    # its last ring step, per rank.
    ready, last = {}, {}
    for rank, stream, label, kind, start, end in ops:
        if kind == "event-record" and label.endswith((" copied in", " packed")):
            ready[rank] = end
        if stream.startswith("nccl"):
            last[rank] = max(last.get(rank, end), end)
    span = max(last[r] - ready[r] for r in last) / 1e3
    durations = {}
    for _, _, label, _, start, end in ops:
        key = label.rsplit(" ", 1)[-1]
        durations[key] = max(durations.get(key, 0.0), (end - start) / 1e3)
    return out["predicted_ms"], span, durations


ROWS = []


def row(name, predicted, measured, source, term, machine, note=""):
    ROWS.append({"name": name, "machine": machine, "predicted_ms": round(predicted, 4),
                 "measured_ms": round(measured, 4), "error": round(predicted / measured - 1, 4),
                 "source": source, "term": term, "note": note})


def fsdp2_rows(tmp):
    data = load(FSDP2)
    topo = {8: (1, 8), 16: (2, 8), 64: (8, 8)}
    for r in data["results"]:
        group = r["group"].split(":")[0]
        n = r["n"]
        m, l = topo[n]
        _, _, ag = stock_run("all-gather", group, m, l, None, tmp)
        _, _, rs = stock_run("reduce-scatter", group, m, l, None, tmp)
        calls = r["calls"]
        row(f"FSDP2 copy-out {group} N={n}", ag["split_with_sizes_copy"],
            calls["copy_out"]["median_ms"], FSDP2, "sm_copy_2d_gbps", FSDP2_MACHINE)
        row(f"FSDP2 pack (_chunk_cat) {group} N={n}", rs["_chunk_cat"],
            calls["chunk_cat"]["median_ms"], FSDP2, "sm_stream_cap_gbps", FSDP2_MACHINE)
        # (fsdp2_copies' copy-in is the mixed-precision fp32 -> bf16 cast and copy, not the
        # bf16 copy-in the stock program models: no row.)


# Both 2 x H200 runs are of 2026-11-29, before the one-node layout (2026-12-05) became the
# default at M = 1: their 1 x 2 rows ran the multi-node layout, so that is what is predicted.
OLD_LAYOUT = ["--multi-node-layout"]
X2 = "2 x H200 per GPU (machine_x2)"
FSDP2_MACHINE = "one H200 per GPU (defaults)"


def x2_rows(cost, tmp):
    final, defaults = load(FINAL), load(DEFAULTS)
    for r in final["rows"]:
        coll, case, m, l = r["collective"], r["case"], r["nodes"], r["gpus_per_node"]
        op = "AG" if coll == "all-gather" else "RS"
        if l == 2:  # NCCL ran one flat communicator over NVLink whatever the declared split
            total, span, _ = stock_run(coll, case, 1, 2, cost, tmp)
            row(f"NCCL alone {op} {case} (2 GPUs)", span, r["nccl"]["median_ms"], FINAL,
                "nccl_link_gbps, nccl_launch_us" + (", nccl_fold_gbps" if op == "RS" else ""), X2)
            stock = r["nccl_plus_copy" if op == "AG" else "pack_plus_nccl"]["median_ms"]
            row(f"stock C++ (NCCL + copies) {op} {case} (2 GPUs)", total, stock, FINAL,
                "NCCL terms + sm_copy_2d_gbps" if op == "AG" else
                "NCCL terms + sm_stream_cap_gbps", X2)
        rs_args = []
        if op == "RS":
            rs_args = ["--sum-ctas", str(r["rs_sum_ctas"]), "--landing-ctas",
                       str(r["rs_landing_ctas"])]
        out = tide([coll, "--nodes", str(m), "--gpus-per-node", str(l), *rs_args,
                    *OLD_LAYOUT, *group_args(case, m * l)], cost)
        tuned = f" ({r['rs_sum_ctas']}/{r['rs_landing_ctas']} CTAs)" if op == "RS" else ""
        row(f"TIDE {op} {case} {m}x{l}{tuned}", out["predicted_ms"], r["tide"]["median_ms"], FINAL,
            "nvlink_gbps (copy engine)" if op == "AG" else
            "land_cta_gbps / land_cap_gbps, sum_cta_gbps", X2,
            ("multi-node layout; " if m == 1 else "") +
            f"host wall of CudaExecutor::run, enqueue {r['tide_enqueue_ms'] * 1e3:.0f} us")
    for r in defaults["rows"]:
        if r["collective"] != "reduce-scatter":
            continue
        case, m, l = r["case"], r["nodes"], r["gpus_per_node"]
        # This run predates the CTA fields in the JSON: the library's defaults (16 / 4).
        sum_ctas, landing_ctas = r.get("rs_sum_ctas", 16), r.get("rs_landing_ctas", 4)
        out = tide(["reduce-scatter", "--nodes", str(m), "--gpus-per-node", str(l),
                    "--sum-ctas", str(sum_ctas), "--landing-ctas", str(landing_ctas),
                    *OLD_LAYOUT, *group_args(case, m * l)], cost)
        row(f"TIDE RS {case} {m}x{l} (library defaults {sum_ctas}/{landing_ctas})",
            out["predicted_ms"], r["tide"]["median_ms"], DEFAULTS,
            "land_cta_gbps / land_cap_gbps, sum_cta_gbps", X2, "multi-node layout" if m == 1 else "")


def executor_rows():
    """The one-GPU CUDA executor: N virtual ranks' programs on one H200 (the file's "device"),
    wall time per call, against the same program on the H200 virtual-fabric machine (NOTE
    [virtual-fabric machine]): one host thread issues every rank's ops and copy descriptors,
    and the ranks share one GPU's HBM, copy engines and SMs."""
    bench = load(EXECUTOR)
    assert bench["device"] == "NVIDIA H200", bench["device"]  # the machine file's GPU
    for r in bench["results"]:
        if r["collective"] not in ("AG", "RS in-place", "RS slot-reuse"):
            continue  # (later runs add 'AG fp8'; not in this file)
        m, l = r["topology"].split("x")
        shapes = ",".join(f"{rows}x{cols}" for rows, cols in r["shapes"])
        coll = "all-gather" if r["collective"] == "AG" else "reduce-scatter"
        mode = ["--mode", r["collective"].split()[-1]] if coll == "reduce-scatter" else []
        out = tide([coll, "--nodes", m, "--gpus-per-node", l, "--shapes", shapes, *mode],
                   VF_H200)
        assert out["machine"] == "virtual-fabric", out
        same = "same op count" if out["ops"] == r["ops"] else \
            f"ops: bench {r['ops']}, simulated {out['ops']}"
        row(f"CUDA executor, one GPU: {r['collective']} {r['topology']} P={r['params']}",
            out["predicted_ms"], r["wall_us_median"] / 1e3, EXECUTOR,
            "host_enqueue_us per op and per copy descriptor (one host thread)",
            machine="virtual-fabric H200 (virtual_fabric_h200.json)", note=same)


def onenode_rows():
    """tide_onenode_bench on one H100 (2026-12-07) against the same programs on the H100
    virtual-fabric machine: tide_onenode_predict, which also rewrites its own table."""
    subprocess.run([ONENODE_PREDICT, "--machine", VF_H100, "--measured", ONENODE,
                    "--json", str(RESULTS / "simulate/onenode_virtual_fabric.json"),
                    "--md", str(RESULTS / "simulate/onenode_virtual_fabric.md")],
                   check=True, capture_output=True, cwd=ROOT)
    for r in load("bench/results/simulate/onenode_virtual_fabric.json")["rows"]:
        acc = "accumulate" if r["accumulate"] else "no accumulate"
        row(f"one-node {r['layer']} {r['split']} {r['program']}, {acc}", r["predicted_ms"],
            r["measured_ms"]["median"], ONENODE, "see onenode_virtual_fabric.md",
            machine="virtual-fabric H100 (virtual_fabric_h100.json)")


def reason(r):
    """Why a row misses the goal, from what the row and its measurement say (empty: within)."""
    if abs(r["error"]) <= GOAL:
        return ""
    gap_us = (r["measured_ms"] - r["predicted_ms"]) * 1e3
    name = r["name"]
    if name.startswith("TIDE ") and ("flat32m" in name or "flat128m" in name):
        return (f"fixed per-call cost: {gap_us:.0f} us missing. The measurement is the slowest "
                "process's host wall time of CudaExecutor::run (enqueue included, measured in "
                "the same row), the NCCL and stock rows are CUDA events; the model has no term "
                "for run's closing synchronisation and the two processes' start skew. The same "
                "gap is 150-180 us on the Llama and Qwen AG rows, which stay within because "
                "they last 2-3 ms. Not fitted: no measurement of that cost apart exists")
    if name.startswith("TIDE RS"):
        return (f"{gap_us:.0f} us under, not a fixed cost: the 1 x 2 multi-node layout at 32/32 "
                "CTAs sums and lands with machine_x2's per-CTA rates from the Llama layer's "
                "16/4-CTA sweep; per-CTA rates at 32 CTAs are lower (bench/results/kernels: "
                "82 -> 78 GB/s per CTA for the sum from 16 to 32 CTAs, more for the landing)")
    if name.startswith("CUDA executor"):
        return ("host time per op grows with the program: the 11-29 executor's host-replayed "
                "enqueue order (one thread for 64 ranks) costs more per op at 8 x 8, P = 30 "
                "than the machine's constant host_enqueue_us per op and per descriptor "
                "(calibration_h200.json, 3.83 us); the device terms do not enter (enqueue = "
                "wall within 1%, bench/results/executor)")
    if name.startswith("one-node llama3.1-8b 1x8"):
        return ("0.84-0.85: the 1 x 8 fixed ~10.9 ms seen whatever the program (bimodal between "
                "runs, bench/results/onenode/h100-2026-12-07); the pull program's Level 1 "
                "sums under concurrency (below)")
    if name.startswith("one-node llama3.1-70b"):
        why = ("concurrent Level 1 sums: the model runs N ranks' 16-CTA sums at the single-"
               "kernel per-CTA rate in parallel, capped only by HBM; measured aggregate HBM is "
               "1.2-1.7 TB/s, not 3.0 (or the driver serialises more than one queue per "
               "stream; CUDA_DEVICE_MAX_CONNECTIONS=32 run decides, README)")
        if "1x8" in name and "no accumulate" in name:
            why += ("; and the bf16 L = 8 no-accumulate sum is another kernel (kDeepDirectWarps, "
                    "4 deep) whose rate the fp32 table does not give: the 43.6 ms anomaly")
        return why
    return "unexplained"


def main():
    machine = machine_x2()
    with tempfile.TemporaryDirectory() as tmp:
        cost = os.path.join(tmp, "h200x2.json")
        Path(cost).write_text(json.dumps({k: v for k, (v, _) in machine.items()}))
        fsdp2_rows(tmp)
        x2_rows(cost, tmp)
        executor_rows()
        onenode_rows()
    for r in ROWS:
        r["reason"] = reason(r)
    within = sum(abs(r["error"]) <= GOAL for r in ROWS)
    doc = {"what": "tide simulate's cost model against GPU measurements (bench/simulate/"
                   "validation.py)", "date": str(datetime.date.today()), "goal": GOAL,
           "within_goal": within, "machine_x2": {k: {"value": v, "source": s}
                                                  for k, (v, s) in machine.items()},
           "rows": ROWS}
    out = RESULTS / "simulate"
    (out / "validation.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [
        "# The simulator as a predictor: predicted vs measured",
        "",
        f"Made by `python3 bench/simulate/validation.py` on {doc['date']}: every GPU time in "
        "bench/results/ that the cost model (NOTE [cost model], include/tide/exec/cost_model.hpp) "
        "predicts, one row each, with the file it was measured in, against a prediction of the "
        "same machine and the same program: 2 x H200 rows on the per-GPU model with machine_x2 "
        "(below), the one-GPU executor rows on the H200 virtual-fabric machine "
        "(`virtual_fabric_h200.json`), the one-node rows on the H100 virtual-fabric machine "
        "(`virtual_fabric_h100.json`; NOTE [virtual-fabric machine], docs/reference_executor.md). "
        f"Error = predicted / measured - 1; goal: within {GOAL:.0%} on every row. "
        f"**{within} of {len(ROWS)} rows** are within it; every row outside gives its reason "
        "in its last column.",
        "",
        "Machine for the 2 x H200 rows (`--cost-model`; every other parameter is the default):",
        "",
        "| parameter | value | source |",
        "|---|---:|---|",
    ]
    lines += [f"| {k} | {v} | {s} |" for k, (v, s) in machine.items()]
    lines += ["", "| row | machine | predicted ms | measured ms | error | term | source | note "
              "/ why it misses |", "|---|---|---:|---:|---:|---|---|---|"]
    for r in ROWS:
        flag = "" if abs(r["error"]) <= GOAL else " **miss**"
        why = "; ".join(x for x in (r["note"], r["reason"]) if x)
        lines.append(f"| {r['name']} | {r['machine']} | {r['predicted_ms']:.3f} | "
                     f"{r['measured_ms']:.3f} | {r['error']:+.1%}{flag} | {r['term']} | "
                     f"`{r['source']}` | {why} |")
    lines += ["", MISSES, ""]
    (out / "validation.md").write_text("\n".join(lines))
    print("\n".join(lines))


MISSES = """## What is fitted, what is not

- Nothing is fitted to a row. The NCCL terms (`nccl_link_gbps`, `nccl_launch_us`,
  `nccl_fold_gbps`) were set from the 8 NCCL-alone rows (2026-12-01), so those rows check
  that setting, not an independent prediction; machine_x2's landing and sum rates come from
  the Llama layer of the knob sweep (a separate run). The virtual-fabric machines name a
  source per value (their "sources" objects).
- The NCCL-alone and stock rows are all within the goal: the small-message misses of the
  2026-12-01 table were TIDE's own calls on 2 x H200 (its CUDA executor over NVLink), not
  NCCL; their cause is in their rows (a per-call host cost the model lacks).
- The 2 x H200 runs are of 2026-11-29: their 1 x 2 rows ran the multi-node layout, so it is
  predicted with `--multi-node-layout` (the one-node layout is the default since 2026-12-05).
- The executor bench (H200, 2026-11-29) ran that day's programs: its RS rows had 4-16% fewer
  ops than today's builder makes (the row's note); AG rows have the same op count. A rerun
  (`bash scripts/device/executor.sh` on an H200) makes them exactly like for like.
"""

if __name__ == "__main__":
    main()
