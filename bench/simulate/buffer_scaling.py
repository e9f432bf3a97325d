#!/usr/bin/env python3
"""Reduce-scatter buffer per GPU at a fixed per-GPU output size (Sec. 7.4, Fig. 10b):
FSDP2's fp32 packing buffer (one output-sized block per GPU) against TIDE-RS's staging
(exact bytes of the concrete plan: staging slots, inbox, outbox banks, spares), from
`tide plan --json`. Writes bench/results/simulate/buffer_scaling.{md,svg}.

Usage: bench/simulate/buffer_scaling.py [path/to/tide]
"""
import json
import subprocess
import sys
from pathlib import Path

TIDE = sys.argv[1] if len(sys.argv) > 1 else "build/src/cli/tide"
OUT = Path("bench/results/simulate")
GIB = float(1 << 30)


CHUNK = 8 << 20  # bytes per staging slot for the bounded-chunk series


def plan(nodes, output_mib, mode, chunk_bytes=0):
    # One parameter of N rows x K columns: R_p = 1, so each GPU's fp32 output is K * 4 bytes.
    cols = output_mib * (1 << 20) // 4
    args = [TIDE, "plan", "--shapes", f"{nodes * 8}x{cols}", "--nodes", str(nodes),
            "--gpus-per-node", "8", "--mode", mode, "--chunk-bytes", str(chunk_bytes), "--json"]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


rows = []
for output_mib in (32, 128):
    for nodes in (1, 2, 4, 8, 16, 32, 64):
        in_place = plan(nodes, output_mib, "in-place")
        slot = plan(nodes, output_mib, "slot-reuse")
        chunked = plan(nodes, output_mib, "in-place", CHUNK)
        rows.append({
            "output_mib": output_mib, "gpus": nodes * 8,
            "fsdp2": in_place["layout"]["pack_buffer_bytes"] / GIB,
            "in_place": in_place["rs"]["memory"]["total_bytes"] / GIB,
            "slot_reuse": slot["rs"]["memory"]["total_bytes"] / GIB,
            "in_place_chunked": chunked["rs"]["memory"]["total_bytes"] / GIB,
        })

OUT.mkdir(parents=True, exist_ok=True)
with open(OUT / "buffer_scaling.md", "w") as f:
    f.write("# Reduce-scatter buffer per GPU at a fixed per-GPU output (GiB)\n\n")
    f.write("From the concrete plans (`tide plan --shapes {8M}x{K} --nodes M --gpus-per-node 8 "
            "--mode in-place|slot-reuse --json`: `layout.pack_buffer_bytes` for FSDP2, "
            "`rs.memory.total_bytes` for TIDE; W_wave = 8, k = 4, n_stg = 2; the chunked series adds "
            "`--chunk-bytes 8388608`). Produced by "
            "`bench/simulate/buffer_scaling.py`.\n\n")
    f.write("| output per GPU | GPUs | FSDP2 pack | TIDE In-Place | In-Place, 8 MiB chunks | "
            "TIDE Slot-Reuse | FSDP2 / In-Place |\n")
    f.write("|---|---:|---:|---:|---:|---:|---:|\n")
    for r in rows:
        f.write(f"| {r['output_mib']} MiB | {r['gpus']} | {r['fsdp2']:.2f} | {r['in_place']:.2f} | "
                f"{r['in_place_chunked']:.2f} | {r['slot_reuse']:.2f} | "
                f"{r['fsdp2'] / r['in_place']:.2f} |\n")

# A log-log SVG plot, written by hand (no plotting package needed).
W, H, L, B, T, R = 760, 440, 70, 50, 40, 260
xs = sorted({r["gpus"] for r in rows})
ymin, ymax = 0.05, max(r["fsdp2"] for r in rows) * 1.5
import math


def px(g):
    return L + (math.log2(g) - math.log2(xs[0])) / (math.log2(xs[-1]) - math.log2(xs[0])) * (W - L - R)


def py(v):
    return H - B - (math.log10(v) - math.log10(ymin)) / (math.log10(ymax) - math.log10(ymin)) * (H - B - T)


svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{L}" y="20" font-size="14">Reduce-scatter buffer per GPU, fixed output per GPU (log-log)</text>']
for g in xs:
    svg.append(f'<line x1="{px(g):.1f}" y1="{T}" x2="{px(g):.1f}" y2="{H - B}" stroke="#eee"/>')
    svg.append(f'<text x="{px(g):.1f}" y="{H - B + 16}" text-anchor="middle">{g}</text>')
for v in (0.1, 0.3, 1, 3, 10, 30):
    if ymin <= v <= ymax:
        svg.append(f'<line x1="{L}" y1="{py(v):.1f}" x2="{W - R}" y2="{py(v):.1f}" stroke="#eee"/>')
        svg.append(f'<text x="{L - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
svg.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">GPUs (8 per node)</text>')
svg.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" text-anchor="middle">GiB per GPU</text>')
styles = {"fsdp2": ("#d62728", "FSDP2 pack"), "in_place": ("#1f77b4", "TIDE In-Place"),
          "in_place_chunked": ("#9467bd", "In-Place, 8 MiB chunks"),
          "slot_reuse": ("#2ca02c", "TIDE Slot-Reuse")}
legend_y = T + 10
for output_mib, dash in ((32, ""), (128, "6,4")):
    for key, (color, name) in styles.items():
        pts = " ".join(f"{px(r['gpus']):.1f},{py(r[key]):.1f}" for r in rows if r["output_mib"] == output_mib)
        svg.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
        svg.append(f'<line x1="{W - R + 10}" y1="{legend_y}" x2="{W - R + 34}" y2="{legend_y}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>')
        svg.append(f'<text x="{W - R + 40}" y="{legend_y + 4}">{name}, {output_mib} MiB</text>')
        legend_y += 18
svg.append("</svg>")
(OUT / "buffer_scaling.svg").write_text("\n".join(svg) + "\n")
print((OUT / "buffer_scaling.md").read_text())
