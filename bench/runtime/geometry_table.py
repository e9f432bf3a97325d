#!/usr/bin/env python3
"""Markdown table of the TIDE-RS sub-slice geometry runs of tide_runtime_enqueue_bench.

Reads geometry_<sub-slices>_<ranks>_<MxL>_<shapes>.json (scripts/device/runtime_enqueue.sh,
step geometry) and prints, per configuration and geometry: copies enqueued per call, the
host's enqueue time per rank (fresh pointers, replay, stream path; median [p10, p90]) and the
caller stream's GPU time of a replay (median).

Usage: geometry_table.py DIR
"""
import glob
import json
import os
import sys


def cell(r):
    return f"{r['median']:.3f} [{r['p10']:.3f}, {r['p90']:.3f}]"


def main():
    rows = []
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "geometry_*.json"))):
        geometry, ranks, topology, shapes = os.path.basename(path)[9:-5].rsplit("_", 3)
        j = json.load(open(path))
        rows.append((shapes, ranks, topology, geometry, j))
    print("| shapes | ranks enqueued | M x L | sub-slices | copies / call / rank | "
          "fresh ms / rank | replay ms / rank | stream ms / rank | replay GPU ms | fresh re-pointed |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for shapes, ranks, topology, geometry, j in sorted(rows, key=lambda r: r[:4]):
        fresh, replay, stream = j["rs_fresh"], j["rs_replay"], j["rs_stream"]
        n = 1 if ranks == "one" else fresh["ranks_enqueued"]
        copies = fresh["enqueued_per_call"]["copy_descriptors"] / n
        label = "Llama-3.1-70B layer" if shapes == "llama" else "P = 30"
        print(f"| {label} | {ranks} | {topology} | {geometry} | {copies:.0f} | {cell(fresh)} | "
              f"{cell(replay)} | {cell(stream)} | {replay['gpu_ms']['median']:.3f} | "
              f"{'yes' if fresh['repointed_launches'] > 0 else 'no'} |")


if __name__ == "__main__":
    main()
