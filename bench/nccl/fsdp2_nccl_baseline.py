#!/usr/bin/env python3
"""Stock PyTorch FSDP2's collective path on the GPUs of one host, with NCCL, nccl-tests style.

For each case (a parameter group) and the flat world (one NCCL communicator over all N ranks),
every rank holds what one FSDP2 rank holds for that group and times the calls FSDP2 makes:

  All-gather (forward / backward parameter all-gather, bf16):
    ag_nccl      dist.all_gather_into_tensor(out_flat, in_flat): in_flat is this rank's packed
                 shard (S elements, the sum of the per-parameter shard sizes), out_flat is N x S,
                 rank-major. As in FSDP2 (all_gather_copy_in) in_flat is by default the rank's
                 own slice of out_flat, i.e. the all-gather runs in place; --ag-out-of-place
                 passes a separate input tensor instead.
    ag_copy_out  FSDP2's copy-out (foreach_all_gather_copy_out): torch.split_with_sizes_copy of
                 out_flat viewed (N, S), split along dim 1 by the shard sizes, into every
                 parameter's padded unsharded output (1-D, N x shard elements) viewed (N, -1):
                 rank-major in, parameter-major out.
    ag_total     both back to back.
  Reduce-scatter (gradient reduce-scatter, bf16 gradients reduced in fp32):
    rs_pack      FSDP2's packing (foreach_reduce -> foreach_reduce_scatter_copy_in):
                 torch._chunk_cat(grads_bf16, dim=0, num_chunks=N, out=rs_input_fp32.view(N, -1)),
                 which slices each gradient into N dim-0 chunks, zero-pads, upcasts to fp32 and
                 packs them rank-major in one kernel.
    rs_nccl      dist.reduce_scatter_tensor(rs_output_fp32, rs_input_fp32, op=ReduceOp.AVG).
    rs_total     both back to back.

Sharding follows FSDP2: dim-0 sharding, shard rows R = ceil(rows / N); 1-D parameters count as
(rows, 1). Padding: a parameter whose rows are not a multiple of N is padded at the end of dim 0
to N x R rows. The all-gather output of every parameter is allocated padded (N x R rows, as
FSDP2's init_all_gather_outputs does), the unsharded parameter being its first `rows` rows. The
gradients keep their true shape (rows, cols), as FSDP2's unsharded gradients do; _chunk_cat pads
them on the fly, writing zeros into the reduce-scatter input past each gradient's last row. At
N = 2, 4, 8 no parameter of the cases below needs padding; other N (3, 5, 6, 7) pad some.

Cases (--cases, default all):
  flat32m, flat128m      one parameter (N x rows, 4096) whose per-rank bf16 shard is 32 MiB /
                         128 MiB (the fp32 reduce-scatter shard is twice that).
  llama70b_layer         one Llama-3.1-70B decoder layer (9 parameters, 1.59 GiB bf16).
  qwen3_30b_a3b_layer    one Qwen3-30B-A3B decoder layer with its 128 experts as separate
                         parameters (393 parameters, 1.16 GiB bf16).

Timing: CUDA events on the current stream. --warmup untimed iterations, then --repeats timed
ones; before each, every rank runs a small all_reduce and torch.cuda.synchronize() so the ranks
start together, then queues a torch.cuda._sleep spin (--spin-cycles, 0 disables) so the host has
enqueued the timed calls before the GPU reaches them (the events then time GPU execution, not the
host's enqueue). Each repeat records three events: start, between the two calls, end. The
per-rank times of every repeat are gathered and, per repeat, the MAX over ranks is taken (a
collective is as slow as its slowest rank); the table gives the median and p10 / p90 of those
over the repeats.

Bandwidths (GB = 1e9 bytes), as nccl-tests defines them:
  all-gather      bytes = N x shard bytes (the full bf16 output);   algbw = bytes / time
  reduce-scatter  bytes = N x shard bytes (the fp32 input);         algbw = bytes / time
  busbw = algbw x (N - 1) / N. The *_total rows use the same bytes over the total time.
  copies (ag_copy_out, rs_pack): bytes = bytes read + bytes written; GB/s = bytes / time.

Correctness (once per case, untimed, outputs first filled with NaN so unwritten elements fail):
  all-gather      every rank's shard, gathered separately with dist.all_gather, must equal
                  rows [u x R, (u+1) x R) of each parameter's padded output (torch.equal), for
                  every source rank u, on every rank.
  reduce-scatter  the fp32 output shard is compared with a float64 reference: the bf16 gradients
                  are all-gathered (exact), this rank's rows are averaged in float64 and
                  zero-padded; max abs error must be < 1e-5 x max(1, max |ref|).

NVLink SHARP / multicast stays off: the script exits if NCCL_NVLS_ENABLE is set to anything but
0, and sets it to 0 otherwise. No symmetric memory or multimem operation is used.

Run (on a host with N GPUs):
  NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node N \\
      bench/nccl/fsdp2_nccl_baseline.py --out DIR [--repeats 20] [--warmup 5]
Rank 0 prints a table and writes DIR/fsdp2_nccl_baseline.json and DIR/fsdp2_nccl_baseline.md.
The exit status is 1 if a correctness check failed (the results are written anyway).
Without torch or GPUs, `--dry-run --world-size N` prints the layouts and byte counts only.
"""
import argparse
import datetime
import gc
import json
import math
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

# Imported in import_torch() so that --help and --dry-run work without PyTorch.
torch = None
dist = None

MiB = 1 << 20
BF16_BYTES = 2
FP32_BYTES = 4
FLAT_COLS = 4096
JSON_NAME = "fsdp2_nccl_baseline.json"
MD_NAME = "fsdp2_nccl_baseline.md"
OPS = ("ag_nccl", "ag_copy_out", "ag_total", "rs_pack", "rs_nccl", "rs_total")
RS_TOLERANCE = 1e-5


def die(msg, code=2):
    print(f"fsdp2_nccl_baseline: {msg}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------------------------
# Cases and FSDP2 dim-0 layout (no torch)
# ----------------------------------------------------------------------------------------------

def flat_case(shard_bytes):
    """One (N x rows, FLAT_COLS) parameter whose per-rank bf16 shard is shard_bytes."""
    rows_per_rank = shard_bytes // BF16_BYTES // FLAT_COLS

    def params(n):
        return [("flat_param", (n * rows_per_rank, FLAT_COLS))]
    return params


def llama70b_layer(_n):
    """One Llama-3.1-70B decoder layer, in module registration order."""
    return [
        ("self_attn.q_proj.weight", (8192, 8192)),
        ("self_attn.k_proj.weight", (1024, 8192)),
        ("self_attn.v_proj.weight", (1024, 8192)),
        ("self_attn.o_proj.weight", (8192, 8192)),
        ("mlp.gate_proj.weight", (28672, 8192)),
        ("mlp.up_proj.weight", (28672, 8192)),
        ("mlp.down_proj.weight", (8192, 28672)),
        ("input_layernorm.weight", (8192,)),
        ("post_attention_layernorm.weight", (8192,)),
    ]


def qwen3_30b_a3b_layer(_n):
    """One Qwen3-30B-A3B decoder layer, 128 experts as separate parameters (393 in all)."""
    params = [
        ("self_attn.q_proj.weight", (4096, 2048)),
        ("self_attn.k_proj.weight", (512, 2048)),
        ("self_attn.v_proj.weight", (512, 2048)),
        ("self_attn.o_proj.weight", (2048, 4096)),
        ("self_attn.q_norm.weight", (128,)),
        ("self_attn.k_norm.weight", (128,)),
        ("mlp.gate.weight", (128, 2048)),  # the router
    ]
    for e in range(128):
        params += [
            (f"mlp.experts.{e}.gate_proj.weight", (768, 2048)),
            (f"mlp.experts.{e}.up_proj.weight", (768, 2048)),
            (f"mlp.experts.{e}.down_proj.weight", (2048, 768)),
        ]
    params += [
        ("input_layernorm.weight", (2048,)),
        ("post_attention_layernorm.weight", (2048,)),
    ]
    return params


CASES = {
    "flat32m": flat_case(32 * MiB),
    "flat128m": flat_case(128 * MiB),
    "llama70b_layer": llama70b_layer,
    "qwen3_30b_a3b_layer": qwen3_30b_a3b_layer,
}


@dataclass(frozen=True)
class ParamLayout:
    """One parameter under FSDP2 dim-0 sharding on N ranks."""
    name: str
    shape: tuple       # the unsharded shape: (rows,) or (rows, cols)
    shard_rows: int    # R = ceil(rows / N)
    offset: int        # element offset of this parameter's shard in the packed per-rank shard

    @property
    def rows(self):
        return self.shape[0]

    @property
    def cols(self):
        return math.prod(self.shape[1:])

    @property
    def numel(self):
        return self.rows * self.cols

    @property
    def shard_numel(self):
        return self.shard_rows * self.cols

    def padded_shape(self, n):
        """Shape of the padded unsharded tensor: (N x R, ...)."""
        return (n * self.shard_rows,) + tuple(self.shape[1:])

    def shard_shape(self):
        return (self.shard_rows,) + tuple(self.shape[1:])


@dataclass(frozen=True)
class CaseLayout:
    name: str
    world_size: int
    params: tuple

    @property
    def shard_numel(self):
        """S: elements of one rank's packed shard."""
        return sum(p.shard_numel for p in self.params)

    @property
    def unsharded_numel(self):
        return sum(p.numel for p in self.params)


def make_layout(case, n):
    params, offset = [], 0
    for name, shape in CASES[case](n):
        p = ParamLayout(name, tuple(shape), -(-shape[0] // n), offset)
        params.append(p)
        offset += p.shard_numel
    return CaseLayout(case, n, tuple(params))


def case_sizes(layout):
    """Byte counts of the case's buffers and copies."""
    n, s = layout.world_size, layout.shard_numel
    padded = [{"name": p.name, "rows": p.rows, "padded_rows": n * p.shard_rows}
              for p in layout.params if p.rows % n]
    return {
        "num_params": len(layout.params),
        "shard_numel": s,
        "unsharded_numel": layout.unsharded_numel,
        "padding_numel": n * s - layout.unsharded_numel,
        "padded_params": padded,
        "ag_shard_bytes": BF16_BYTES * s,
        "ag_buffer_bytes": BF16_BYTES * n * s,
        "ag_copy_out_read_bytes": BF16_BYTES * n * s,
        "ag_copy_out_write_bytes": BF16_BYTES * n * s,
        "rs_grad_bytes": BF16_BYTES * layout.unsharded_numel,
        "rs_shard_bytes": FP32_BYTES * s,
        "rs_input_bytes": FP32_BYTES * n * s,
        "rs_pack_read_bytes": BF16_BYTES * layout.unsharded_numel,
        "rs_pack_write_bytes": FP32_BYTES * n * s,
    }


def op_bytes(op, sizes):
    """(kind, bytes) of an op: kind 'collective' (nccl-tests bytes) or 'copy' (read + written)."""
    if op == "ag_copy_out":
        return "copy", sizes["ag_copy_out_read_bytes"] + sizes["ag_copy_out_write_bytes"]
    if op == "rs_pack":
        return "copy", sizes["rs_pack_read_bytes"] + sizes["rs_pack_write_bytes"]
    if op.startswith("ag_"):
        return "collective", sizes["ag_buffer_bytes"]
    return "collective", sizes["rs_input_bytes"]


def fmt_bytes(b):
    if b >= 1 << 30:
        return f"{b / (1 << 30):.2f} GiB"
    return f"{b / MiB:.1f} MiB"


def describe_sizes(case, sizes):
    padded = ", ".join(f"{p['name']} {p['rows']}->{p['padded_rows']}"
                       for p in sizes["padded_params"][:4]) or "none"
    if len(sizes["padded_params"]) > 4:
        padded += f", ... ({len(sizes['padded_params'])} in all)"
    return (f"{case}: {sizes['num_params']} params; AG shard {fmt_bytes(sizes['ag_shard_bytes'])} "
            f"bf16, AG buffer {fmt_bytes(sizes['ag_buffer_bytes'])}; RS shard "
            f"{fmt_bytes(sizes['rs_shard_bytes'])} fp32, RS input "
            f"{fmt_bytes(sizes['rs_input_bytes'])}; copy-out r+w "
            f"{fmt_bytes(op_bytes('ag_copy_out', sizes)[1])}, pack r+w "
            f"{fmt_bytes(op_bytes('rs_pack', sizes)[1])}; padded: {padded}")


def dry_run(cases, n):
    for case in cases:
        print(describe_sizes(case, case_sizes(make_layout(case, n))))


# ----------------------------------------------------------------------------------------------
# Statistics and formatting (no torch)
# ----------------------------------------------------------------------------------------------

def percentile(values, q):
    """Linear-interpolated q-th percentile (0..100) of a non-empty list."""
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarize_op(op, sizes, n, per_repeat_ms, per_rank_median_ms):
    """Numbers of one op: per_repeat_ms is, per repeat, the max over ranks."""
    kind, nbytes = op_bytes(op, sizes)
    med = statistics.median(per_repeat_ms)
    gbps = nbytes / (med * 1e6) if med > 0 else float("nan")
    return {
        "kind": kind,
        "bytes": nbytes,
        "median_ms": med,
        "p10_ms": percentile(per_repeat_ms, 10),
        "p90_ms": percentile(per_repeat_ms, 90),
        "min_ms": min(per_repeat_ms),
        "max_ms": max(per_repeat_ms),
        "mean_ms": statistics.fmean(per_repeat_ms),
        # collectives: nccl-tests algbw / busbw; copies: effective (read + written) GB/s
        "algbw_GBps": gbps,
        "busbw_GBps": gbps * (n - 1) / n if kind == "collective" else None,
        "times_ms_max_over_ranks": per_repeat_ms,
        "per_rank_median_ms": per_rank_median_ms,
    }


TABLE_HEAD = ("case", "op", "bytes", "median ms", "p10 ms", "p90 ms", "algbw GB/s", "busbw GB/s",
              "enqueue ms", "spin ms", "host-bound")


def table_rows(results):
    rows = []
    for r in results:
        for op in OPS:
            o = r["ops"][op]
            algbw = f"{o['algbw_GBps']:.1f}" + ("*" if o["kind"] == "copy" else "")
            busbw = "-" if o["busbw_GBps"] is None else f"{o['busbw_GBps']:.1f}"
            rows.append((r["case"], op, fmt_bytes(o["bytes"]), f"{o['median_ms']:.3f}",
                         f"{o['p10_ms']:.3f}", f"{o['p90_ms']:.3f}", algbw, busbw,
                         f"{o['host_enqueue_ms_median']:.3f}", f"{o['spin_ms_median']:.3f}",
                         f"{o['host_bound_repeats']} of {len(o['times_ms_max_over_ranks'])}"))
    return rows


def text_table(results):
    rows = [TABLE_HEAD] + table_rows(results)
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEAD))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("* copies: bytes = read + written, GB/s = bytes / time (effective); "
                 "times: median / p10 / p90 over repeats of the slowest rank")
    return "\n".join(lines)


def check_text(check):
    return "PASS" if check["passed"] else "FAIL"


def markdown_report(doc):
    env, args = doc["env"], doc["args"]
    n = env["world_size"]
    out = [
        f"# Stock FSDP2 collective path, NCCL, {n} x {env['gpu_name']} (flat world)",
        "",
        "What was measured: PyTorch FSDP2's own calls around its collectives, one parameter group "
        "at a time, on every rank of one NCCL communicator over all N GPUs of one host. "
        "`ag_nccl` = `all_gather_into_tensor` of the packed bf16 shard "
        f"({'in place, as FSDP2' if args['ag_in_place'] else 'out of place'}); `ag_copy_out` = "
        "`split_with_sizes_copy` of the rank-major output into the per-parameter outputs; "
        "`rs_pack` = `_chunk_cat` of the bf16 gradients into the fp32 rank-major reduce-scatter "
        "input; `rs_nccl` = `reduce_scatter_tensor` (fp32, AVG); `*_total` = both back to back.",
        "",
        f"Command: `{doc['command']}`",
        "",
        f"Machine: {env['hostname']}, {n} x {env['gpu_name']}; torch {env['torch_version']}, "
        f"CUDA {env['cuda_version']}, NCCL {env['nccl_version']}, NCCL_NVLS_ENABLE="
        f"{env['nccl_env'].get('NCCL_NVLS_ENABLE')}; {env['date_utc']}.",
        "",
        "Each time is the median over "
        f"{args['repeats']} repeats (after {args['warmup']} warm-up iterations) of the slowest "
        "rank: per repeat, the maximum over ranks of the CUDA-event time; p10 / p90 likewise. "
        "Ranks are synchronized (all_reduce + cuda.synchronize) before every repeat, then a "
        f"`torch.cuda._sleep` spin ({args['spin_cycles']}: per case, twice the warm-up host "
        "enqueue and at least 1 ms) is queued so the events time GPU execution; `host-bound` "
        "counts the repeats whose host enqueue outlasted the spin on some rank (their times "
        "include host time). Collectives: algbw = bytes / time with bytes = N x shard bytes (all-gather "
        "output, reduce-scatter input), busbw = algbw x (N-1)/N, as in nccl-tests. Copies "
        "(marked *): bytes = read + written, GB/s = bytes / time. GB = 1e9 bytes.",
        "",
        "| " + " | ".join(TABLE_HEAD) + " |",
        "|" + "|".join(["---"] * 2 + ["---:"] * (len(TABLE_HEAD) - 2)) + "|",
    ]
    out += ["| " + " | ".join(row) + " |" for row in table_rows(doc["cases"])]
    out += [
        "",
        "## Sizes and checks",
        "",
        "| case | params | AG shard (bf16) | AG buffer | RS shard (fp32) | RS input | copy-out r+w "
        "| pack r+w | padded params | AG check | RS check (max abs err) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in doc["cases"]:
        s, ag, rs = r["sizes"], r["checks"]["all_gather"], r["checks"]["reduce_scatter"]
        err = "nan" if rs["max_abs_err"] is None else f"{rs['max_abs_err']:.2e}"
        out.append(
            f"| {r['case']} | {s['num_params']} | {fmt_bytes(s['ag_shard_bytes'])} | "
            f"{fmt_bytes(s['ag_buffer_bytes'])} | {fmt_bytes(s['rs_shard_bytes'])} | "
            f"{fmt_bytes(s['rs_input_bytes'])} | {fmt_bytes(op_bytes('ag_copy_out', s)[1])} | "
            f"{fmt_bytes(op_bytes('rs_pack', s)[1])} | {len(s['padded_params'])} | "
            f"{check_text(ag)} | {check_text(rs)} ({err}) |")
    out += [
        "",
        "Padding: FSDP2 dim-0 sharding, shard rows = ceil(rows / N); the all-gather outputs are "
        "allocated padded and `_chunk_cat` zero-pads the gradients into the reduce-scatter input.",
        "",
    ]
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# Distributed setup and environment
# ----------------------------------------------------------------------------------------------

def import_torch():
    global torch, dist
    try:
        import torch as _torch
        import torch.distributed as _dist
    except ImportError:
        die("PyTorch is not installed (only --help and --dry-run work without it)")
    torch, dist = _torch, _dist


def force_nvls_off():
    """NVLink SHARP (multicast) must stay off: refuse any other setting, default it to 0."""
    value = os.environ.get("NCCL_NVLS_ENABLE")
    if value not in (None, "0"):
        die(f"NCCL_NVLS_ENABLE={value!r}: this baseline runs with NVLS off; "
            "unset it or set NCCL_NVLS_ENABLE=0")
    os.environ["NCCL_NVLS_ENABLE"] = "0"


@dataclass
class Dist:
    rank: int
    local_rank: int
    world_size: int
    device: object


def init_distributed():
    # Allow a plain `python3 fsdp2_nccl_baseline.py` as a one-rank run.
    for key, default in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                         ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")):
        os.environ.setdefault(key, default)
    if not torch.cuda.is_available():
        die("no CUDA device")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    return Dist(dist.get_rank(), local_rank, dist.get_world_size(), device)


def run_quiet(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def nccl_version():
    v = torch.cuda.nccl.version()
    return ".".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)


def collect_env(ctx):
    props = torch.cuda.get_device_properties(ctx.device)
    mine = {"rank": ctx.rank, "hostname": socket.gethostname(),
            "device": torch.cuda.get_device_name(ctx.device)}
    devices = [None] * ctx.world_size
    dist.all_gather_object(devices, mine)
    env = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "world_size": ctx.world_size,
        "topology": "flat: one NCCL communicator over all ranks",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "nccl_version": nccl_version(),
        "gpu_name": torch.cuda.get_device_name(ctx.device),
        "gpu_memory_bytes": props.total_memory,
        "gpu_sm_count": props.multi_processor_count,
        "devices": devices,
        "nccl_env": {k: v for k, v in os.environ.items()
                     if k.startswith(("NCCL_", "TORCH_NCCL_"))},
        "python": sys.version.split()[0],
    }
    if ctx.rank == 0:
        env["nvidia_smi"] = run_quiet(
            ["nvidia-smi", "--query-gpu=index,name,driver_version,clocks.max.sm,clocks.max.mem",
             "--format=csv,noheader"])
        env["nvidia_smi_topo"] = run_quiet(["nvidia-smi", "topo", "-m"])
    return env


def free_memory():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------
# The FSDP2 calls under test
# ----------------------------------------------------------------------------------------------

class AllGatherBuffers:
    """One rank's all-gather state: packed shard, rank-major output, per-parameter outputs."""

    def __init__(self, layout, ctx, gen, in_place):
        n, s = ctx.world_size, layout.shard_numel
        kw = {"dtype": torch.bfloat16, "device": ctx.device}
        self.layout, self.n = layout, n
        self.shard = torch.randn(s, generator=gen, **kw)        # this rank's packed shard
        self.out_flat = torch.empty(n * s, **kw)                 # rank-major, N x S
        if in_place:  # FSDP2 all_gather_copy_in: the input is the rank's slice of the output
            self.in_flat = self.out_flat.narrow(0, ctx.rank * s, s)
        else:
            self.in_flat = torch.empty(s, **kw)
        self.in_flat.copy_(self.shard)
        self.out_2d = self.out_flat.view(n, s)
        # FSDP2 init_all_gather_outputs: one padded 1-D output of N x shard elements a parameter;
        # the unsharded parameter FSDP2 exposes is its first `rows` rows (viewed (N x R, ...)).
        self.outputs = [torch.empty(n * p.shard_numel, **kw) for p in layout.params]
        self.out_views = [o.view(n, -1) for o in self.outputs]
        self.split_sizes = [p.shard_numel for p in layout.params]

    def all_gather(self):
        dist.all_gather_into_tensor(self.out_flat, self.in_flat)

    def copy_out(self):
        torch.split_with_sizes_copy(self.out_2d, self.split_sizes, dim=1, out=self.out_views)

    def poison(self):
        """NaN everywhere the calls write, then restore this rank's input."""
        self.out_flat.fill_(float("nan"))
        for o in self.outputs:
            o.fill_(float("nan"))
        self.in_flat.copy_(self.shard)


class ReduceScatterBuffers:
    """One rank's reduce-scatter state: bf16 gradients, fp32 rank-major input, fp32 shard."""

    def __init__(self, layout, ctx, gen):
        n, s = ctx.world_size, layout.shard_numel
        self.layout, self.n = layout, n
        # Unsharded gradients in their true shape, as FSDP2 hands them to foreach_reduce.
        self.grads = [torch.randn(p.shape, generator=gen, dtype=torch.bfloat16, device=ctx.device)
                      for p in layout.params]
        self.rs_input = torch.empty(n * s, dtype=torch.float32, device=ctx.device)
        self.rs_input_2d = self.rs_input.view(n, s)
        self.rs_output = torch.empty(s, dtype=torch.float32, device=ctx.device)

    def pack(self):
        torch._chunk_cat(self.grads, dim=0, num_chunks=self.n, out=self.rs_input_2d)

    def reduce_scatter(self):
        dist.reduce_scatter_tensor(self.rs_output, self.rs_input, op=dist.ReduceOp.AVG)

    def poison(self):
        self.rs_input.fill_(float("nan"))
        self.rs_output.fill_(float("nan"))


# ----------------------------------------------------------------------------------------------
# Correctness checks (untimed)
# ----------------------------------------------------------------------------------------------

def check_all_gather(ag, ctx):
    """Rank u's shard must land in rows [u R, (u+1) R) of every parameter, on every rank."""
    ag.poison()
    ag.all_gather()
    ag.copy_out()
    reference = [torch.empty_like(ag.shard) for _ in range(ctx.world_size)]
    dist.all_gather(reference, ag.shard)
    bad_blocks = 0
    for i, p in enumerate(ag.layout.params):
        padded = ag.outputs[i].view(p.padded_shape(ctx.world_size))
        for u in range(ctx.world_size):
            got = padded[u * p.shard_rows:(u + 1) * p.shard_rows]
            want = reference[u][p.offset:p.offset + p.shard_numel].view(p.shard_shape())
            if not torch.equal(got, want):
                bad_blocks += 1
    del reference
    total = torch.tensor([bad_blocks], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(total)
    blocks = len(ag.layout.params) * ctx.world_size * ctx.world_size
    return {"passed": int(total.item()) == 0, "bad_blocks": int(total.item()),
            "blocks_checked": blocks}


def reference_shard(grad, p, ctx):
    """float64 average over ranks of this rank's rows of one gradient, zero-padded to R rows."""
    gathered = [torch.empty_like(grad) for _ in range(ctx.world_size)]
    dist.all_gather(gathered, grad)  # bf16 -> exact
    lo = ctx.rank * p.shard_rows
    hi = min(lo + p.shard_rows, p.rows)
    ref = torch.zeros(p.shard_shape(), dtype=torch.float64, device=ctx.device)
    if hi > lo:
        acc = ref[:hi - lo]
        for g in gathered:
            acc.add_(g[lo:hi])
        acc.div_(ctx.world_size)
    return ref


def check_reduce_scatter(rs, ctx):
    """The fp32 shard against a float64 average of the gathered bf16 gradients."""
    rs.poison()
    rs.pack()
    rs.reduce_scatter()
    errs, refs = [], []
    for p, grad in zip(rs.layout.params, rs.grads):
        ref = reference_shard(grad, p, ctx)
        got = rs.rs_output[p.offset:p.offset + p.shard_numel].view(p.shard_shape()).double()
        errs.append((got - ref).abs().max())  # NaN (an unwritten element) propagates
        refs.append(ref.abs().max())
        del ref, got
    err = torch.stack(errs).max().item()
    ref_max = torch.stack(refs).max().item()
    passed = math.isfinite(err) and err < RS_TOLERANCE * max(1.0, ref_max)
    mine = torch.tensor([err, ref_max, float(passed)], dtype=torch.float64, device=ctx.device)
    every = torch.empty((ctx.world_size, 3), dtype=torch.float64, device=ctx.device)
    dist.all_gather_into_tensor(every, mine)
    every = every.cpu().tolist()
    errs_all = [row[0] for row in every]
    return {
        "passed": all(row[2] == 1.0 for row in every),
        "max_abs_err": None if any(math.isnan(e) for e in errs_all) else max(errs_all),
        "max_abs_ref": max(row[1] for row in every),
        "tolerance": f"max abs err < {RS_TOLERANCE} * max(1, max|ref|), per rank",
    }


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------

# NOTE [host enqueue inside event timing]
# A CUDA-event interval times the GPU only if the GPU never waits for the host inside it. The
# spin queued before the start event keeps the GPU busy while the host enqueues the timed
# calls; if enqueueing takes longer than the spin, the GPU reaches the start event, idles until
# the host has launched the call, and the interval includes host time. _chunk_cat builds a
# block table on the host with one int64 per 2 KiB of one output chunk and copies it to the
# GPU through pinned memory: its enqueue grows as 1/N (bench/results/fsdp2: 162 / 385 / 723 us
# at N = 64 / 16 / 8 for a Llama-3.1-70B layer, so about 2.9 ms at N = 2), longer than a fixed
# 2e6-cycle (about 1 ms) spin. So the spin is sized per pair from the enqueue measured in the
# warm-up (--spin-cycles auto), every repeat records its host enqueue and the spin's GPU time,
# and a repeat whose enqueue outlasted its spin is counted as host-bound (and reported).

def spin_ms_per_cycle(ctx):
    """GPU milliseconds per torch.cuda._sleep cycle, timed with events."""
    cycles = 1_000_000
    torch.cuda._sleep(cycles)  # warm
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(cycles)
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / cycles


def time_pair(first, second, args, ctx):
    """Per rank and repeat: ms of first, of second, of both, host enqueue ms of first and of
    both, and the spin's GPU ms; returns (N, repeats, 6). See NOTE [host enqueue inside event
    timing]."""
    enqueue_ms = 0.0
    for _ in range(args.warmup):
        t0 = time.perf_counter()
        first()
        second()
        enqueue_ms = max(enqueue_ms, (time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    has_sleep = hasattr(torch.cuda, "_sleep")
    if not has_sleep or args.spin_cycles == 0:
        spin = 0
    elif args.spin_cycles == "auto":
        # Twice the slowest warm-up enqueue of both calls, and at least 1 ms.
        spin = int(max(1.0, 2.0 * enqueue_ms) / spin_ms_per_cycle(ctx))
    else:
        spin = args.spin_cycles
    # The ranks agree on the largest spin so they still start together.
    spin_t = torch.tensor([spin], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(spin_t, op=dist.ReduceOp.MAX)
    spin = int(spin_t.item())
    token = torch.zeros(1, device=ctx.device)
    events, host = [], []
    for _ in range(args.repeats):
        dist.all_reduce(token)       # every rank leaves this together ...
        torch.cuda.synchronize()     # ... and its GPU is idle
        e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        e[3].record()
        if spin:
            torch.cuda._sleep(spin)  # the GPU waits while the host enqueues the timed calls
        e[0].record()
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        e[1].record()
        second()
        t2 = time.perf_counter()
        e[2].record()
        e[2].synchronize()
        events.append(e)
        host.append(((t1 - t0) * 1e3, (t2 - t0) * 1e3))
    mine = torch.tensor([[a.elapsed_time(b), b.elapsed_time(c), a.elapsed_time(c), h1, h2,
                          pre.elapsed_time(a)]
                         for (a, b, c, pre), (h1, h2) in zip(events, host)],
                        dtype=torch.float64, device=ctx.device)
    every = torch.empty((ctx.world_size,) + tuple(mine.shape), dtype=torch.float64,
                        device=ctx.device)
    dist.all_gather_into_tensor(every, mine)
    return every.cpu(), spin


def summarize_pair(names, timed, sizes, n):
    """names: the three ops timed by time_pair; timed: its (times (N, repeats, 6), spin)."""
    times, spin = timed
    slowest = times[:, :, :3].max(dim=0).values  # (repeats, 3): per repeat, the slowest rank
    # Host enqueue of the first call, and of both, against the spin's GPU time, per rank and
    # repeat (NOTE [host enqueue inside event timing]).
    enq_first, enq_both, spin_ms = times[:, :, 3], times[:, :, 4], times[:, :, 5]
    host_bound = [int((enq_first > spin_ms).any(dim=0).sum()),
                  int((enq_both > spin_ms).any(dim=0).sum()),
                  int((enq_both > spin_ms).any(dim=0).sum())]
    enqueue = [enq_first, enq_both - enq_first, enq_both]
    out = {}
    for k, name in enumerate(names):
        o = summarize_op(name, sizes, n, slowest[:, k].tolist(),
                         [statistics.median(times[r, :, k].tolist())
                          for r in range(times.shape[0])])
        o["host_enqueue_ms_median"] = statistics.median(enqueue[k].flatten().tolist())
        o["spin_cycles"] = spin
        o["spin_ms_median"] = statistics.median(spin_ms.flatten().tolist())
        o["host_bound_repeats"] = host_bound[k]
        out[name] = o
    return out


def run_case(index, case, args, ctx):
    n = ctx.world_size
    layout = make_layout(case, n)
    sizes = case_sizes(layout)
    gen = torch.Generator(device=ctx.device)
    gen.manual_seed(args.seed + 1_000_003 * ctx.rank + 7919 * index)  # differs per rank

    ag = AllGatherBuffers(layout, ctx, gen, in_place=not args.ag_out_of_place)
    ag_check = check_all_gather(ag, ctx)
    ag_times = time_pair(ag.all_gather, ag.copy_out, args, ctx)
    del ag
    free_memory()

    rs = ReduceScatterBuffers(layout, ctx, gen)
    rs_check = check_reduce_scatter(rs, ctx)
    rs_times = time_pair(rs.pack, rs.reduce_scatter, args, ctx)
    del rs
    free_memory()

    ops = summarize_pair(("ag_nccl", "ag_copy_out", "ag_total"), ag_times, sizes, n)
    ops.update(summarize_pair(("rs_pack", "rs_nccl", "rs_total"), rs_times, sizes, n))
    return {"case": case, "sizes": sizes,
            "params": [{"name": p.name, "shape": list(p.shape), "shard_rows": p.shard_rows}
                       for p in layout.params],
            "checks": {"all_gather": ag_check, "reduce_scatter": rs_check},
            "ops": {op: ops[op] for op in OPS}}


# ----------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------

def reconstructed_command(n):
    script = sys.argv[0]
    return ("NCCL_NVLS_ENABLE=0 " + shlex.join(
        ["torchrun", "--standalone", "--nproc-per-node", str(n), script] + sys.argv[1:]))


def json_safe(x):
    """NaN / inf become null so the JSON stays standard."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def write_outputs(doc, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, JSON_NAME)
    md_path = os.path.join(out_dir, MD_NAME)
    with open(json_path, "w") as f:
        json.dump(json_safe(doc), f, indent=1)
        f.write("\n")
    with open(md_path, "w") as f:
        f.write(markdown_report(doc))
    return json_path, md_path


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------

def spin_cycles_arg(text):
    if text == "auto":
        return text
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 'auto' or >= 0")
    return value


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Stock FSDP2 all-gather / reduce-scatter path with NCCL on the GPUs of one "
                    "host (launch with torchrun; see the module docstring).")
    ap.add_argument("--out", help="directory for fsdp2_nccl_baseline.json / .md (required "
                                  "unless --dry-run)")
    ap.add_argument("--repeats", type=int, default=20, help="timed iterations (default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed iterations (default 5)")
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES),
                    metavar="CASE", help=f"cases to run, of {', '.join(CASES)} (default all)")
    ap.add_argument("--spin-cycles", type=spin_cycles_arg, default="auto",
                    help="torch.cuda._sleep cycles queued before each timed repeat so the "
                         "events time GPU execution, not host enqueue; 'auto' (default) sizes "
                         "the spin per case to twice the warm-up enqueue and at least 1 ms "
                         "(NOTE [host enqueue inside event timing]); 0 disables")
    ap.add_argument("--seed", type=int, default=1234, help="base random seed (per rank offset)")
    ap.add_argument("--ag-out-of-place", action="store_true",
                    help="all-gather from a separate input tensor instead of in place from the "
                         "rank's slice of the output (FSDP2 gathers in place)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the layouts and byte counts for --world-size and exit (no torch)")
    ap.add_argument("--world-size", type=int, default=8, help="N for --dry-run (default 8)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.warmup < 1:
        ap.error("--repeats and --warmup must be >= 1 (the warm-up sizes the spin)")
    if not args.dry_run and not args.out:
        ap.error("--out is required")
    return args


def main():
    args = parse_args()
    if args.dry_run:
        dry_run(args.cases, args.world_size)
        return 0
    force_nvls_off()  # before NCCL initializes
    import_torch()
    ctx = init_distributed()
    env = collect_env(ctx)
    lead = ctx.rank == 0
    if lead:
        print(f"fsdp2_nccl_baseline: N={ctx.world_size} x {env['gpu_name']}, torch "
              f"{env['torch_version']}, NCCL {env['nccl_version']}, NCCL_NVLS_ENABLE=0, "
              f"{args.repeats} repeats after {args.warmup} warm-up", flush=True)

    results = []
    for index, case in enumerate(args.cases):
        if lead:
            print(describe_sizes(case, case_sizes(make_layout(case, ctx.world_size))), flush=True)
        r = run_case(index, case, args, ctx)
        results.append(r)
        if lead:
            ag, rs = r["checks"]["all_gather"], r["checks"]["reduce_scatter"]
            print(f"  checks: all-gather {check_text(ag)} ({ag['bad_blocks']} bad of "
                  f"{ag['blocks_checked']} blocks), reduce-scatter {check_text(rs)} (max abs err "
                  f"{rs['max_abs_err']}, max |ref| {rs['max_abs_ref']:.3f})", flush=True)

    passed = all(r["checks"][c]["passed"] for r in results for c in r["checks"])
    if lead:
        doc = {
            "benchmark": "fsdp2_nccl_baseline",
            "what": "stock PyTorch FSDP2 all-gather (+ copy-out) and reduce-scatter (+ packing) "
                    "with NCCL, flat world on one host; times are per repeat the max over "
                    "ranks, summarized by median / p10 / p90 over repeats",
            "command": reconstructed_command(ctx.world_size),
            "argv": sys.argv,
            "args": {"repeats": args.repeats, "warmup": args.warmup, "cases": args.cases,
                     "spin_cycles": args.spin_cycles, "seed": args.seed,
                     "ag_in_place": not args.ag_out_of_place},
            "env": env,
            "all_checks_passed": passed,
            "cases": results,
        }
        print()
        print(text_table(results))
        json_path, md_path = write_outputs(doc, args.out)
        print(f"\nwrote {json_path}\nwrote {md_path}")
        if not passed:
            print("fsdp2_nccl_baseline: a correctness check FAILED", file=sys.stderr)

    dist.barrier()
    dist.destroy_process_group()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
