"""One rank of an FSDP2 run with all-gather extensions (test_fsdp_extensions.py launches 4).

    python fsdp_extension_worker.py CASE stock|tide OUT_DIR   (RANK, WORLD_SIZE, MASTER_* set)

Every block's two matrices are tensor subclasses of this file that choose what FSDP2
all-gathers (``fsdp_pre_all_gather`` / ``fsdp_post_all_gather``); the norms and biases stay
plain, so every group mixes both. The float8 case's matrices have 10 rows (FSDP2 pads them to 3 per rank).
  float8     a per-tensor float8 cast (torch.float8_e4m3fn) with a scale from the amax over the
             shard ranks (an all-reduce inside the pre-all-gather, as torchao's dynamic
             scaling makes): one output, float8 bytes; the scale is the metadata;
  rowwise    two outputs per parameter: float8 rows and their fp32 scales (one per row);
  nf4        frozen weights as 4-bit codes, two per byte, and an fp32 absmax per row (uint8 and
             fp32 outputs); the block's other parameters train;
  odd        an output with an odd number of bytes per rank (3 uint8 codes per row of a
             3-wide matrix, one code per byte) and fp32 absmax: landed in single bytes;
  misaligned the odd case with a float64 absmax, which would land at a byte offset that is
             not a multiple of 8: the group stays on stock FSDP2 with the reason, nothing
             breaks.
Each rank writes OUT_DIR/<mode>-rank<r>.json: the loss of every step, report() rows, and
whether the all-gather outputs of the last step's second block were byte-equal to a
reference all-gather of every rank's pre-all-gather outputs (dist.all_gather).
Seed: TIDE_TEST_SEED.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import _unsafe_preserve_version_counter
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils import _pytree as pytree

from seed import tide_test_seed

DIM, BLOCKS, BATCH, STEPS = 12, 3, 6, 5
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def _rows(kind: str) -> int:
    """The matrices' rows: 10 over 4 ranks for the one-output case (FSDP2 pads its shards to
    3 rows); 12 where an extension returns outputs of several shapes, which FSDP2 allows only
    for evenly sharded parameters."""
    return 10 if kind == "float8" else 12


def _padded_rows(outer_size, mesh) -> int:
    return math.ceil(outer_size[0] / mesh.size())


def _pad(data: torch.Tensor, rows: int) -> torch.Tensor:
    """The shard with FSDP2's dim-0 padding (the last ranks' shards are short or empty)."""
    if data.size(0) == rows:
        return data
    out = data.new_zeros((rows,) + tuple(data.shape[1:]))
    out[: data.size(0)].copy_(data)
    return out


class Quantized(torch.Tensor):
    """An fp32 parameter that all-gathers a quantized form of itself (``kind`` says which)."""

    @staticmethod
    def __new__(cls, data: torch.Tensor, kind: str):
        return torch.Tensor._make_wrapper_subclass(
            cls, data.shape, data.stride(), data.storage_offset(), dtype=data.dtype,
            device=data.device, requires_grad=data.requires_grad)

    def __init__(self, data: torch.Tensor, kind: str):
        self._data = data
        self._kind = kind

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        kinds = []

        def unwrap(x):
            kinds.append(x._kind)
            return x._data

        out = func(*pytree.tree_map_only(cls, unwrap, args), **pytree.tree_map_only(cls, unwrap, kwargs or {}))
        return pytree.tree_map_only(torch.Tensor, lambda x: cls(x, kinds[0]), out)

    def __tensor_flatten__(self):
        return ["_data"], self._kind

    @staticmethod
    def __tensor_unflatten__(inner, kind, outer_size, outer_stride):
        return Quantized(inner["_data"], kind)

    def fsdp_pre_all_gather(self, mesh, outer_size, outer_stride, module, mp_policy):
        data = _pad(self._data, _padded_rows(outer_size, mesh)).float()
        if self._kind == "float8":
            amax = data.abs().max().reshape(1).clamp(min=1e-12)
            dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=mesh.get_group())
            scale = FP8_MAX / amax
            return ((data * scale).to(FP8),), scale
        if self._kind == "rowwise":
            scale = FP8_MAX / data.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
            return ((data * scale).to(FP8), scale), None
        if self._kind in ("nf4", "odd", "misaligned"):  # 4-bit codes of the row's absmax
            absmax = data.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
            codes = torch.round((data / absmax) * 7.0 + 8.0).clamp(0, 15).to(torch.uint8)
            if self._kind == "misaligned":
                absmax = absmax.double()
            if self._kind != "nf4":  # one code per byte: 3 bytes a row, odd per rank
                return (codes, absmax), None
            packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
            return (packed, absmax), None
        raise ValueError(self._kind)

    @torch.no_grad()
    def fsdp_post_all_gather(self, outputs, metadata, param_dtype, *, out=None):
        if self._kind == "float8":
            (data,) = outputs
            weight = (data.float() / metadata).to(param_dtype)
        elif self._kind == "rowwise":
            data, scale = outputs
            weight = (data.float() / scale).to(param_dtype)
        else:
            packed, absmax = outputs
            if self._kind != "nf4":
                codes = packed
            else:
                codes = torch.stack((packed & 15, packed >> 4), dim=-1).flatten(1)
            weight = ((codes.float() - 8.0) / 7.0 * absmax).to(param_dtype)
        if out is not None:  # the unsharded parameter: the first rows of the padded weight
            with _unsafe_preserve_version_counter(out):
                out.copy_(weight[: out.size(0)])
            return None
        return weight, (weight,)


class Block(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        odd = kind in ("odd", "misaligned")
        cols = 3 if odd else DIM
        rows = _rows(kind)
        self.norm = nn.Parameter(torch.ones(DIM) + 0.1 * torch.randn(DIM))
        self.up = nn.Linear(DIM, rows)
        self.down = nn.Linear(rows, DIM)
        self.extra = nn.Linear(cols, rows, bias=False) if odd else None
        frozen = kind == "nf4"
        for linear in (self.up, self.down) + ((self.extra,) if self.extra is not None else ()):
            data = linear.weight.detach().clone()
            linear.weight = nn.Parameter(Quantized(data, kind), requires_grad=not frozen)

    def forward(self, x):
        h = F.silu(self.up(x * self.norm))
        if self.extra is not None:
            h = h + self.extra.weight.sum(dim=1)
        return x + self.down(h)


class Model(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(kind) for _ in range(BLOCKS))
        self.head = nn.Linear(DIM, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _reference_outputs(fsdp_param, group) -> list[torch.Tensor]:
    """Every rank's pre-all-gather outputs of one parameter, gathered rank-major by
    dist.all_gather: what FSDP2's copy-out puts in its all-gather outputs (as bytes)."""
    inputs = fsdp_param.all_gather_inputs  # calls fsdp_pre_all_gather (a collective for float8)
    gathered = []
    for t in inputs:
        raw = t.view(torch.uint8)
        parts = [torch.empty_like(raw) for _ in range(group.size())]
        dist.all_gather(parts, raw, group=group)
        gathered.append(torch.cat(parts))
    return gathered


def main() -> int:
    case, mode, out_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    seed = tide_test_seed(required=True)
    import tide.fsdp  # noqa: PLC0415

    torch.manual_seed(seed)
    model = Model(case)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    if mode == "tide":
        tide.fsdp.enable(model)
    group = model.blocks[1]._get_fsdp_state()._fsdp_param_group
    seen: dict = {}

    def landed(module, args):
        for fp in group.fsdp_params:
            if hasattr(fp._sharded_local_tensor, "fsdp_pre_all_gather"):
                seen[fp] = [t.view(torch.uint8).clone() for t in fp.all_gather_outputs]

    losses, want = {}, {}
    for step in range(STEPS):
        hook = None
        if step == STEPS - 1:  # the reference from the sharded parameters this forward gathers
            for fp in group.fsdp_params:
                if hasattr(fp._sharded_local_tensor, "fsdp_pre_all_gather"):
                    want[fp] = _reference_outputs(fp, group.mesh_info.shard_process_group)
            hook = model.blocks[1].register_forward_pre_hook(landed)
        g = torch.Generator().manual_seed(seed * 17 + step * 4 + rank)
        x, y = torch.randn(BATCH, DIM, generator=g), torch.randn(BATCH, 2, generator=g)
        loss = F.mse_loss(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses[step] = float(loss.detach())
        if hook is not None:
            hook.remove()
    byte_equal = {}
    for fp, ref in want.items():  # the last step's forward all-gather against the reference
        got = seen.get(fp, [])
        byte_equal[fp._param_fqn or fp._module_info.param_name] = (
            len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(got, ref)))
    out = {"losses": losses, "report": tide.fsdp.report(model), "byte_equal": byte_equal}
    (out_dir / f"{mode}-rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
