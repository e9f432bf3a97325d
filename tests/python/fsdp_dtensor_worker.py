"""One rank of an FSDP2 run whose parameters are DTensors (test_fsdp_dtensor.py launches 4).

    python fsdp_dtensor_worker.py CASE stock|tide OUT_DIR   (RANK, WORLD_SIZE, MASTER_* set)

The cases (NOTE [DTensor parameters] in tide/_fsdp_group.py), on a mesh of 4 CPU processes:
  spmd       FSDP2's SPMD-mesh path: every parameter a DTensor over the mesh ("dp_shard": 4),
             ``fully_shard(..., dp_mesh_dims=DataParallelMeshDims(shard="dp_shard"))``;
  spmd-tp    the SPMD-mesh path over ("dp_shard": 2, "tp": 2): the MLP's first matrices
             sharded on dim 0 by TP as well (FSDP2's _StridedShard), the second on dim 1, the
             norm replicated (its gradient is all-reduced over TP before FSDP2 reduces it);
             bf16 parameters, fp32 reduce;
  spmd-hsdp  the SPMD-mesh path over ("dp_replicate": 2, "dp_shard": 2);
  tp         FSDP + TP as torchtitan's partial_dtensor backend builds it: TP by
             ``parallelize_module`` over mesh["tp"], FSDP over mesh["dp"]; bf16 parameters.
Layer sizes are odd where FSDP2 pads (a TP-local dim 0 of 5 rows over 2 ranks).
Each rank writes OUT_DIR/<mode>-rank<r>.json: the loss of every step and report() rows.
Seed: TIDE_TEST_SEED.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import DataParallelMeshDims, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from seed import tide_test_seed

DIM, HIDDEN, BLOCKS, BATCH, STEPS = 12, 10, 3, 8, 5


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.Parameter(torch.ones(DIM) + 0.1 * torch.randn(DIM))
        self.w1 = nn.Linear(DIM, HIDDEN, bias=False)
        self.w2 = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x):
        h = x * self.norm
        return x + self.w2(F.silu(self.w1(h)))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(DIM, 3, bias=True)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _tp_placement(name: str):
    """The TP placement of a parameter in the cases with a "tp" dimension."""
    if name.endswith("w1.weight"):
        return Shard(0)  # column-parallel: TP and FSDP both shard dim 0
    if name.endswith("w2.weight"):
        return Shard(1)  # row-parallel
    return Replicate()


def _distribute(model: Model, mesh) -> None:
    """Every parameter a DTensor over the whole mesh: Replicate on the data-parallel
    dimensions (FSDP2 shards them), the TP placement on "tp"."""
    for module_name, module in model.named_modules():
        for name, param in list(module.named_parameters(recurse=False)):
            full = f"{module_name}.{name}"
            placements = [Replicate() if d != "tp" else _tp_placement(full) for d in mesh.mesh_dim_names]
            module.register_parameter(name, nn.Parameter(distribute_tensor(param.detach(), mesh, placements)))


def build(case: str, seed: int):
    torch.manual_seed(seed)
    model = Model()
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if case == "spmd":
        mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("dp_shard",))
        dims, policy = DataParallelMeshDims(shard="dp_shard"), MixedPrecisionPolicy()
    elif case == "spmd-tp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_shard", "tp"))
        dims, policy = DataParallelMeshDims(shard="dp_shard"), bf16
    elif case == "spmd-hsdp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
        dims = DataParallelMeshDims(shard="dp_shard", replicate="dp_replicate")
        policy = MixedPrecisionPolicy()
    elif case == "tp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        plan = {}
        for i in range(BLOCKS):
            plan[f"blocks.{i}.w1"] = ColwiseParallel()
            plan[f"blocks.{i}.w2"] = RowwiseParallel()
        parallelize_module(model, mesh["tp"], plan)
        for block in model.blocks:
            fully_shard(block, mesh=mesh["dp"], mp_policy=bf16)
        fully_shard(model, mesh=mesh["dp"], mp_policy=bf16)
        return model, mesh
    else:
        raise ValueError(case)
    _distribute(model, mesh)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, dp_mesh_dims=dims, mp_policy=policy)
    fully_shard(model, mesh=mesh, dp_mesh_dims=dims, mp_policy=policy)
    return model, mesh


def batch(case: str, mesh, seed: int, step: int):
    """(inputs, targets): the global batch drawn alike on every rank, split over the
    data-parallel ranks (the SPMD cases as DTensors sharded on the batch dimension)."""
    g = torch.Generator().manual_seed(seed * 131 + step)
    x = torch.randn(BATCH, DIM, generator=g)
    y = torch.randn(BATCH, 3, generator=g)
    if case == "tp":
        dp = mesh["dp"]
        rows = BATCH // dp.size()
        start = dp.get_local_rank() * rows
        return x[start:start + rows], y[start:start + rows]
    placements = [Shard(0) if d.startswith("dp") else Replicate() for d in mesh.mesh_dim_names]
    if case == "spmd-hsdp":  # the batch split over both data-parallel dimensions
        placements = [Shard(0), Shard(0)]
    return distribute_tensor(x, mesh, placements), distribute_tensor(y, mesh, placements)


def main() -> int:
    case, mode, out_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    seed = tide_test_seed(required=True)
    import tide.fsdp  # noqa: PLC0415

    model, mesh = build(case, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    if mode == "tide":
        tide.fsdp.enable(model)
    losses = {}
    for step in range(STEPS):
        x, y = batch(case, mesh, seed, step)
        out = model(x)
        loss = F.mse_loss(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        value = loss.full_tensor() if isinstance(loss, DTensor) else loss.detach()
        losses[step] = float(value)
    out = {"losses": losses, "report": tide.fsdp.report(model)}
    (out_dir / f"{mode}-rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
