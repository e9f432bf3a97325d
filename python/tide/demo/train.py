"""One rank of the demo: a small Llama-style decoder trained with FSDP2, stock or with TIDE.

Works under torchrun (``torchrun --nproc-per-node 4 -m tide.demo.train --tide``) or under
``python -m tide.demo``, which runs it twice (stock, then TIDE) and compares. Backend: NCCL on
GPUs when there are, else gloo on CPU processes (TIDE's host backend). Rank 0 writes
``<out>/run-<stock|tide>.json``: per-step losses and times, peak memory, the TIDE report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from .model import LLAMA_3_1_70B, Config, Decoder, batch
from .peak import PeakMeter, load_libraries, peak_bytes
from .teardown import end_distributed_run

DEMO = Config(vocab=512, dim=128, layers=4, heads=4, hidden=347, seq=64)
MODELS = {"demo": DEMO, "llama3.1-70b": LLAMA_3_1_70B}


def _args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tide", action="store_true", help="enable TIDE (else stock FSDP2)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    parser.add_argument("--out", default="tide-demo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", choices=sorted(MODELS), default="demo",
                        help="demo (small), or Llama-3.1-70B decoder layers (GPUs)")
    parser.add_argument("--layers", type=int, default=0, help="decoder layers (0: the model's)")
    parser.add_argument("--seq", type=int, default=0, help="sequence length (0: the model's)")
    parser.add_argument("--mode", default="in-place", choices=("in-place", "slot-reuse"),
                        help="TIDE's reduce-scatter mode (paper Sec. 5.3)")
    return parser.parse_args(argv)


def config(args) -> Config:
    cfg = MODELS[args.model]
    if args.layers:
        cfg = dataclasses.replace(cfg, layers=args.layers)
    if args.seq:
        cfg = dataclasses.replace(cfg, seq=args.seq)
    return cfg


def _peak_memory_bytes(device: torch.device, arena: int, figures: dict) -> int:
    """torch's peak plus TIDE's arena where torch's allocator does not hold it (GPUs); on CPU the
    private peak plus the arena once it exists (NOTE [honest peak on CPU], peak.py)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)) + arena
    return peak_bytes(figures, arena)


def _backend(tide_run: bool, use_cuda: bool, shared: bool, report: list) -> str:
    """The collectives' backend: stock's process group, or the TIDE runtime's the report names."""
    if not tide_run:
        return "nccl" if use_cuda and not shared else "gloo"
    named = {r.get("runtime_backend") for r in report if r.get("backend") == "tide"} - {None}
    if named:
        return ",".join(sorted(named))
    return "host" if not use_cuda else ("ipc" if shared else "nccl")


def main(argv=None) -> None:
    args = _args(argv)
    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    # More processes than GPUs: ranks share GPUs, which NCCL refuses; stock FSDP2 then runs on
    # gloo with CUDA tensors and TIDE on its ipc backend (time-sliced: not a speed claim).
    shared = use_cuda and world_size > torch.cuda.device_count()
    if use_cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    nccl = use_cuda and not shared
    dist.init_process_group("nccl" if nccl else "gloo", device_id=device if nccl else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    load_libraries()  # both runs, before the model (NOTE [honest peak on CPU])

    torch.manual_seed(args.seed)
    cfg = config(args)
    model = Decoder(cfg).to(device)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if use_cuda else MixedPrecisionPolicy()
    for block in model.blocks:
        fully_shard(block, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    report = []
    if args.tide:
        import tide.fsdp  # noqa: PLC0415

        report = tide.fsdp.enable(model, mode=args.mode)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    meter = PeakMeter() if not use_cuda else None
    losses, times, avoided = [], [], []
    for step in range(args.steps):
        tokens = batch(cfg, args.batch, step, rank, device)
        if use_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss = model.loss(tokens)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        value = loss.detach()
        dist.all_reduce(value, op=dist.ReduceOp.AVG if nccl else dist.ReduceOp.SUM)
        if use_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(value.item() if nccl else value.item() / world)
        if args.tide:
            import tide.fsdp  # noqa: PLC0415

            total = sum(r["copy_bytes_avoided"] for r in tide.fsdp.report(model))
            avoided.append(total)
        if rank == 0:
            print(f"  [{'tide' if args.tide else 'stock'}] step {step + 1}/{args.steps} loss {losses[-1]:.4f}", flush=True)

    figures = meter.stop() if meter is not None else {}
    if args.tide:
        import tide.fsdp  # noqa: PLC0415

        report = tide.fsdp.report(model)
        memory = tide.fsdp.memory(model)
        arena = memory["arena_bytes"]
        outside = sum(c["arena_bytes"] for c in memory["communicators"] if not c.get("in_torch_allocator"))
    else:
        arena = outside = 0
        memory = {}
    peaks: list = [None] * world
    dist.all_gather_object(peaks, (_peak_memory_bytes(device, outside, figures), figures))
    peak, peak_figures = max(peaks, key=lambda p: p[0])  # the largest rank's, with its parts
    per_step = [b - a for a, b in zip([0] + avoided[:-1], avoided)]
    if rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        result = {
            "run": "tide" if args.tide else "stock",
            "backend": _backend(args.tide, use_cuda, shared, report),
            "ranks_share_gpus": shared,
            "world": world,
            "device": torch.cuda.get_device_name(device) if use_cuda else "cpu",
            "torch": torch.__version__,
            "model": dataclasses.asdict(cfg) | {"name": args.model},
            "losses": losses,
            "step_times_s": times,
            "peak_memory_bytes": peak,
            "peak_figures": peak_figures,  # PeakMeter.stop() (CPU): P_before, P_during, RSS, PSS
            "arena_bytes": arena,
            "tide_memory": memory,
            "copy_bytes_avoided_per_step": per_step,
            "report": report,
        }
        (out / f"run-{result['run']}.json").write_text(json.dumps(result, indent=1))
    end_distributed_run()  # NOTE [gloo teardown]


if __name__ == "__main__":
    main()
