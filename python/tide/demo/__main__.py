"""``python -m tide.demo``: FSDP2 training, stock then with TIDE, compared side by side.

Launches the ranks of ``tide.demo.train`` twice (4 CPU processes on TIDE's host backend when
there is no GPU, else one process per GPU with NCCL), then prints the losses side by side,
step times, the layout-copy bytes avoided per step, peak memory and the groups on TIDE, and
writes ``<out>/summary.json`` and ``<out>/loss.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gpus() -> int:
    import torch  # noqa: PLC0415

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _launch(procs: int, train_args: list[str], log) -> None:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(procs), LOCAL_WORLD_SIZE=str(procs), OMP_NUM_THREADS="1")
    # Device-side waits hold hardware queues; with CUDA's default 8 a held TIDE wait stalls
    # unrelated work (bench/results/hwqueues/): both runs get the paper's 32 (App. E).
    env.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    children = []
    for rank in range(procs):
        child_env = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
        children.append(subprocess.Popen(
            [sys.executable, "-m", "tide.demo.train", *train_args], env=child_env,
            stdout=None if rank == 0 else log, stderr=log))
    codes = [c.wait() for c in children]
    if any(codes):
        raise SystemExit(f"tide.demo: a rank failed (exit codes {codes}); see {log.name}")


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _plot(stock: dict, tide: dict, path: Path) -> bool:
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    steps = range(1, len(stock["losses"]) + 1)
    fig, (ax_loss, ax_time) = plt.subplots(1, 2, figsize=(10, 4))
    ax_loss.plot(steps, stock["losses"], "o-", label="stock FSDP2")
    ax_loss.plot(steps, tide["losses"], "x--", label="FSDP2 + TIDE")
    ax_loss.set(xlabel="step", ylabel="loss", title="Training loss")
    ax_loss.legend()
    ax_time.plot(steps, [t * 1e3 for t in stock["step_times_s"]], "o-", label="stock FSDP2")
    ax_time.plot(steps, [t * 1e3 for t in tide["step_times_s"]], "x--", label="FSDP2 + TIDE")
    ax_time.set(xlabel="step", ylabel="ms", title="Step time")
    ax_time.legend()
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    for ax in (ax_loss, ax_time):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(f"{tide['world']} ranks, {tide['backend']} backend, torch {tide['torch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="tide-demo", help="where summary.json and loss.png go")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--procs", type=int, default=0, help="ranks (default: GPUs, else 4)")
    parser.add_argument("--model", default="demo", help="demo, or llama3.1-70b (GPUs)")
    parser.add_argument("--layers", type=int, default=0, help="decoder layers (0: the model's)")
    parser.add_argument("--seq", type=int, default=0, help="sequence length (0: the model's)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per rank per step")
    parser.add_argument("--mode", default="in-place", choices=("in-place", "slot-reuse"),
                        help="TIDE's reduce-scatter mode (paper Sec. 5.3)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpus = _gpus()
    procs = args.procs or (gpus if gpus else 4)
    if not gpus:
        where = f"{procs} CPU processes, TIDE host backend (gloo for stock)"
    elif procs > gpus:
        where = (f"{procs} processes on {gpus} GPU(s): gloo with CUDA tensors for stock, TIDE's "
                 "ipc backend; the GPU time-slices the processes, so step times are no speed claim")
    else:
        where = f"{procs} GPUs, NCCL"
    print(f"tide.demo: a small Llama-style decoder, FSDP2, {args.steps} steps, {where}", flush=True)
    common = ["--steps", str(args.steps), "--out", str(out), "--model", args.model, "--layers",
              str(args.layers), "--seq", str(args.seq), "--batch", str(args.batch), "--mode", args.mode]
    with open(out / "train.log", "w") as log:
        for name, extra in (("stock FSDP2", []), ("FSDP2 + TIDE", ["--tide"])):
            print(f"tide.demo: training with {name} ...", flush=True)
            start = time.perf_counter()
            _launch(procs, common + extra, log)
            print(f"tide.demo: {name} done in {time.perf_counter() - start:.0f} s", flush=True)
    stock = json.loads((out / "run-stock.json").read_text())
    tide = json.loads((out / "run-tide.json").read_text())

    diffs = [abs(a - b) for a, b in zip(stock["losses"], tide["losses"])]
    print()
    print(f"{'step':>4}  {'loss stock':>11}  {'loss TIDE':>11}  {'|diff|':>9}  {'ms stock':>9}  {'ms TIDE':>9}")
    for i, (ls, lt, d, ts, tt) in enumerate(zip(stock["losses"], tide["losses"], diffs,
                                                stock["step_times_s"], tide["step_times_s"])):
        print(f"{i + 1:>4}  {ls:>11.6f}  {lt:>11.6f}  {d:>9.2e}  {ts * 1e3:>9.1f}  {tt * 1e3:>9.1f}")
    steady = slice(1, None) if len(diffs) > 1 else slice(None)

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2]

    def spread(times_s):  # ms over the last 40 steps (all but the first when fewer)
        xs = sorted(t * 1e3 for t in times_s[-40:] if len(times_s) > 40) or sorted(
            t * 1e3 for t in times_s[steady])
        at = lambda q: xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]  # noqa: E731
        return {"median": at(0.5), "p10": at(0.1), "p90": at(0.9), "steps": len(xs)}

    avoided = tide["copy_bytes_avoided_per_step"]
    groups = [r["group"] for r in tide["report"] if r["backend"] == "tide"]
    stock_groups = [f"{r['group']} ({r['reason']})" for r in tide["report"] if r["backend"] != "tide"]
    print()
    print(f"max loss difference      {max(diffs):.3e}")
    print(f"step time (median)       stock {median(stock['step_times_s'][steady]) * 1e3:.1f} ms, "
          f"TIDE {median(tide['step_times_s'][steady]) * 1e3:.1f} ms")
    print(f"layout-copy bytes avoided {_mib(median(avoided[steady]))} per step")
    print(f"peak memory              stock {_mib(stock['peak_memory_bytes'])}, TIDE {_mib(tide['peak_memory_bytes'])}"
          + ("  (a rank's private memory plus its own arena: NOTE [honest peak on CPU])" if not gpus
             else "  (torch's max_memory_allocated; TIDE's arena in a torch MemPool, included)"))
    print(f"TIDE arena               {_mib(tide.get('arena_bytes', 0))} per rank (one per communicator: "
          "ring slots, stage, reduce-scatter areas)")
    print(f"groups on TIDE           {len(groups)} of {len(tide['report'])}: {', '.join(groups)}")
    if stock_groups:
        print(f"groups on stock          {', '.join(stock_groups)}")

    summary = {
        "steps": list(range(1, len(stock["losses"]) + 1)),
        "loss_stock": stock["losses"],
        "loss_tide": tide["losses"],
        "max_loss_diff": max(diffs),
        "loss_max_rel_diff": max(d / max(abs(a), 1e-30) for d, a in zip(diffs, stock["losses"])),
        "step_ms_stock": spread(stock["step_times_s"]),
        "step_ms_tide": spread(tide["step_times_s"]),
        "model": tide.get("model"),
        "groups_on_tide": groups,
        "copy_bytes_avoided_per_step": median(avoided[steady]),
        "backend": tide["backend"],
        "world": tide["world"],
        "device": tide["device"],
        "torch": tide["torch"],
        "step_time_ms_stock": [t * 1e3 for t in stock["step_times_s"]],
        "step_time_ms_tide": [t * 1e3 for t in tide["step_times_s"]],
        "peak_memory_bytes_stock": stock["peak_memory_bytes"],
        "peak_memory_bytes_tide": tide["peak_memory_bytes"],
        "arena_bytes_tide": tide.get("arena_bytes", 0),
        "tide_memory": tide.get("tide_memory", {}),
        "report": tide["report"],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    plotted = _plot(stock, tide, out / "loss.png")
    print(f"\nwrote {out / 'summary.json'}" + (f" and {out / 'loss.png'}" if plotted else " (no matplotlib: no plot)"))


if __name__ == "__main__":
    main()
