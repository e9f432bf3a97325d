#!/usr/bin/env python3
"""What stock FSDP2 pays in layout copies that TIDE removes, measured on one GPU.

For each parameter group (one Llama-3.1-70B decoder layer, one Qwen3-30B-A3B decoder layer with
fused experts; shapes from `tide plan --json`, kept in bench/fsdp2/shapes.json) and each world
size N, the script allocates on one GPU what one FSDP2 rank holds for that group and times, with
CUDA events, the copies FSDP2 makes around its collectives:

  copy_out  the all-gather copy-out (FSDP2 foreach_all_gather_copy_out): the rank-major flat bf16
            all-gather output, viewed (N, S), is split along dim 1 into each parameter's padded
            unsharded output, viewed (N, R_p*K_p), with torch.split_with_sizes_copy.
  chunk_cat the reduce-scatter packing (FSDP2 foreach_reduce / foreach_reduce_scatter_copy_in):
            torch._chunk_cat of the bf16 unsharded gradients, dim 0, N chunks, into the fp32
            reduce-scatter input viewed (N, S) (slice, zero-pad, upcast, pack).
  copy_in   for reference only, not in the step total: the all-gather copy-in under mixed
            precision (fp32 shards cast into a bf16 flat buffer, then copied into this rank's
            slice of the all-gather output; TIDE keeps the cast under mixed precision).
  reference copies: torch copy_ of a large bf16 buffer (device-to-device copy rate) and a bf16 to
            fp32 copy_ (elementwise upcast rate), to compare each call with bytes / copy rate.

No collective runs: these are the copies alone, on one GPU. The per-step total is
layers x (2 copy-outs [forward, backward recompute] + 1 chunk_cat) for the decoder layers only.

Modes that need no torch (shape logic, testable on a CPU-only machine):
  --write-shapes   regenerate shapes.json from `tide plan --json` (needs build/src/cli/tide)
  --dry-run        print the per-configuration layouts and byte counts and exit
Measurement (needs PyTorch with a CUDA device; exits with one line if there is none):
  python3 bench/fsdp2/fsdp2_copies.py --json out.json --md out.md
"""
import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_SHAPES = HERE / "shapes.json"
DEFAULT_TIDE = ROOT / "build/src/cli/tide"
DEFAULT_GROUPS = ["llama3.1-70b:layer", "qwen3-30b-a3b:layer"]
DEFAULT_RANKS = [8, 16, 64]
GiB = 1 << 30
DEVICE = "cuda"  # the measurement path's device (a CPU test may point it elsewhere)

PAPER = {
    "model": "llama3.1-70b",
    "step_copy_s": 0.33,
    "setting": ("TIDE paper Sec. 1 and 7.3: a profile of one GPU during a Llama-3.1-70B training "
                "step at 8K tokens/GPU, 64 GPUs (8 nodes x 8), Stock FSDP2 spends 0.33 s per "
                "step (FSDP2+SymmMem 0.32 s) on the layout copies (all-gather copy-out and "
                "reduce-scatter packing), measured inside a real step with communication and "
                "compute running beside them"),
}
OURS = ("only the copies, one at a time, on one otherwise idle GPU; no communication, no "
        "concurrent compute; decoder layers only (embedding and output groups left out)")


def die(msg, code=2):
    print(f"fsdp2_copies: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------------------------
# Shapes and layout (no torch)
# ----------------------------------------------------------------------------------------------

def topology(n):
    """The (M, L) split `tide plan` uses for N ranks: 8 GPUs a node where N allows."""
    if n % 8 == 0:
        return n // 8, 8
    return 1, n


def layout(params, n):
    """FSDP2's dim-0 sharding of a group on N ranks, as in Sec. 2.1 of the paper.

    params: list of dicts with rows (D_p, dim 0) and cols (K_p, the product of the rest).
    Returns per-parameter R_p (padded rows a rank), shard elements R_p*K_p, element offset o_p in
    a rank's chunk, and the totals (elements; multiply by the item size for bytes)."""
    per = []
    off = 0
    for p in params:
        d, k = int(p["rows"]), int(p["cols"])
        r = -(-d // n)
        per.append({"name": p["name"], "rows": d, "cols": k, "rows_per_rank": r,
                    "padding_rows": r * n - d, "shard_elems": r * k, "offset_elems": off,
                    "unpadded_elems": d * k})
        off += r * k
    return {"n": n, "params": per, "shard_elems": off,
            "padded_elems": n * off, "unpadded_elems": sum(q["unpadded_elems"] for q in per)}


def bytes_model(lay, ag_item=2, grad_item=2, reduce_item=4, master_item=4):
    """HBM bytes each call reads plus writes (one rank).

    copy_out: reads and writes the N*S-element all-gather output once each (padding included).
    chunk_cat: reads the unpadded gradients, writes the padded fp32 pack (zeros included).
    copy_in: fp32 shard -> bf16 flat (cast), then bf16 flat -> this rank's all-gather slice."""
    s, ns = lay["shard_elems"], lay["padded_elems"]
    return {
        "copy_out": 2 * ag_item * ns,
        "chunk_cat": grad_item * lay["unpadded_elems"] + reduce_item * ns,
        "copy_in": (master_item + ag_item) * s + 2 * ag_item * s,
        "ag_output_bytes": ag_item * ns,
        "pack_bytes": reduce_item * ns,
        "grad_bytes": grad_item * lay["unpadded_elems"],
        "shard_bytes": ag_item * s,
    }


def footprint(lay):
    """GPU bytes one configuration allocates (fp32 shards, bf16 flat AG output, bf16 per-param
    outputs, bf16 gradients, fp32 pack, bf16 copy-in buffer)."""
    s, ns = lay["shard_elems"], lay["padded_elems"]
    return 4 * s + 2 * ns + 2 * ns + 2 * lay["unpadded_elems"] + 4 * ns + 2 * s


def parse_list_models(text):
    """Group name -> repeats (layers) from `tide plan --list-models`."""
    import re
    out = {}
    pat = re.compile(r"(\S+:\S+)\s+(\d+)\s+([\d,]+)\s+([\d.]+ \S+)\s+(\d+)\s")
    for line in text.splitlines():
        m = pat.search(line)
        if m:
            out[m.group(1)] = int(m.group(5))
    return out


def write_shapes(path, tide, groups, ranks):
    def run(args):
        r = subprocess.run([str(tide)] + args, capture_output=True, text=True)
        if r.returncode != 0:
            die(f"`tide {' '.join(args)}` failed: {(r.stderr or r.stdout).strip()}")
        return r.stdout

    repeats = parse_list_models(run(["plan", "--list-models"]))
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    doc = {
        "about": ("Parameter shapes of the groups fsdp2_copies.py measures, from `tide plan "
                  "--model GROUP --json` (src/core/models.cpp presets): rows = dim 0, cols = "
                  "product of the other dims, in named_parameters() order. plan_layout holds "
                  "the plan's own byte counts at each N, which the script checks its layout "
                  "against. layers = the preset's repeats (decoder layers a model has)."),
        "generated_by": "python3 bench/fsdp2/fsdp2_copies.py --write-shapes",
        "tide_commit": commit,
        "groups": {},
    }
    for g in groups:
        entry = None
        for n in ranks:
            m, l = topology(n)
            plan = json.loads(run(["plan", "--model", g, "-M", str(m), "-L", str(l), "--json"]))
            lay = plan["layout"]
            if entry is None:
                entry = {
                    "model": g.split(":")[0],
                    "layers": repeats.get(g),
                    "ag_dtype": plan["ag_dtype"],
                    "grad_dtype": plan["grad_dtype"],
                    "params": [{"name": p["name"], "rows": p["rows"], "cols": p["cols"]}
                               for p in lay["params"]],
                    "plan_layout": {},
                }
            entry["plan_layout"][str(n)] = {k: lay[k] for k in (
                "shard_bytes", "grad_shard_bytes", "fp32_shard_bytes", "unsharded_bytes",
                "pack_buffer_bytes", "param_count")}
        doc["groups"][g] = entry
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}: {', '.join(groups)} at N = {', '.join(map(str, ranks))}")


def load_shapes(path, groups):
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        die(f"cannot read shapes file {path}: {e}")
    missing = [g for g in groups if g not in doc.get("groups", {})]
    if missing:
        die(f"{path} has no group {', '.join(missing)} (regenerate with --write-shapes)")
    return {g: doc["groups"][g] for g in groups}


def check_against_plan(group, entry, lay):
    """Our layout's byte counts must equal what `tide plan` computed for the same N."""
    ref = entry.get("plan_layout", {}).get(str(lay["n"]))
    if ref is None:
        return None
    ours = {"shard_bytes": 2 * lay["shard_elems"], "grad_shard_bytes": 2 * lay["shard_elems"],
            "fp32_shard_bytes": 4 * lay["shard_elems"], "unsharded_bytes": 2 * lay["padded_elems"],
            "pack_buffer_bytes": 4 * lay["padded_elems"], "param_count": len(lay["params"])}
    bad = {k: (ours[k], ref[k]) for k in ours if k in ref and ours[k] != ref[k]}
    if bad:
        die(f"{group} N={lay['n']}: layout disagrees with tide plan: {bad}")
    return True


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=str(DEFAULT_SHAPES), help="shapes JSON (default: %(default)s)")
    ap.add_argument("--groups", default=",".join(DEFAULT_GROUPS),
                    help="comma-separated groups from the shapes file (default: %(default)s)")
    ap.add_argument("--ranks", default=",".join(map(str, DEFAULT_RANKS)),
                    help="comma-separated world sizes N (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=30, help="timed calls per measurement (>= 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls first")
    ap.add_argument("--ref-bytes", type=int, default=2 * GiB,
                    help="source size of the reference copies (default 2 GiB)")
    ap.add_argument("--spin-cycles", type=int, default=2_000_000,
                    help="torch.cuda._sleep cycles queued before each timed call so the GPU, "
                         "not the host's enqueue, is timed (0: off)")
    ap.add_argument("--direct", action="store_true",
                    help="call torch.split_with_sizes_copy / torch._chunk_cat directly instead "
                         "of FSDP2's registered torch.ops.fsdp wrappers (same kernels)")
    ap.add_argument("--no-verify", action="store_true", help="skip the layout check of each call")
    ap.add_argument("--json", help="write results JSON here")
    ap.add_argument("--md", help="write the markdown tables here")
    ap.add_argument("--dry-run", action="store_true",
                    help="print layouts and byte counts (no torch needed) and exit")
    ap.add_argument("--write-shapes", action="store_true",
                    help="regenerate --shapes from `tide plan --json` (no torch needed) and exit")
    ap.add_argument("--tide", default=str(DEFAULT_TIDE), help="tide binary for --write-shapes")
    a = ap.parse_args(argv)
    a.groups = [g for g in a.groups.split(",") if g]
    try:
        a.ranks = [int(x) for x in a.ranks.split(",") if x]
    except ValueError:
        ap.error("--ranks takes integers, e.g. 8,16,64")
    if not a.groups or not a.ranks or min(a.ranks) < 1:
        ap.error("--groups and --ranks must be non-empty, ranks >= 1")
    if a.repeats < 20 and not (a.dry_run or a.write_shapes):
        ap.error("--repeats must be at least 20")
    if a.warmup < 1:
        ap.error("--warmup must be at least 1")
    return a


def dry_run(shapes, ranks):
    for g, entry in shapes.items():
        for n in ranks:
            lay = layout(entry["params"], n)
            checked = check_against_plan(g, entry, lay)
            b = bytes_model(lay)
            print(f"{g:24s} N={n:3d} P={len(lay['params']):3d} S={b['shard_bytes'] / 2**20:9.2f} MiB"
                  f"  AG out {b['ag_output_bytes'] / 1e9:6.3f} GB  pack {b['pack_bytes'] / 1e9:6.3f} GB"
                  f"  moved: copy_out {b['copy_out'] / 1e9:6.3f} GB chunk_cat {b['chunk_cat'] / 1e9:6.3f} GB"
                  f"  alloc {footprint(lay) / GiB:5.2f} GiB"
                  f"  {'= tide plan' if checked else '(no plan counts at this N)'}")


# ----------------------------------------------------------------------------------------------
# GPU measurement
# ----------------------------------------------------------------------------------------------

def require_cuda():
    try:
        import torch  # noqa: F401
    except ImportError:
        die("PyTorch is not installed here (import torch failed); run it on the device machine: "
            "bash scripts/device/fsdp2_copies.sh")
    import torch
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        die(f"no CUDA device visible to PyTorch {torch.__version__} "
            "(torch.cuda.is_available() is False); run it on the device machine")
    return torch


class Timer:
    def __init__(self, torch, repeats, warmup, spin):
        self.torch, self.repeats, self.warmup, self.spin = torch, repeats, warmup, spin

    def __call__(self, fn):
        torch = self.torch
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        gpu_ms, host_us = [], []
        for _ in range(self.repeats):
            if self.spin:
                torch.cuda._sleep(self.spin)  # keeps the GPU busy while the host enqueues
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            e.record()
            e.synchronize()
            gpu_ms.append(s.elapsed_time(e))
            host_us.append((t1 - t0) * 1e6)
        q = statistics.quantiles(gpu_ms, n=10)
        return {"median_ms": statistics.median(gpu_ms), "min_ms": min(gpu_ms),
                "p10_ms": q[0], "p90_ms": q[-1], "host_enqueue_us": statistics.median(host_us),
                "repeats": self.repeats, "warmup": self.warmup}


def fsdp_ops(torch, direct):
    """FSDP2's registered wrappers (torch.ops.fsdp.split_with_sizes_copy / chunk_cat) when the
    installed PyTorch has them and --direct is not given; otherwise the torch ops they call."""
    if not direct:
        try:
            import torch.distributed.fsdp._fully_shard._fsdp_collectives  # noqa: F401
            sw = torch.ops.fsdp.split_with_sizes_copy
            cc = torch.ops.fsdp.chunk_cat
            return ("torch.ops.fsdp (FSDP2's registered ops)",
                    lambda x, sizes, out: sw(x, sizes, dim=1, out=out),
                    lambda ts, n, out: cc(ts, dim=0, num_chunks=n, out=out))
        except Exception:  # noqa: BLE001 - fall back to the same kernels
            pass
    return ("torch.split_with_sizes_copy / torch._chunk_cat",
            lambda x, sizes, out: torch.split_with_sizes_copy(x, sizes, dim=1, out=out),
            lambda ts, n, out: torch._chunk_cat(ts, 0, n, out=out))


def reference_rates(torch, timer, nbytes):
    n = nbytes // 2
    src = torch.empty(n, dtype=torch.bfloat16, device=DEVICE).normal_()
    dst = torch.empty_like(src)
    d2d = timer(lambda: dst.copy_(src))
    d2d["bytes"] = 2 * 2 * n
    d2d["gbps"] = d2d["bytes"] / (d2d["median_ms"] * 1e-3) / 1e9
    del dst
    dst32 = torch.empty(n, dtype=torch.float32, device=DEVICE)
    cast = timer(lambda: dst32.copy_(src))
    cast["bytes"] = (2 + 4) * n
    cast["gbps"] = cast["bytes"] / (cast["median_ms"] * 1e-3) / 1e9
    del src, dst32
    torch.cuda.empty_cache()
    return {"d2d_copy": d2d, "bf16_to_fp32_copy": cast}


def measure_config(torch, timer, ops, group, entry, n, verify):
    _, split_copy, chunk_cat = ops
    lay = layout(entry["params"], n)
    check_against_plan(group, entry, lay)
    b = bytes_model(lay)
    dev = DEVICE
    bf16, fp32 = torch.bfloat16, torch.float32
    numels = [p["shard_elems"] for p in lay["params"]]
    s = lay["shard_elems"]
    rank = 0

    # What one FSDP2 rank holds for the group. Sharded fp32 master data, one padded flat tensor a
    # parameter (FSDPParam._sharded_param_data), with the (R_p, K_p) sharded view over it.
    shards = [torch.empty(k, dtype=fp32, device=dev).normal_() for k in numels]
    # The flat rank-major all-gather output (N x S elements, bf16) and the per-parameter
    # unsharded outputs (FSDPParam.all_gather_outputs: N*R_p*K_p each, 1-D).
    ag_out = torch.empty(n * s, dtype=bf16, device=dev).normal_()
    ag_outputs = [torch.empty(n * k, dtype=bf16, device=dev) for k in numels]
    unsharded = [o.view(n * p["rows_per_rank"], p["cols"])[: p["rows"]]
                 for o, p in zip(ag_outputs, lay["params"])]
    # The unsharded bf16 gradients autograd leaves (D_p, K_p) and the fp32 reduce-scatter input.
    grads = [torch.empty(p["rows"], p["cols"], dtype=bf16, device=dev).normal_()
             for p in lay["params"]]
    rs_in = torch.empty(n * s, dtype=fp32, device=dev)
    ag_in_flat = torch.empty(s, dtype=bf16, device=dev)
    torch.cuda.synchronize()

    def copy_out():
        # foreach_all_gather_copy_out: (N, S) view of the flat output, (N, -1) views of the
        # per-parameter outputs, split along dim 1 by the per-rank shard sizes.
        split_copy(ag_out.view(n, -1), numels, [o.view(n, -1) for o in ag_outputs])

    def pack():
        # foreach_reduce_scatter_copy_in: (N, -1) view of the fp32 input, chunk-cat along dim 0.
        chunk_cat(grads, n, rs_in.view(n, -1))

    def copy_in():
        # _get_param_all_gather_inputs (foreach copy with the bf16 cast) and all_gather_copy_in
        # (foreach copy into this rank's narrow of the all-gather output).
        splits = torch.split(ag_in_flat, numels)
        torch._foreach_copy_(splits, shards)
        dsts = torch.split(ag_out.narrow(0, s * rank, s), numels)
        torch._foreach_copy_(dsts, splits)

    res = {"group": group, "n": n, "topology": list(topology(n)), "param_count": len(numels),
           "shard_bytes": b["shard_bytes"], "ag_output_bytes": b["ag_output_bytes"],
           "grad_bytes": b["grad_bytes"], "pack_bytes": b["pack_bytes"],
           "allocated_bytes": footprint(lay), "padding_rows": sum(p["padding_rows"] for p in lay["params"]),
           "calls": {}}
    for name, fn in (("copy_out", copy_out), ("chunk_cat", pack), ("copy_in", copy_in)):
        t = timer(fn)
        t["bytes"] = b[name]
        t["gbps"] = b[name] / (t["median_ms"] * 1e-3) / 1e9
        res["calls"][name] = t

    if verify:
        res["verified"] = verify_config(torch, lay, n, s, rank, ag_out, ag_outputs, unsharded,
                                        grads, rs_in, shards, copy_out, pack, copy_in)
    del shards, ag_out, ag_outputs, unsharded, grads, rs_in, ag_in_flat
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return res


def verify_config(torch, lay, n, s, rank, ag_out, ag_outputs, unsharded, grads, rs_in, shards,
                  copy_out, pack, copy_in):
    """Each call against the layout it must produce (Sec. 2.1): independent of the op under test."""
    for o in ag_outputs:
        o.fill_(float("nan"))
    rs_in.fill_(float("nan"))
    copy_out()
    pack()
    flat = ag_out.view(n, s)
    packed = rs_in.view(n, s)
    for p, o, u, g in zip(lay["params"], ag_outputs, unsharded, grads):
        a, k, r, d = p["offset_elems"], p["shard_elems"], p["rows_per_rank"], p["rows"]
        # Landing(p, r) = o_p N + r s_p: rank r's piece of p sits at row block r of p's output.
        if not torch.equal(o.view(n, k), flat[:, a:a + k]):
            die(f"copy_out check failed for {p['name']} at N={n}", 3)
        if not torch.equal(u, o.view(n * r, p["cols"])[:d]):
            die(f"unsharded view check failed for {p['name']} at N={n}", 3)
        want = torch.zeros(n * r, p["cols"], dtype=torch.float32, device=ag_out.device)
        want[:d] = g.float()
        if not torch.equal(packed[:, a:a + k], want.view(n, k)):
            die(f"chunk_cat check failed for {p['name']} at N={n}", 3)
        del want
    copy_in()
    mine = ag_out.narrow(0, s * rank, s)
    for p, sh in zip(lay["params"], shards):
        a, k = p["offset_elems"], p["shard_elems"]
        if not torch.equal(mine[a:a + k], sh.to(torch.bfloat16)):
            die(f"copy_in check failed for {p['name']} at N={n}", 3)
    torch.cuda.synchronize()
    return True


def step_totals(results, shapes, ranks):
    out = []
    for g, entry in shapes.items():
        layers = entry.get("layers")
        for n in ranks:
            r = next((x for x in results if x["group"] == g and x["n"] == n), None)
            if r is None or not layers:
                continue
            co, cc = r["calls"]["copy_out"]["median_ms"], r["calls"]["chunk_cat"]["median_ms"]
            total_s = layers * (2 * co + cc) / 1e3
            row = {"group": g, "n": n, "layers": layers, "copy_out_ms": co, "chunk_cat_ms": cc,
                   "per_layer_ms": 2 * co + cc, "per_step_s": total_s,
                   "copy_in_per_step_s_not_counted": layers * 2 * r["calls"]["copy_in"]["median_ms"] / 1e3}
            if entry.get("model") == PAPER["model"]:
                row["paper_per_step_s"] = PAPER["step_copy_s"]
            out.append(row)
    return out


def env_info(torch, ops_label):
    p = torch.cuda.get_device_properties(0)
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": p.name,
            "sm_count": p.multi_processor_count, "memory_bytes": p.total_memory,
            "ops": ops_label, "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        info["nvidia_smi"] = q.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------

CALL_LABEL = {
    "copy_out": "AG copy-out: split_with_sizes_copy (bf16)",
    "chunk_cat": "RS packing: _chunk_cat (bf16 -> fp32)",
    "copy_in": "AG copy-in: fp32->bf16 cast + copy (not counted)",
}


def markdown(doc):
    ref = doc["reference"]
    d2d, cast = ref["d2d_copy"]["gbps"], ref["bf16_to_fp32_copy"]["gbps"]
    e = doc["env"]
    lines = [
        f"FSDP2 layout copies on one {e['device']} (PyTorch {e['torch']}, CUDA {e['cuda']}; "
        f"{e['ops']}), median of {doc['args']['repeats']} calls after {doc['args']['warmup']} "
        "warm-up calls, CUDA events. Only the copies on one GPU: no communication runs, no "
        "compute runs beside them; timings between virtual ranks on one GPU are not NVLink timings.",
        "",
        f"Reference copy rates (bytes read + written): torch copy_ bf16 -> bf16 {d2d:,.0f} GB/s, "
        f"bf16 -> fp32 {cast:,.0f} GB/s ({ref['d2d_copy']['bytes'] / 2 / GiB:.1f} GiB source).",
        "",
        "| group | N | P | call | median ms | p10-p90 ms | moved GB | GB/s | bytes / copy rate ms | x that |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["results"]:
        for name, c in r["calls"].items():
            rate = cast if name == "chunk_cat" else d2d
            bound = c["bytes"] / (rate * 1e9) * 1e3
            lines.append(
                f"| {r['group']} | {r['n']} | {r['param_count']} | {CALL_LABEL[name]} | "
                f"{c['median_ms']:.3f} | {c['p10_ms']:.3f}-{c['p90_ms']:.3f} | {c['bytes'] / 1e9:.3f} | "
                f"{c['gbps']:,.0f} | {bound:.3f} | {c['median_ms'] / bound:.2f} |")
    lines += [
        "",
        "\"bytes / copy rate\" divides the call's bytes by the bf16 copy rate (copy-out, copy-in) "
        "or the bf16 -> fp32 copy rate (packing).",
        "",
        "Per training step, decoder layers only: layers x (2 copy-outs [forward, backward "
        "recompute] + 1 packing).",
        "",
        "| group | N | layers | copy-out ms | packing ms | per layer ms | per step s | paper per step s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in doc["step_totals"]:
        paper = f"{t['paper_per_step_s']:.2f}" if "paper_per_step_s" in t else "-"
        lines.append(f"| {t['group']} | {t['n']} | {t['layers']} | {t['copy_out_ms']:.3f} | "
                     f"{t['chunk_cat_ms']:.3f} | {t['per_layer_ms']:.3f} | {t['per_step_s']:.3f} | {paper} |")
    lines += ["", f"Paper: {PAPER['setting']}.", "", f"This table: {OURS}.", ""]
    return "\n".join(lines)


def plain_table(doc):
    ref = doc["reference"]
    out = [f"reference: d2d copy {ref['d2d_copy']['gbps']:,.0f} GB/s, bf16->fp32 "
           f"{ref['bf16_to_fp32_copy']['gbps']:,.0f} GB/s (read + write)",
           f"{'group':22s} {'N':>3s} {'call':9s} {'median ms':>10s} {'GB moved':>9s} {'GB/s':>7s} {'host us':>8s}"]
    for r in doc["results"]:
        for name, c in r["calls"].items():
            out.append(f"{r['group']:22s} {r['n']:3d} {name:9s} {c['median_ms']:10.3f} "
                       f"{c['bytes'] / 1e9:9.3f} {c['gbps']:7,.0f} {c['host_enqueue_us']:8.0f}")
    out.append("")
    out.append(f"{'per step (layers x (2 copy-out + 1 packing))':46s} {'s':>7s}  paper")
    for t in doc["step_totals"]:
        paper = f"{t['paper_per_step_s']:.2f} s" if "paper_per_step_s" in t else "-"
        out.append(f"  {t['group']:22s} N={t['n']:<3d} x{t['layers']:<3d}{'':12s} "
                   f"{t['per_step_s']:7.3f}  {paper}")
    out.append(f"paper: {PAPER['setting']}")
    out.append(f"ours: {OURS}")
    return "\n".join(out)


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.write_shapes:
        if not Path(a.tide).exists():
            die(f"no tide binary at {a.tide} (build with scripts/build.sh, or pass --tide)")
        write_shapes(a.shapes, a.tide, a.groups, a.ranks)
        return 0
    shapes = load_shapes(a.shapes, a.groups)
    if a.dry_run:
        dry_run(shapes, a.ranks)
        return 0

    torch = require_cuda()
    t_start = time.perf_counter()
    timer = Timer(torch, a.repeats, a.warmup, a.spin_cycles if hasattr(torch.cuda, "_sleep") else 0)
    ops = fsdp_ops(torch, a.direct)
    with torch.no_grad():
        reference = reference_rates(torch, timer, a.ref_bytes)
        results = []
        for g, entry in shapes.items():
            for n in a.ranks:
                r = measure_config(torch, timer, ops, g, entry, n, not a.no_verify)
                results.append(r)
                c = r["calls"]
                print(f"[{time.perf_counter() - t_start:5.1f}s] {g} N={n}: copy_out "
                      f"{c['copy_out']['median_ms']:.3f} ms, chunk_cat {c['chunk_cat']['median_ms']:.3f} ms, "
                      f"copy_in {c['copy_in']['median_ms']:.3f} ms"
                      f"{', layout verified' if r.get('verified') else ''}", flush=True)
    doc = {
        "what": ("FSDP2's layout copies for one parameter group on one GPU: all-gather copy-out "
                 "(split_with_sizes_copy), reduce-scatter packing (_chunk_cat bf16->fp32), "
                 "copy-in for reference; no communication"),
        "args": {"groups": a.groups, "ranks": a.ranks, "repeats": a.repeats, "warmup": a.warmup,
                 "spin_cycles": timer.spin, "ref_bytes": a.ref_bytes, "shapes": str(a.shapes)},
        "env": env_info(torch, ops[0]),
        "reference": reference,
        "results": results,
        "step_totals": step_totals(results, shapes, a.ranks),
        "paper": PAPER,
        "ours": OURS,
        "elapsed_s": time.perf_counter() - t_start,
    }
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=2) + "\n")
    if a.md:
        Path(a.md).write_text(markdown(doc))
    print()
    print(plain_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
