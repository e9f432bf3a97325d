"""What TIDE's per-group checks say about the FSDP groups of an spmd_types-annotated model on
FSDP2's SPMD-mesh path, with the process-group backend check left out.

PyTorch's test_fully_shard_spmd_types.py runs in one process on a 16-rank ``fake`` process
group, where enable() refuses every group for the backend alone (upstream-spmd-2d-2026-12-07/
README.md). This probe builds the same kind of layout on a fake group of 16 (storage mesh
(dp_replicate, dp_shard, cp, tp) = (2, 2, 2, 2), FSDP sharding over (dp_shard, cp) and
replicating over dp_replicate, TP S(0) beside it; bf16 parameters with fp32 reduction), runs
FSDP2's lazy init, and prints tide._fsdp_group.local_reason for each group ('' = TIDE would
take the group on a process group it runs beside) with each parameter's placements and the
local shapes TIDE would register:

    python3 bench/fsdp2_upstream/repro/spmd_types_layout_probe.py
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import DataParallelMeshDims, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import init_device_mesh
from torch.testing._internal.distributed.fake_pg import FakeStore

import spmd_types as spmd
from tide import _fsdp_group


class TwoWeights(nn.Module):
    def __init__(self):
        super().__init__()
        self.replicated = nn.Parameter(torch.randn(16, 16))  # I over TP
        self.tp_sharded = nn.Parameter(torch.randn(16, 16))  # S(0) over TP

    def forward(self, x):
        return (x @ self.replicated @ self.tp_sharded.t()).sum()


def main():
    dist.init_process_group(backend="fake", store=FakeStore(), rank=0, world_size=16)
    compute = init_device_mesh("cpu", (4, 2, 2), mesh_dim_names=("dp", "cp", "tp"))
    storage = init_device_mesh(
        "cpu", (2, 2, 2, 2), mesh_dim_names=("dp_replicate", "dp_shard", "cp", "tp")
    )
    axis = {n: spmd.MeshAxis.of(compute.get_group(n)) for n in ("dp", "cp", "tp")}
    for bf16 in (False, True):
        model = TwoWeights()
        spmd.assert_type(model.replicated, {axis["dp"]: spmd.R, axis["cp"]: spmd.R, axis["tp"]: spmd.I})
        spmd.assert_type(model.tp_sharded, {axis["dp"]: spmd.R, axis["cp"]: spmd.R, axis["tp"]: spmd.S(0)})
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
        with spmd.set_current_mesh(compute):
            fully_shard(
                model,
                mesh=storage,
                dp_mesh_dims=DataParallelMeshDims(shard=("dp_shard", "cp"), replicate="dp_replicate"),
                mp_policy=mp,
            )
        state = model._get_fsdp_state()
        state._lazy_init()
        group = state._fsdp_param_group
        print(f"param_dtype={'bf16' if bf16 else 'fp32'}: mesh_info={type(group.mesh_info).__name__} "
              f"shard group size={group.mesh_info.shard_process_group.size()}")
        for fp in group.fsdp_params:
            print(f"  {fp._param_fqn}: placements={tuple(fp.sharded_param.placements)} "
                  f"is_dtensor={getattr(fp, 'is_dtensor', None)} is_spmd_types={getattr(fp, 'is_spmd_types', None)} "
                  f"local shape={tuple(_fsdp_group.local_shape(fp))} padded shard={tuple(fp.padded_sharded_param_size)}")
        print(f"  local_reason: {_fsdp_group.local_reason(group, '')!r}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
