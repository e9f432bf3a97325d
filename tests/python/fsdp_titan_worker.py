"""One rank of a torchtitan-style training loop (test_fsdp_titan_loop.py launches every rank).

    python fsdp_titan_worker.py stock|tide OUT_DIR [--resume]   (RANK, WORLD_SIZE, MASTER_* set)

The loop a user writes, with tide.fsdp.enable(model) as its one extra line:
  - a Llama-style decoder, bf16 parameters and fp32 reduce (MixedPrecisionPolicy);
  - activation checkpointing on every block, then torch.compile per block (inductor on CPU,
    TIDE_LOOP_COMPILE=0 leaves it out), then fully_shard per block and on the root, the last
    block with reshard_after_forward=False;
  - 2 micro-batches per step with no-sync on the first, clip_grad_norm_ and AdamW;
  - an evaluation forward under no_grad every 3 steps;
  - a DCP save of the model and optimizer after step SAVE_AT; ``--resume`` loads it in new
    processes and runs the steps after it.
TIDE_LOOP_DEVICE=cuda-shared puts every rank on GPU 0 (gloo with CUDA tensors, TIDE's ipc
backend), as the one-GPU parity run does; peak memory is then torch's (the arena included).
Each rank writes OUT_DIR/<mode>[-resume]-rank<r>.json: losses (the sum over micro-batches),
eval losses, report() rows, its peak memory (NOTE [honest peak on CPU]) and its arena.
Seed: TIDE_TEST_SEED.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from tide.demo.model import Config, Decoder, batch
from tide.demo.peak import PeakMeter, load_libraries, peak_bytes

from seed import tide_test_seed

# Layers of 3.5 MiB in bf16 (NS): large enough that the per-layer terms of the peak outweigh
# TIDE's fixed host state (a few MiB) on CPU, small enough for 4 CPU processes.
CFG = Config(vocab=128, dim=512, layers=3, heads=4, hidden=1366, seq=16, kv_heads=2)
STEPS = 7
SAVE_AT = 3  # the checkpoint holds the state after steps 0..SAVE_AT
MICRO_BATCHES = 2
EVAL_EVERY = 3


DEVICE = torch.device("cpu")


def build(seed: int) -> Decoder:
    from torch.distributed.device_mesh import DeviceMesh  # noqa: PLC0415

    torch.manual_seed(seed)
    model = Decoder(CFG).to(DEVICE)
    mesh = DeviceMesh.from_group(dist.group.WORLD, DEVICE.type)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    compile_blocks = os.environ.get("TIDE_LOOP_COMPILE", "1") != "0"
    for i, block in enumerate(model.blocks):
        block = checkpoint_wrapper(block)
        if compile_blocks:
            block.compile(backend="inductor")
        model.blocks[i] = block
        fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=i < len(model.blocks) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def _private_bytes() -> int:
    from tide.demo.peak import _status  # noqa: PLC0415

    s = _status()
    return s.get("RssAnon", 0) + s.get("RssFile", 0)


def main() -> int:
    mode, out_dir = sys.argv[1], Path(sys.argv[2])
    resume = "--resume" in sys.argv
    global DEVICE
    if os.environ.get("TIDE_LOOP_DEVICE", "cpu") == "cuda-shared":
        DEVICE = torch.device("cuda", 0)
        torch.cuda.set_device(DEVICE)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    seed = tide_test_seed(required=True)
    load_libraries()  # both runs alike (NOTE [honest peak on CPU])
    import tide.fsdp  # noqa: PLC0415

    meter = PeakMeter()
    model = build(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    checkpoint = out_dir / "checkpoint"
    first = 0
    if resume:
        state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
        dcp.load(state, checkpoint_id=str(checkpoint))
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, opt, state["optim"])
        first = SAVE_AT + 1
    if mode == "tide":
        tide.fsdp.enable(model)
    # The process's memory as the loop starts: the model, the optimizer and, with TIDE, its
    # communicator (a fixed cost per process, reported apart from what the loop holds).
    at_start = _private_bytes() if DEVICE.type == "cpu" else torch.cuda.memory_allocated(DEVICE)
    losses, evals, norms = {}, {}, {}
    for step in range(first, STEPS):
        total = 0.0
        for micro in range(MICRO_BATCHES):
            model.set_requires_gradient_sync(micro == MICRO_BATCHES - 1)
            tokens = batch(CFG, 2, seed % 997 + 10 * step + micro, rank, DEVICE)
            loss = model.loss(tokens) / MICRO_BATCHES
            loss.backward()
            total += loss.item()
        norms[step] = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0).full_tensor())
        opt.step()
        opt.zero_grad()
        losses[step] = total
        if step % EVAL_EVERY == 0:
            with torch.no_grad():
                tokens = batch(CFG, 2, seed % 997 + 5000 + step, rank, DEVICE)
                evals[step] = model.loss(tokens).item()
        if step == SAVE_AT and not resume:
            state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
            dcp.save(state, checkpoint_id=str(checkpoint))
    figures = meter.stop()
    memory = tide.fsdp.memory(model) if mode == "tide" else {}
    arena = memory.get("arena_bytes", 0)
    if DEVICE.type == "cuda":  # the arena is in torch's allocator (a MemPool)
        figures = {"torch_max_memory_allocated": torch.cuda.max_memory_allocated(DEVICE)}
    out = {
        "losses": losses,
        "evals": evals,
        "grad_norms": norms,
        "report": tide.fsdp.report(model) if mode == "tide" else [],
        "arena_bytes": arena,
        "memory": memory,
        "device": DEVICE.type,
        "peak_bytes": figures["torch_max_memory_allocated"] if DEVICE.type == "cuda" else peak_bytes(figures, arena),
        "peak_figures": figures,
        "loop_start_bytes": at_start,
    }
    name = f"{mode}{'-resume' if resume else ''}-rank{rank}.json"
    (out_dir / name).write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
