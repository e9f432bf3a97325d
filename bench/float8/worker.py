"""One rank of a torchao float8 training run with FSDP2, stock or with TIDE (run.py launches N).

    python worker.py stock|tide|bf16 OUT_DIR SHAPE   (RANK, WORLD_SIZE, MASTER_*, TIDE_TEST_SEED set)

The model: ``layers`` blocks (an RMSNorm, two linears dim -> hidden -> dim, SiLU, residual) and
a plain head, every block's linears converted by torchao's ``convert_to_float8_training`` with
``enable_fsdp_float8_all_gather=True`` (FSDP2 all-gathers their float8 bytes, the scale is
the extension's metadata) and precomputed dynamic scales
(``precompute_float8_dynamic_scale_for_fsdp`` after every optimizer step), as torchtitan's
float8 converter sets them up. The norms keep every block's all-gather of mixed dtypes, as in a
transformer (FSDP2 then packs bytes; a float8-only buffer is not a dtype gloo moves). One FSDP2 group per block and the root, bf16 parameters, fp32
reduction, AdamW. ``bf16`` is the same model without float8 (stock): the gap float8 itself
opens, the bound TIDE's difference to stock float8 is read against.

Devices: DEVICE=cpu (gloo), or DEVICE=cuda-shared: every rank on GPU 0, gloo with CUDA tensors
for stock FSDP2, TIDE on its ipc backend (NOTE [ipc fabric]); peak memory is then
torch.cuda.max_memory_allocated (TIDE's arena is allocated through torch, so it counts).
Writes OUT_DIR/<mode>-rank<r>.json: the loss of every step, the step times (wall clock after
a synchronize), the peak memory, tide.fsdp.report() (the all-gather dtypes and bytes) and
tide.fsdp.memory() (the arena: a block's landing slot holds its float8 bytes, not bf16's).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torchao.float8 import (
    Float8LinearConfig,
    convert_to_float8_training,
    precompute_float8_dynamic_scale_for_fsdp,
)

SHAPES = {  # dim, hidden, layers, tokens, steps
    "tiny": (64, 128, 3, 32, 5),
    "h200": (4096, 14336, 3, 1024, 6),  # NS terms near the sharded state at N = 4
}


class Block(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(dim)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return x + self.down(F.silu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, hidden) for _ in range(layers))
        self.head = nn.Linear(dim, 16, bias=False)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> int:
    mode, out_dir, shape = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    dim, hidden, layers, tokens, steps = SHAPES[shape]
    device = torch.device("cpu")
    if os.environ.get("DEVICE", "cpu") == "cuda-shared":
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    seed = int(os.environ["TIDE_TEST_SEED"])
    import tide.fsdp  # noqa: PLC0415

    torch.manual_seed(seed)
    with torch.device(device):
        model = Model(dim, hidden, layers)
    if mode != "bf16":
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=True)
        convert_to_float8_training(model, config=config,
                                   module_filter_fn=lambda m, fqn: fqn.startswith("blocks."))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if mode == "tide":
        tide.fsdp.enable(model)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    losses, seconds = {}, {}
    for step in range(steps):
        g = torch.Generator().manual_seed(seed * 31 + step * 8 + rank)
        x = torch.randn(tokens, dim, generator=g).to(device)
        y = torch.randn(tokens, 16, generator=g).to(device)
        start = time.perf_counter()
        loss = F.mse_loss(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if mode != "bf16":
            precompute_float8_dynamic_scale_for_fsdp(model)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds[step] = time.perf_counter() - start
        losses[step] = float(loss.detach())
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    out = {"losses": losses, "step_seconds": seconds, "peak_bytes": peak,
           "report": tide.fsdp.report(model) if mode == "tide" else [],
           "memory": tide.fsdp.memory(model) if mode == "tide" else None,
           "block_params": sum(p.numel() for p in Block(dim, hidden).parameters()),
           "torch": torch.__version__, "device": str(torch.cuda.get_device_name(0)) if device.type == "cuda" else "cpu"}
    (out_dir / f"{mode}-rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
