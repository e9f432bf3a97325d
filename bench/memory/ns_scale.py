#!/usr/bin/env python3
"""TIDE's memory against stock FSDP2 where NS matters: Llama-shaped layers of 116 MiB.

The memory benchmark's models (run.py: layers of 2 to 26 MiB) leave every NS-scale term under
TIDE's fixed few MiB of process overhead and torch's allocator granularity. This one trains a
few Llama-3.2-1B decoder layers (hidden 2048, SwiGLU 8192, GQA 32/8 heads: 60.8 M parameters,
NS = 116 MiB in bf16) under FSDP2 with mixed precision (bf16 parameters, fp32 reduction, as
Sec. 5.4 counts NS), stock and TIDE In-Place and Slot-Reuse, each in fresh processes, on the
host backend (CPU processes, gloo for stock) or on GPUs where the workers see them
(bench/memory/worker.py). It reports each rank's peak as run.py measures it (NOTE [honest peak
on CPU]) in MiB and in NS, TIDE's arena, the Sec. 5.4 bound of the same groups (`tide memory
--groups`) and the closed form's per-layer figures (`tide memory -M 1 -L N`), and writes
results.json and README.md under --out.

    python3 bench/memory/ns_scale.py --tide build/src/cli/tide --worlds 2 4 8 \
        --out bench/results/memory/ns-scale

--tide puts that CLI first on the workers' PATH (they call `tide memory --groups` for the
bound); without it, the `tide` on PATH.

NOTE [optimizer temporaries]: TIDE's arena is held for the whole run, while stock FSDP2's
all-gather outputs and reduce-scatter inputs exist only inside forward and backward. So TIDE
lowers the backward's peak (4 NS to 2.2-3.2 NS per layer at M = 1) but adds its arena (about
2.2 NS) to every other phase, the optimizer step included. torch's foreach AdamW (its default
on CUDA) allocates one fp32 temporary the size of the rank's whole shard (`_foreach_sqrt` of
the second moments); where that exceeds the backward's working set (few GPUs, a deep model per
rank, little activation memory), the optimizer step is the peak and TIDE is above stock by its
arena. Measured (4 NS-scale layers, N = 2): on the H200 with the default (foreach) AdamW,
+8.9% in both modes; on CPU with `--optimizer foreach`, +8.2%; on CPU with `--optimizer fused`
(torchtitan's default) -2.7% In-Place and -5.5% Slot-Reuse
(bench/results/memory/ns-scale-optimizer-cpu/). On GPUs TIDE now lends the arena's data bytes to
the optimizer step (NOTE [arena lending] in python/tide/_lend.py), so the step's temporaries
take the arena's place; on CPU the arena is shared memory and stays. --optimizer picks the
implementation.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import MIB, SYSTEMS, launch, row_of  # noqa: E402

MODEL = "llama1b"
# One decoder layer's parameters as the benchmark's model holds them (python/tide/demo/model.py:
# attention norm, fused q/k/v, output, MLP norm, fused gate/up, down), for the closed form.
LAYER_SHAPES = "2048x1,3072x2048,2048x2048,2048x1,16384x2048,2048x8192"


def closed_form(tide: str, world: int) -> dict:
    """`tide memory -M 1 -L N` for one layer's shapes (the one-node form with its ring)."""
    out = subprocess.run([tide, "memory", "-M", "1", "-L", str(world), "--shapes", LAYER_SHAPES,
                          "--grad-dtype", "bf16", "--json"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)


def table(rows: list[dict]) -> list[str]:
    stock = {r["world"]: r for r in rows if r["system"] == "stock"}
    lines = [
        "| N | system | layers | NS MiB | shard MiB | TIDE arena MiB (NS) | Sec. 5.4 bound MiB (NS) "
        "| model per-layer NS | peak MiB [min, max] | peak - stock MiB | peak - stock NS "
        "| peak vs stock |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        base = stock[r["world"]]
        ns = r["ns_bytes"]
        spread = r["peak_spread_bytes"]
        delta = r["peak_bytes"] - base["peak_bytes"]
        model = {"stock": r["model_fsdp2_ns"], "in-place": r["model_in_place_ns"],
                 "slot-reuse": r["model_slot_reuse_ns"]}[r["system"]]
        lines.append(
            f"| {r['world']} | {r['system']} | {r['layers']} | {ns / MIB:.1f} "
            f"| {r['shard_bytes'] / MIB:.1f} | {r['arena_bytes'] / MIB:.1f} ({r['arena_bytes'] / ns:.3f}) "
            f"| {r['bound_bytes'] / MIB:.1f} ({r['bound_bytes'] / ns:.3f}) | {model:.3f} "
            f"| {r['peak_bytes'] / MIB:.1f} [{spread[0] / MIB:.1f}, {spread[1] / MIB:.1f}] "
            f"| {delta / MIB:+.1f} | {delta / ns:+.3f} "
            f"| {(r['peak_bytes'] / base['peak_bytes'] - 1) * 100:+.1f}% |"
        )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench/results/memory/ns-scale")
    p.add_argument("--tide", help="the tide CLI to use (its folder goes first on PATH)")
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    # NOTE [optimizer temporaries]
    p.add_argument("--optimizer", default="default", choices=("default", "foreach", "fused"),
                   help="AdamW's implementation: torch's default (foreach on CUDA, for-loop on "
                        "CPU), foreach, or fused (torchtitan's default)")
    # NOTE [malloc in the memory benchmark] (run.py)
    p.add_argument("--malloc-mmap-threshold", type=int, default=65536)
    p.add_argument("--keep", action="store_true",
                   help="keep the rows of --out's results.json for the worlds not run now (so "
                        "that N = 8 can run on its own); README names every command")
    a = p.parse_args()
    if a.tide:
        os.environ["PATH"] = str(Path(a.tide).resolve().parent) + os.pathsep + os.environ["PATH"]
    tide = shutil.which("tide")
    if tide is None:
        raise SystemExit("no tide CLI on PATH (give --tide build/src/cli/tide)")
    if "stock" not in a.systems:
        raise SystemExit("--systems needs stock: every row is compared with it")
    os.environ["MEMORY_OPTIMIZER"] = a.optimizer  # the workers read it
    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for world in a.worlds:
            model = closed_form(tide, world)
            for system in a.systems:
                runs = [launch(world, system, a.layers, MODEL, a.steps, Path(scratch),
                               a.malloc_mmap_threshold) for _ in range(a.repeats)]
                row = row_of(runs)
                row["model"] = MODEL
                row["repeats"] = a.repeats
                row["layer_params"] = runs[0][0]["layer_params"]
                row["ns_bytes"] = 2 * row["layer_params"]
                row["bound_bytes"] = row.get("bound_bytes", 0)
                row["model_fsdp2_ns"] = model["fsdp2_total_ns"]
                row["model_in_place_ns"] = model["in_place_total_ns"]
                row["model_slot_reuse_ns"] = model["slot_reuse_total_ns"]
                rows.append(row)
                print(f"N={world} {system:10s} arena {row['arena_bytes'] / MIB:8.1f} MiB "
                      f"peak {row['peak_bytes'] / MIB:8.1f} MiB "
                      f"({time.time() - started:.0f} s)", flush=True)
    out = Path(a.out)
    command = " ".join(["python3", Path(sys.argv[0]).as_posix()] + sys.argv[1:])
    commands, seconds = [command], round(time.time() - started)
    if a.keep and (out / "results.json").exists():
        kept = json.loads((out / "results.json").read_text())
        rows = [r for r in kept["rows"] if r["world"] not in a.worlds] + rows
        rows.sort(key=lambda r: (r["world"], SYSTEMS.index(r["system"])))
        commands = kept.get("commands", [kept["command"]]) + commands
        seconds += kept["seconds"]
    stock = {r["world"]: r for r in rows if r["system"] == "stock"}
    goals = {
        "in_place_peak_at_or_below_stock": all(
            r["peak_bytes"] <= stock[r["world"]]["peak_bytes"] for r in rows
            if r["system"] == "in-place"),
        "slot_reuse_peak_at_or_below_stock": all(
            r["peak_bytes"] <= stock[r["world"]]["peak_bytes"] for r in rows
            if r["system"] == "slot-reuse"),
        "tide_memory_agrees": all(r["tide_memory_agrees"] for r in rows if r["system"] != "stock"),
    }
    result = {
        "machine": f"{platform.node()} ({platform.processor() or platform.machine()}, "
                   f"{os.cpu_count()} cores)",
        "date": date.today().isoformat(),
        "command": command,
        "commands": commands,
        "tide": tide,
        "seconds": seconds,
        "repeats": {str(r["world"]): r.get("repeats", a.repeats) for r in rows},
        "steps": a.steps,
        "optimizer": a.optimizer,
        "goals": goals,
        "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    device = rows[0]["device"]
    lines = [
        "# TIDE's memory per rank against stock FSDP2 at NS scale",
        "",
        "Made by " + " then ".join(f"`{c}`" for c in commands) +
        f" on {result['machine']}, {result['date']} "
        f"({result['seconds']} s), device: {device}. Model: {a.layers} Llama-3.2-1B decoder "
        "layers (hidden 2048, SwiGLU 8192, GQA 32/8 heads; NS = one layer in bf16), vocabulary "
        "512, 2 sequences of 32 tokens, FSDP2 with bf16 parameters and fp32 reduction, one "
        f"FSDP2 group per layer and the root; AdamW ({a.optimizer} implementation); "
        f"{a.steps} steps (TIDE's first on stock FSDP2 while it traces the order). Each row: "
        "the largest rank's figure, median over its repeats in fresh processes (" +
        ", ".join(f"N = {w}: {n}" for w, n in result["repeats"].items()) +
        "; [min, max] over the repeats). Peak "
        "on CPU: the rank's private memory at its peak plus its own arena in full once it "
        "exists (NOTE [honest peak on CPU], python/tide/demo/peak.py; workers run with "
        "MALLOC_MMAP_THRESHOLD_=65536); on GPUs torch's max_memory_allocated. 'model "
        "per-layer NS' is `tide memory -M 1 -L N --shapes <one layer>`'s closed form for one "
        "layer's backward, the one-node form (FSDP2 4 NS; TIDE: two ring slots and the staging "
        "ring, In-Place plus the previous layer's gradients). The bound is "
        "`tide memory --groups` for the groups TIDE registered (the CLI named in results.json).",
        "",
        *table(rows),
        "",
        "Goals: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in goals.items()),
        "",
    ]
    (out / "README.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
