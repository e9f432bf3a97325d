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
  - The one-GPU CUDA executor (bench/results/executor/bench.json): N virtual ranks on one
    GPU; predicted: the same program's makespan.

The 2 x H200 rows use the machine file below (MACHINE_X2, each value with its source): the
cost model's defaults describe the paper's network platform; on two GPUs of one host TIDE's
transfers between declared nodes are copy-engine copies over NVLink and there is no network
round. The FSDP2-copy rows use the defaults. Goal: every row within 15%; a row that misses
names the model term at fault (MISS_TERMS).

Writes bench/results/simulate/validation.md and validation.json. Run after scripts/build.sh:
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


def row(name, predicted, measured, source, term):
    ROWS.append({"name": name, "predicted_ms": round(predicted, 4), "measured_ms": round(measured, 4),
                 "error": round(predicted / measured - 1, 4), "source": source, "term": term})


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
            calls["copy_out"]["median_ms"], FSDP2, "sm_copy_2d_gbps")
        row(f"FSDP2 pack (_chunk_cat) {group} N={n}", rs["_chunk_cat"],
            calls["chunk_cat"]["median_ms"], FSDP2, "sm_stream_cap_gbps")
        # (fsdp2_copies' copy-in is the mixed-precision fp32 -> bf16 cast and copy, not the
        # bf16 copy-in the stock program models: no row.)


def x2_rows(cost, tmp):
    final, defaults = load(FINAL), load(DEFAULTS)
    for r in final["rows"]:
        coll, case, m, l = r["collective"], r["case"], r["nodes"], r["gpus_per_node"]
        op = "AG" if coll == "all-gather" else "RS"
        if l == 2:  # NCCL ran one flat communicator over NVLink whatever the declared split
            total, span, _ = stock_run(coll, case, 1, 2, cost, tmp)
            row(f"NCCL alone {op} {case} (2 GPUs)", span, r["nccl"]["median_ms"], FINAL,
                "nccl_link_gbps, nccl_launch_us" + (", nccl_fold_gbps" if op == "RS" else ""))
            stock = r["nccl_plus_copy" if op == "AG" else "pack_plus_nccl"]["median_ms"]
            row(f"stock C++ (NCCL + copies) {op} {case} (2 GPUs)", total, stock, FINAL,
                "NCCL terms + sm_copy_2d_gbps" if op == "AG" else
                "NCCL terms + sm_stream_cap_gbps")
        rs_args = []
        if op == "RS":
            rs_args = ["--sum-ctas", str(r["rs_sum_ctas"]), "--landing-ctas",
                       str(r["rs_landing_ctas"])]
        out = tide([coll, "--nodes", str(m), "--gpus-per-node", str(l), *rs_args,
                    *group_args(case, m * l)], cost)
        tuned = f" ({r['rs_sum_ctas']}/{r['rs_landing_ctas']} CTAs)" if op == "RS" else ""
        row(f"TIDE {op} {case} {m}x{l}{tuned}", out["predicted_ms"], r["tide"]["median_ms"], FINAL,
            "nvlink_gbps (copy engine)" if op == "AG" else
            "land_cta_gbps / land_cap_gbps, sum_cta_gbps")
    for r in defaults["rows"]:
        if r["collective"] != "reduce-scatter":
            continue
        case, m, l = r["case"], r["nodes"], r["gpus_per_node"]
        # This run predates the CTA fields in the JSON: the library's defaults (16 / 4).
        sum_ctas, landing_ctas = r.get("rs_sum_ctas", 16), r.get("rs_landing_ctas", 4)
        out = tide(["reduce-scatter", "--nodes", str(m), "--gpus-per-node", str(l),
                    "--sum-ctas", str(sum_ctas), "--landing-ctas", str(landing_ctas),
                    *group_args(case, m * l)], cost)
        row(f"TIDE RS {case} {m}x{l} (library defaults {sum_ctas}/{landing_ctas})",
            out["predicted_ms"], r["tide"]["median_ms"], DEFAULTS,
            "land_cta_gbps / land_cap_gbps, sum_cta_gbps")


def executor_rows():
    """The one-GPU CUDA executor: N virtual ranks' programs on one H200, wall time per call."""
    for r in load(EXECUTOR)["results"]:
        m, l = r["topology"].split("x")
        shapes = ",".join(f"{rows}x{cols}" for rows, cols in r["shapes"])
        coll = "all-gather" if r["collective"] == "AG" else "reduce-scatter"
        mode = ["--mode", r["collective"].split()[-1]] if coll == "reduce-scatter" else []
        out = tide([coll, "--nodes", m, "--gpus-per-node", l, "--shapes", shapes, *mode])
        row(f"CUDA executor, one GPU: {r['collective']} {r['topology']} P={r['params']}",
            out["predicted_ms"], r["wall_us_median"] / 1e3, EXECUTOR, "host_enqueue_us")


def main():
    machine = machine_x2()
    with tempfile.TemporaryDirectory() as tmp:
        cost = os.path.join(tmp, "h200x2.json")
        Path(cost).write_text(json.dumps({k: v for k, (v, _) in machine.items()}))
        fsdp2_rows(tmp)
        x2_rows(cost, tmp)
        executor_rows()
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
        "predicts, one row each, with the file it was measured in. Error = predicted / measured "
        f"- 1; goal: within {GOAL:.0%} on every row. **{within} of {len(ROWS)} rows** are within "
        "it; the rows outside are explained below by the model term at fault.",
        "",
        "Machine for the 2 x H200 rows (`--cost-model`; every other parameter is the default):",
        "",
        "| parameter | value | source |",
        "|---|---:|---|",
    ]
    lines += [f"| {k} | {v} | {s} |" for k, (v, s) in machine.items()]
    lines += ["", "| row | predicted ms | measured ms | error | term | source |",
              "|---|---:|---:|---:|---|---|"]
    for r in ROWS:
        flag = "" if abs(r["error"]) <= GOAL else " **miss**"
        lines.append(f"| {r['name']} | {r['predicted_ms']:.3f} | {r['measured_ms']:.3f} | "
                     f"{r['error']:+.1%}{flag} | {r['term']} | `{r['source']}` |")
    lines += ["", MISSES, ""]
    (out / "validation.md").write_text("\n".join(lines))
    print("\n".join(lines))


MISSES = """## Where rows miss, by model term

- **CUDA executor, one GPU** (all 12 rows, 97-100% under): the host term. The one-GPU
  executor's wall time is its enqueue (bench/results/executor: enqueue median = wall median
  within 1%): one host thread issues every virtual rank's ops, and a batched copy's enqueue
  grows with its descriptors (2 x 8 all-gather: 4,112 descriptors in 19.3 ms, about 4.7 us
  each). The model gives every rank its own host thread and charges `host_enqueue_us` (2 us)
  per op whatever its descriptors, which is right for one process per GPU (the NCCL rows: 2.7
  to 3.4 us per op for the flat cases) and wrong for N virtual ranks behind one thread. The
  GPU side of these runs is not measured apart from the enqueue, so they do not test the
  device terms.
- **TIDE on 2 x H200, small calls** (flat32m, flat128m: 0.2-1.7 ms measured, 12-50% under):
  a fixed cost per `CudaExecutor::run` that the model has no term for. The measured time is
  the slowest process's wall time of the whole call, from entering `run` to its closing
  synchronisation; the model starts both ranks at once and stops at the last op's
  completion. The gap is 60-250 us per call whatever its size (Llama layer: 0.15-0.18 ms of
  2.8 ms), so it only matters below about 1 ms.
- Every other row is within the goal. The NCCL terms (`nccl_link_gbps`, `nccl_launch_us`,
  `nccl_fold_gbps`) are fitted to the 8 NCCL-alone rows, and the 2 x H200 machine's landing
  and sum rates to the Llama layer of the knob sweep (a separate run): those rows check the
  fit, not an independent prediction. Independent of any fit: the stock C++ totals (NCCL
  plus copy kernels with rates from PyTorch's own ops on another machine), TIDE at 32/32
  CTAs on the main table, the other cases and the 2 x 1 split of the sweep's rates.
"""

if __name__ == "__main__":
    main()
