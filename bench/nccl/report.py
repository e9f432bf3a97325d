#!/usr/bin/env python3
"""Tables and a chart of TIDE over NCCL against stock FSDP2 on the GPUs of one host.

Reads what scripts/device/nccl.sh and scripts/device/nccl_rs_sweep.sh wrote (tide-nccl bench
JSON, the PyTorch baseline JSON of bench/nccl/fsdp2_nccl_baseline.py, tide-nccl probe JSON)
and writes bench/results/nccl/README.md and bench/results/nccl/speedup.svg:

    python3 bench/nccl/report.py            # from the committed run directories

Every time is the median over repeats of the slowest rank (see each producer's header).
"""
import argparse
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "nccl"
TORCH_CASE = {"flat32m": "flat32m", "flat128m": "flat128m", "llama3.1-70b": "llama70b_layer",
              "qwen3-30b-a3b": "qwen3_30b_a3b_layer"}


def load(path):
    return json.loads(pathlib.Path(path).read_text())


def torch_ops(baseline):
    return {c["case"]: c["ops"] for c in baseline["cases"]}


def mib(b):
    return f"{b / 2**20:,.0f} MiB" if b < 2**30 else f"{b / 2**30:.2f} GiB"


def rows_by(bench):
    out = {}
    for r in bench["rows"]:
        out[(r["case"], r["nodes"], r["gpus_per_node"], r["collective"])] = r
    return out


# A PyTorch pack (`_chunk_cat`) slower than this ran with host time inside its event timing
# (NOTE [host enqueue inside event timing] in bench/nccl/fsdp2_nccl_baseline.py): the same op
# on one H200 runs at 2.09 TB/s (bench/results/fsdp2/), and these runs used a fixed ~1 ms spin.
SUSPECT_PACK_GBPS = 1500.0


def pack_suspect(ops):
    pack = ops.get("rs_pack")
    return pack is not None and pack["algbw_GBps"] < SUSPECT_PACK_GBPS


def main_table(bench, torch, defaults=None):
    """Rows of TIDE against the stock paths; with `defaults` (the same bench with the
    library's default CTA budgets) its TIDE time and ratio sit beside the tuned ones."""
    head = "| case | M x L | op | TIDE ms |"
    rule = "|---|---|---|---:|"
    if defaults:
        head += " TIDE ms, library defaults |"
        rule += "---:|"
    head += (" NCCL alone ms | stock C++ (NCCL + copies) ms | stock PyTorch (NCCL + copies) ms |"
             " TIDE vs stock C++ |")
    rule += "---:|---:|---:|---:|"
    if defaults:
        head += " defaults vs stock C++ |"
        rule += "---:|"
    head += " TIDE vs NCCL alone | TIDE algbw GB/s | check |"
    rule += "---:|---:|---|"
    lines, chart = [head, rule], []
    by_key = rows_by(defaults) if defaults else {}
    for r in bench["rows"]:
        ag = r["collective"] == "all-gather"
        t = r["tide"]["median_ms"]
        stock_cpp = r["nccl_plus_copy" if ag else "pack_plus_nccl"]["median_ms"]
        nccl = r["nccl"]["median_ms"]
        ops = torch.get(TORCH_CASE[r["case"]], {})
        total = ops.get("ag_total" if ag else "rs_total", {}).get("median_ms")
        mark = " (!)" if total and not ag and pack_suspect(ops) else ""
        torch_text = f"{total:.3f}{mark}" if total else "-"
        label = f'{r["case"]} {r["nodes"]}x{r["gpus_per_node"]} {"AG" if ag else "RS"}'
        chart.append((label, stock_cpp / t))
        check = "bitwise" if r["check"].startswith("bitwise") else (
            "FAILED" if r["check"].startswith("FAILED") else "1e-5 (see JSON)")
        if "bitwise here" in r["check"]:
            check = "bitwise"
        cells = [r["case"], f'{r["nodes"]} x {r["gpus_per_node"]}', "AG" if ag else "RS",
                 f"{t:.3f}"]
        d = by_key.get((r["case"], r["nodes"], r["gpus_per_node"], r["collective"]))
        if defaults:
            cells.append(f'{d["tide"]["median_ms"]:.3f}' if d else "-")
        cells += [f"{nccl:.3f}", f"{stock_cpp:.3f}", torch_text, f"{stock_cpp / t:.2f}x"]
        if defaults:
            cells.append(f'{stock_cpp / d["tide"]["median_ms"]:.2f}x' if d else "-")
        cells += [f"{nccl / t:.2f}x", f'{r["tide"]["algbw_GBps"]:.0f}', check]
        lines.append("| " + " | ".join(cells) + " |")
    return lines, chart


def memory_table(bench):
    lines = ["| case | M x L | op | TIDE window per GPU | stock flat buffer per GPU | "
             "TIDE-RS SM time (CTA-ms) | enqueue ms |", "|---|---|---|---:|---:|---:|---:|"]
    for r in bench["rows"]:
        ag = r["collective"] == "all-gather"
        sm = "-" if ag else f'{r["tide_sm_cta_ms"]:.1f}'
        lines.append(f'| {r["case"]} | {r["nodes"]} x {r["gpus_per_node"]} | '
                     f'{"AG" if ag else "RS"} | {mib(r["tide_window_bytes"])} | '
                     f'{mib(r["stock_buffer_bytes"])} | {sm} | {r.get("tide_enqueue_ms", 0):.3f} |')
    return lines


def sweep_table(sweeps):
    lines = ["| configuration | case | M x L | TIDE-RS ms | sum ms | landing ms | SM CTA-ms | "
             "enqueue ms | stock C++ ms |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, bench in sweeps:
        for r in bench["rows"]:
            lines.append(f'| {name} | {r["case"]} | {r["nodes"]} x {r["gpus_per_node"]} | '
                         f'{r["tide"]["median_ms"]:.3f} | {r["tide_sum_ms"]:.3f} | '
                         f'{r["tide_landing_ms"]:.3f} | {r["tide_sm_cta_ms"]:.1f} | '
                         f'{r["tide_enqueue_ms"]:.3f} | {r["pack_plus_nccl"]["median_ms"]:.3f} |')
    return lines


def messages_table(messages, direct):
    base = rows_by(direct)
    lines = ["| case | M x L | op | TIDE, messages ms | TIDE, copy engine + LSA ms | "
             "stock C++ ms | check |", "|---|---|---|---:|---:|---:|---|"]
    for r in messages["rows"]:
        ag = r["collective"] == "all-gather"
        d = base.get((r["case"], r["nodes"], r["gpus_per_node"], r["collective"]))
        lines.append(f'| {r["case"]} | {r["nodes"]} x {r["gpus_per_node"]} | '
                     f'{"AG" if ag else "RS"} | {r["tide"]["median_ms"]:.3f} | '
                     f'{d["tide"]["median_ms"]:.3f} | '
                     f'{r["nccl_plus_copy" if ag else "pack_plus_nccl"]["median_ms"]:.3f} | '
                     f'{"FAILED" if r["check"].startswith("FAILED") else "equal"} |')
    return lines


def svg_chart(chart, path):
    w, bar, gap, left = 760, 18, 6, 230
    h = 40 + len(chart) * (bar + gap) + 30
    top = max(2.0, max(v for _, v in chart) * 1.1)
    x = lambda v: left + (w - left - 20) * v / top
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="20">TIDE (32/32 CTAs) vs stock C++ (NCCL + FSDP2 layout '
           'copies), 2 x H200, time ratio</text>']
    for k in range(0, int(top) + 1):
        out.append(f'<line x1="{x(k):.1f}" y1="30" x2="{x(k):.1f}" y2="{h - 25}" stroke="#ddd"/>')
        out.append(f'<text x="{x(k):.1f}" y="{h - 10}" text-anchor="middle">{k}x</text>')
    for i, (label, v) in enumerate(chart):
        y = 34 + i * (bar + gap)
        color = "#2a7" if v >= 1 else "#d64"
        out.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{label}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{x(v) - left:.1f}" height="{bar}" '
                   f'fill="{color}"/>')
        out.append(f'<text x="{x(v) + 4:.1f}" y="{y + 13}">{v:.2f}x</text>')
    out.append(f'<line x1="{x(1):.1f}" y1="30" x2="{x(1):.1f}" y2="{h - 25}" stroke="#333"/>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--final", default=RESULTS / "run-2026-11-29-x2-final" / "bench.json")
    ap.add_argument("--default-knobs", default=RESULTS / "run-2026-11-29-x2" / "bench.json")
    ap.add_argument("--torch", default=RESULTS / "run-2026-11-29-x2" / "fsdp2_nccl_baseline.json")
    ap.add_argument("--probe", default=RESULTS / "run-2026-11-29-x2" / "probe.json")
    ap.add_argument("--messages",
                    default=RESULTS / "run-2026-11-29-x2-messages" / "bench-messages.json")
    ap.add_argument("--sweep-dir", default=RESULTS / "run-2026-11-29-x2-rs-sweep")
    ap.add_argument("--out", default=RESULTS / "README.md")
    args = ap.parse_args()

    final, default, torch = load(args.final), load(args.default_knobs), load(args.torch)
    probe, messages = load(args.probe), load(args.messages)
    sweeps = [(p.stem.replace("rs-sweep-", ""), load(p))
              for p in sorted(pathlib.Path(args.sweep_dir).glob("rs-sweep-*.json"))]
    main_lines, chart = main_table(final, torch_ops(torch), default)
    default_lines, _ = main_table(default, torch_ops(torch))
    rates = probe["rates"]
    env = torch["env"]
    text = f"""# TIDE over NCCL on the GPUs of one host

Made by `python3 bench/nccl/report.py` from the run directories beside this file. Machine:
`nvidia-h200-x2` (2 x H200, NV18 NVLink, driver 580.159.04, NCCL 2.28.3 for TIDE, PyTorch
{env.get("torch", "2.11")} with its NCCL for the PyTorch baseline). One process per GPU. Every time
is the median over repeats (20 for the main table) of the slowest rank; TIDE's time is
`CudaExecutor::run`'s wall time (host enqueue included), the stock times are CUDA events.
M x L is the declared split of the 2 GPUs: 1 x 2 is one node of two GPUs, 2 x 1 two virtual
nodes of one GPU (TIDE's multi-node algorithm over NVLink). Commands:

    # device: run(kind="nvidia-h200-x2", command="bash scripts/device/nccl.sh", carry=[".deps"])
    BENCH_ARGS="--rs-landing-ctas 32 --rs-sum-ctas 32" STEPS="build check faults bench" bash scripts/device/nccl.sh
    torchrun --standalone --nproc-per-node 2 bench/nccl/fsdp2_nccl_baseline.py --out DIR
    bash scripts/device/nccl_rs_sweep.sh

Ceilings (`tide-nccl probe`, 1 GiB, both GPUs at once): copy engine push to the peer
{rates["push to next rank's window"]["GB_per_s"]:.0f} GB/s, pull {rates["pull from next rank's window"]["GB_per_s"]:.0f} GB/s, local device to device
{rates["local device to device"]["GB_per_s"]:.0f} GB/s (bytes copied per second).

## Correctness

`tide-nccl check`: 30 cases (15 per split: TIDE-AG bf16/fp32/cast, TIDE-RS In-Place and
Slot-Reuse with bf16 and fp32 gradients, accumulate and alpha, steps of three groups in FSDP2
order, 200 odd parameters, Llama-3.1-70B and Qwen3-30B-A3B layers shrunk 32x), every rank's
output bitwise equal to the CPU reference executor's, 3 runs each from poisoned buffers:
30 of 30 pass, also with `--messages` (transfers between declared nodes as ncclSend/ncclRecv)
and under `torchrun`. Faults: a stalled peer (rank 1 starts 12 s late) and a withheld signal
(rank 1 drops the signal of its first put to rank 0): both ranks exit non-zero within the run
timeout (5 s) naming `AG r0 round 0 arrived ... counter 4 of rank 0 holds 0 < 1`.

## TIDE against stock FSDP2 (TIDE-RS with 32 sum and 32 landing CTAs, and the defaults)

TIDE-RS's 32 sum and 32 landing CTAs were picked by sweeping this same benchmark (below), so
the "TIDE ms" column is tuned on the data it is judged by; "library defaults" is the same
bench with the library's default budgets (16 sum, 4 landing CTAs; run-2026-11-29-x2), which
is what a user gets. What the data supports for a Llama-3.1-70B layer's reduce-scatter (1 x 2):
TIDE-RS 7.9 ms tuned, 20.6 ms with the defaults, against 9.2-9.4 ms for the stock C++ path
(about 1.18x faster tuned, 0.46x with the defaults) and 7.0 ms for NCCL's reduce-scatter
alone (0.88x). An earlier version of this page quoted 2.54x against stock PyTorch (20.1 ms):
that is withdrawn. The PyTorch reduce-scatter figures marked (!) hold a `_chunk_cat` timed at
far below its rate on one H200 (Llama layer: 14.1 ms at 363 GB/s, against 2.45 ms in
bench/results/fsdp2/ and 2.34 ms for the C++ stand-in): its host enqueue builds a block table
of one int64 per 2 KiB of an output chunk (about 2.9 ms at N = 2 by the 1/N trend of
bench/results/fsdp2's 723 / 385 / 162 us at N = 8 / 16 / 64), longer than the fixed ~1 ms spin
the harness queued, so host time entered the event timing. The per-repeat times point the same
way: the pack spread from 9.8 to 14.9 ms and the two ranks' medians differ (14.1 and 12.0 ms),
which a bandwidth-bound kernel on two identical GPUs does not do. The extrapolated enqueue
explains about 2 ms of the 11.7 ms excess, not all of it; the rest (pinned staging or host
contention under torchrun) needs the re-measurement. The harness now sizes its spin from the
measured enqueue and counts repeats whose enqueue outlasted the spin (NOTE [host enqueue
inside event timing]); the multi-GPU issue re-measures with it.

"stock C++" is NCCL (a communicator with NCCL's default channels) plus C++ stand-ins for
FSDP2's layout copies (a copy per parameter and rank after the all-gather; a bf16-to-fp32 pack
kernel per parameter before the reduce-scatter, scaled by 1/N after); "stock PyTorch" is the
same path with PyTorch's own `all_gather_into_tensor` + `split_with_sizes_copy` and
`torch._chunk_cat` + `reduce_scatter_tensor` (bench/nccl/fsdp2_nccl_baseline.py). TIDE's
all-gather output is bitwise equal to the stock path's on every rank; its reduce-scatter output
is within 1e-5 (bitwise here: with two contributions the order does not matter).

{chr(10).join(main_lines)}

![speedup](speedup.svg)

## Memory, SM time and enqueue

{chr(10).join(memory_table(final))}

TIDE's window holds more than the stock flat buffer here because, with N = 2, the
all-gather's landing zone is the whole unsharded group and TIDE-RS In-Place keeps its Level 1
staging, inbox and spares for the whole shard (a single wave: `tide plan` shows the areas).
The stock path's buffers are PyTorch allocations that FSDP2 frees and re-allocates per call.
TIDE-RS Slot-Reuse (`slot-reuse-bench.json`, `--rs-slot-reuse`, 32/32 CTAs, 10 repeats)
needs the same window as In-Place at N = 2 and takes the same time (Llama layer 1 x 2:
8.02 ms, 7.97 GiB; 2 x 1: 10.31 ms, 9.56 GiB): with M <= 2 there is one wave and no outbox
for Slot-Reuse to save.

## TIDE-RS knobs (`scripts/device/nccl_rs_sweep.sh`, 10 repeats)

The library's defaults (16 sum CTAs, 4 landing CTAs: the paper's training configuration,
sized for a network-bound reduce-scatter) leave TIDE-RS landing-bound on NVLink: the landing
kernel reads the peer's partials over NVLink with loads, so its rate grows with CTAs. Small
staging chunks (65,536 columns) multiply the sum kernels and the enqueue (55-66 ms for a
Llama layer).

{chr(10).join(sweep_table(sweeps))}

The same bench with the library's defaults (run-2026-11-29-x2):

{chr(10).join(default_lines)}

## Messages between declared nodes (`--messages`, NOTE [rail messages])

Puts and signals between the two declared nodes of the 2 x 1 split as ncclSend/ncclRecv on a
communicator with NCCL's default channels (1 x 2 has no transfer between nodes, so it is the
copy-engine path in both columns). On the channel-capped main communicator (maxCTAs = 1) the
same messages moved about 40 GB/s (Llama layer 2 x 1: AG 41.7 ms, RS 87.4 ms;
`run-2026-11-29-x2-messages/bench-messages-capped.json` and `.log`).

{chr(10).join(messages_table(messages, final))}

## What these numbers are not

Two GPUs of one host: N = 2 has one contributor per reduction, no Bruck rounds, no
Latin-square waves beyond one, and every transfer is NVLink. The paper's figures are for 8 to
512 GPUs over a network; `tide simulate` predicts those (bench/results/simulate/). The x4 and
x8 kinds were not lent.
"""
    pathlib.Path(args.out).write_text(text)
    svg_chart(chart, pathlib.Path(args.out).parent / "speedup.svg")
    print(f"wrote {args.out} and speedup.svg")


if __name__ == "__main__":
    main()
