#!/usr/bin/env python3
"""Step time of the NS-scale model with TIDE's arena lent to the optimizer step or not.

bench/memory/ns_scale.py reports peak memory only (no step times). This trains the same model
(bench/memory/run.py's "llama1b": 4 Llama-3.2-1B decoder layers, hidden 2048, SwiGLU 8192,
GQA 32/8 heads, vocabulary 512, 2 sequences of 32 tokens; FSDP2 with bf16 parameters and fp32
reduction, one group per layer and the root; torch's default AdamW) with N processes on the
GPU (TIDE on its ipc backend), once with TIDE_LEND_ARENA=1 (the default) and once with
TIDE_LEND_ARENA=0, in fresh processes, runs interleaved.

Per step, every rank: cuda synchronize + barrier (untimed), then wall clock over
forward + backward + optimizer.step + zero_grad + cuda synchronize; CUDA events split the
optimizer phase (step + zero_grad, where the lending fences sit) from forward + backward.
A step's time is the largest rank's. Per run: median and [p10, p90] over the timed steps.

    python3 step_time.py --worlds 2 4 8 --modes in-place --repeats 2 --out DIR

needs `import tide` to work (PYTHONPATH) and a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def worker(a) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from tide.demo.model import Config, Decoder, batch
    from tide.demo.teardown import end_distributed_run

    local = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group("gloo")  # ranks share one GPU: stock on gloo, TIDE on ipc
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = Config(vocab=512, dim=2048, layers=a.layers, heads=32, hidden=8192, seq=32, kv_heads=8)
    torch.manual_seed(0)
    model = Decoder(cfg).to(device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    if a.system != "stock":
        import tide.fsdp

        tide.fsdp.enable(model, mode=a.system)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    walls, fb, opt, losses = [], [], [], []
    for step in range(a.warmup + a.steps):
        torch.cuda.synchronize(device)
        dist.barrier()
        e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        t0 = time.perf_counter()
        e0.record()
        loss = model.loss(batch(cfg, 2, step, rank, device))
        loss.backward()
        e1.record()
        optimizer.step()
        optimizer.zero_grad()
        e2.record()
        torch.cuda.synchronize(device)
        t1 = time.perf_counter()
        losses.append(loss.item())
        if step >= a.warmup:
            walls.append((t1 - t0) * 1e3)
            fb.append(e0.elapsed_time(e1))
            opt.append(e1.elapsed_time(e2))
    lent = None
    if a.system != "stock":
        import tide.fsdp

        comms = tide.fsdp.memory(model)["communicators"]
        lent = [{"arena_bytes": c.get("arena_bytes"), "lent_bytes": c.get("lent_bytes"),
                 "lent_steps": c.get("lent_steps"), "lend_reason": c.get("lend_reason")}
                for c in comms]
    mine = {"rank": rank, "wall_ms": walls, "fwd_bwd_ms": fb, "opt_ms": opt, "losses": losses,
            "lent": lent, "max_allocated": int(torch.cuda.max_memory_allocated(device)),
            "device": torch.cuda.get_device_name(device)}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        Path(a.out_file).write_text(json.dumps(everyone) + "\n")
    end_distributed_run()


def launch(world: int, system: str, lend: str, a, scratch: Path, tag: str) -> dict:
    out = scratch / f"{tag}.json"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(world), OMP_NUM_THREADS="1", LOCAL_WORLD_SIZE=str(world),
               TIDE_LEND_ARENA=lend)
    args = [sys.executable, __file__, "--worker", "--system", system, "--layers", str(a.layers),
            "--warmup", str(a.warmup), "--steps", str(a.steps), "--out-file", str(out)]
    started = time.time()
    procs = [subprocess.Popen(args, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    logs = [p.communicate(timeout=a.timeout)[0] for p in procs]
    if any(p.returncode for p in procs):
        return {"world": world, "system": system, "lend": lend, "failed": "\n".join(logs)[-3000:]}
    ranks = json.loads(out.read_text())
    steps = len(ranks[0]["wall_ms"])
    wall = [max(r["wall_ms"][i] for r in ranks) for i in range(steps)]
    opt = [max(r["opt_ms"][i] for r in ranks) for i in range(steps)]
    fb = [max(r["fwd_bwd_ms"][i] for r in ranks) for i in range(steps)]
    return {"world": world, "system": system, "lend": lend, "steps": steps,
            "seconds": round(time.time() - started, 1), "device": ranks[0]["device"],
            "step_ms": statistics.median(wall), "step_p10": pct(wall, 0.1), "step_p90": pct(wall, 0.9),
            "opt_ms": statistics.median(opt), "opt_p10": pct(opt, 0.1), "opt_p90": pct(opt, 0.9),
            "fwd_bwd_ms": statistics.median(fb),
            "max_allocated_mib": max(r["max_allocated"] for r in ranks) / 2**20,
            "lent": ranks[0]["lent"], "losses_rank0": ranks[0]["losses"],
            "per_step_wall_ms": wall, "per_step_opt_ms": opt}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--system", default="in-place")
    p.add_argument("--out-file")
    p.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--modes", nargs="+", default=["in-place"])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--stock-worlds", type=int, nargs="*", default=[])
    p.add_argument("--timeout", type=int, default=240)
    p.add_argument("--out", default="step-time")
    a = p.parse_args()
    if a.worker:
        worker(a)
        return
    import tempfile

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    started = time.time()

    def save() -> None:
        (out / "step_time.json").write_text(json.dumps(
            {"command": " ".join([sys.executable, *sys.argv]), "warmup": a.warmup,
             "steps": a.steps, "seconds": round(time.time() - started), "rows": rows}, indent=1) + "\n")

    with tempfile.TemporaryDirectory() as scratch:
        for world in a.worlds:
            for mode in a.modes:
                for rep in range(a.repeats):  # interleaved: lend on, off, on, off
                    for lend in ("1", "0"):
                        r = launch(world, mode, lend, a, Path(scratch), f"{world}-{mode}-{lend}-{rep}")
                        r["repeat"] = rep
                        rows.append(r)
                        save()
                        if "failed" in r:
                            print(f"N={world} {mode} lend={lend} FAILED: {r['failed'][-800:]}", flush=True)
                        else:
                            print(f"N={world} {mode:10s} lend={lend} rep {rep}: step {r['step_ms']:.2f} ms "
                                  f"[{r['step_p10']:.2f}, {r['step_p90']:.2f}] opt {r['opt_ms']:.2f} ms "
                                  f"fwd+bwd {r['fwd_bwd_ms']:.2f} ms lent {r['lent']} "
                                  f"({time.time() - started:.0f} s)", flush=True)
        for world in a.stock_worlds:
            r = launch(world, "stock", "1", a, Path(scratch), f"{world}-stock")
            r["repeat"] = 0
            rows.append(r)
            save()
            print(f"N={world} stock: {r.get('step_ms', r.get('failed', '')[-400:])}", flush=True)
    print("| N | mode | lend | repeat | step ms median [p10, p90] | opt step ms median | lent steps |")
    print("| ---: | --- | --- | ---: | --- | ---: | --- |")
    for r in rows:
        if "failed" in r:
            print(f"| {r['world']} | {r['system']} | {r['lend']} | {r['repeat']} | FAILED | | |")
            continue
        lent = [c.get("lent_steps") for c in (r["lent"] or [])]
        print(f"| {r['world']} | {r['system']} | {r['lend']} | {r['repeat']} | {r['step_ms']:.2f} "
              f"[{r['step_p10']:.2f}, {r['step_p90']:.2f}] | {r['opt_ms']:.2f} | {lent} |")


if __name__ == "__main__":
    main()
