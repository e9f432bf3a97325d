#!/usr/bin/env python3
"""Predicted training-step collectives: TIDE vs stock FSDP2 on four Llama-3.1-70B decoder
layers (`tide simulate step`, timing only, the cost model's App. G defaults), at 2x8, 8x8 and
16x8 GPUs, and TIDE alone at 64x8 (stock FSDP2's rings at 512 ranks are more ops than the
simulator holds). Predictions of a first-order model, not measurements; the layer's compute is
one read of its parameters (no FLOPs), so step times are collective times.

Writes bench/results/simulate/step.md. Run after scripts/build.sh:
    python3 bench/simulate/step.py [path/to/tide]
"""
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIDE = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build/src/cli/tide")
LAYERS = 4


def step(nodes, baseline):
    args = [TIDE, "simulate", "step", "--model", "llama3.1-70b:layer", "--layers", str(LAYERS),
            "--nodes", str(nodes), "--gpus-per-node", "8", "--timing-only", "--json"]
    if baseline:
        args.append("--baseline")
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def main():
    rows, calls = [], {}
    for nodes in (2, 8, 16, 64):
        for baseline in (False, True):
            if baseline and nodes == 64:
                continue
            out = step(nodes, baseline)
            system = "stock FSDP2" if baseline else "TIDE"
            rows.append((nodes * 8, system, out))
            calls[(nodes, system)] = out["calls"]
    lines = [
        f"# A training step's collectives: TIDE vs stock FSDP2 (predicted), {LAYERS} Llama-3.1-70B layers",
        "",
        "`tide simulate step --model llama3.1-70b:layer --layers 4 --nodes M --gpus-per-node 8 "
        "--timing-only [--baseline]`: forward all-gathers, then per layer in reverse its backward "
        "all-gather and reduce-scatter, in FSDP2's issue order (docs/cli.md). CPU reference "
        "executor, default cost model (NOTE [cost model]: the paper's App. G calibration for "
        "TIDE and the network; stock FSDP2's copy-out, packing and NCCL ring calibrated from our "
        "own H200 measurements, bench/results/simulate/validation.md). Predictions of a "
        "first-order model, not measurements. The layer is modelled as one read of its "
        "parameters on the compute stream (no FLOPs), so these are collective times, not step "
        "times. TIDE runs the runtime's multi-call programs (one receive stage per communicator, "
        "the lane handoff between calls), "
        "TIDE-RS In-Place. Memory is what each system holds at its peak per GPU (NOTE [step "
        "memory] in include/tide/program/training_step.hpp): TIDE its arena plus, In-Place, the previous "
        "layer's bf16 gradients; stock FSDP2 the sharded parameters plus the paper's Sec. 5.4 "
        "accounting of its caching allocator (4 NS during a layer's backward: the layer's "
        "parameters, the prefetched all-gather, the previous layer's fp32 reduce-scatter input). "
        "Stock FSDP2 at 64x8 is not simulated (about 10^8 ring ops).",
        f"Produced by `bench/simulate/step.py` on {datetime.date.today()}.",
        "",
        "| GPUs | system | all calls done (ms) | SM time per GPU (CTA-ms) | held at peak per GPU (GiB) |",
        "|---:|---|---:|---:|---:|",
    ]
    for gpus, system, out in rows:
        lines.append(f"| {gpus} | {system} | {out['step_ms']:.2f} | {out['sm_ms_per_gpu']:.1f} | "
                     f"{out['held_bytes'] / 2**30:.2f} |")
    lines += ["", "When each call finished (ms; latest rank):", ""]
    header = "| GPUs | system | " + " | ".join(
        ("AG f" if c["forward"] else ("AG b" if c["kind"] == "all-gather" else "RS")) +
        c["group"].rsplit(" ", 1)[-1] for c in rows[0][2]["calls"]) + " |"
    lines += [header, "|---:|---|" + "---:|" * len(rows[0][2]["calls"])]
    for gpus, system, out in rows:
        lines.append(f"| {gpus} | {system} | " +
                     " | ".join(f"{c['done_ms']:.2f}" for c in out["calls"]) + " |")
    lines += ["", "AG f i / AG b i: forward / backward all-gather of layer i; RS i: its "
              "reduce-scatter.", ""]
    out = ROOT / "bench/results/simulate/step.md"
    out.write_text("\n".join(lines))
    print(out.read_text())


if __name__ == "__main__":
    main()
