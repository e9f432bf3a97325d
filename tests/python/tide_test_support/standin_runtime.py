"""TEST SUPPORT ONLY: a stand-in for ``tide._C.Communicator`` built on torch.distributed.

It has the binding's API and semantics (per-group persistent landing zones, packed shards,
fp32 reduce-scatter output ``alpha * sum (+ out)``) so that the FSDP2 adapter can be tested
before or without the C++ runtime. It is not TIDE: it runs gloo collectives on staging
copies. The adapter never imports it; tests install it with ``install()``.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from tide._memory import dtype_from_name, tensor_at

_MAX_PARAMS = 256
_ALIGN = 256
# Fault injection, to show the parity checks catch what they claim to: "ag-order" lands the
# ranks' shards in the wrong order, "rs-scale" scales the reduction by (1 + 2^-16).
_FAULT = os.environ.get("TIDE_STANDIN_FAULT", "")


class _Group:
    def __init__(self, shapes, ag_dtype, grad_dtype, mode, cast, world, rank):
        self.shapes = [(int(d), int(k)) for d, k in shapes]
        self.ag_dtype = dtype_from_name(ag_dtype)
        self.grad_dtype = dtype_from_name(grad_dtype)
        self.mode, self.cast = mode, cast
        self.rows = [-(-d // world) for d, _ in self.shapes]
        self.numels = [r * k for r, (_, k) in zip(self.rows, self.shapes)]
        self.offsets = [sum(self.numels[:i]) for i in range(len(self.numels))]
        self.shard_elems = sum(self.numels)
        item = torch.empty((), dtype=self.ag_dtype).element_size()
        self.landing_offsets, total = [], 0
        for n in self.numels:
            self.landing_offsets.append(total)
            total += -(-(world * n * item) // _ALIGN) * _ALIGN
        self.landing = torch.zeros(max(total, _ALIGN), dtype=torch.uint8)
        self.resident = None if cast else torch.zeros(max(self.shard_elems, 1), dtype=self.ag_dtype)
        self.stats = {"all_gathers": 0, "reduce_scatters": 0, "copy_bytes_avoided": 0}


class Communicator:
    def __init__(self, rank, world, gpus_per_node, backend, store, timeout_s, device):
        if backend != "host":
            raise RuntimeError("stand-in communicator: host backend only")
        if world % gpus_per_node:
            raise RuntimeError(f"world {world} is not M x L with L = {gpus_per_node}")
        self.rank, self.world = rank, world
        self.pg = dist.ProcessGroupGloo(store, rank, world, datetime.timedelta(seconds=timeout_s))
        self.groups: list[_Group] = []
        self.closed = False

    def register_group(self, name, shapes, ag_dtype, grad_dtype, mode, cast):
        if len(shapes) > _MAX_PARAMS:
            return -1, f"{len(shapes)} parameters > {_MAX_PARAMS}"
        if mode not in ("in-place", "slot-reuse"):
            return -1, f"unknown mode {mode!r}"
        if ag_dtype not in ("bf16", "fp32") or grad_dtype not in ("bf16", "fp32"):
            return -1, f"unsupported dtypes ag={ag_dtype} grad={grad_dtype}"
        if cast and ag_dtype != "bf16":
            return -1, "cast needs a bf16 all-gather"
        self.groups.append(_Group(shapes, ag_dtype, grad_dtype, mode, cast, self.world, self.rank))
        return len(self.groups) - 1, ""

    def group_info(self, gid):
        g = self.groups[gid]
        return {
            "shard_elems": g.shard_elems,
            "rows_per_rank": list(g.rows),
            "shard_offsets": list(g.offsets),
            "out_offsets": list(g.offsets),
            "landing_ptr": g.landing.data_ptr(),
            "landing_bytes": g.landing.numel(),
            "landing_offsets": list(g.landing_offsets),
            "resident_ptr": 0 if g.resident is None else g.resident.data_ptr(),
            "region_bytes": g.landing.numel()
            + (0 if g.resident is None else g.resident.numel() * g.resident.element_size()),
        }

    def _check(self, gid):
        if self.closed:
            raise RuntimeError("communicator is closed")
        if not 0 <= gid < len(self.groups):
            raise RuntimeError(f"unknown group {gid}")
        return self.groups[gid]

    def all_gather(self, gid, stream, shards):
        g = self._check(gid)
        cpu = torch.device("cpu")
        if shards is None:
            packed = g.resident[: g.shard_elems].clone()
        else:
            src_dtype = torch.float32 if g.cast else g.ag_dtype
            packed = torch.empty(g.shard_elems, dtype=g.ag_dtype)
            for ptr, off, n in zip(shards, g.offsets, g.numels):
                packed[off : off + n].copy_(tensor_at(ptr, n, src_dtype, cpu))
        gathered = torch.empty(self.world * g.shard_elems, dtype=g.ag_dtype)
        dist.all_gather_into_tensor(gathered, packed, group=self.pg)
        gathered = gathered.view(self.world, g.shard_elems)
        if _FAULT == "ag-order":
            gathered = gathered.flip(0)
        base = g.landing.data_ptr()
        for off, n, loff in zip(g.offsets, g.numels, g.landing_offsets):
            dst = tensor_at(base + loff, self.world * n, g.ag_dtype, cpu).view(self.world, n)
            dst.copy_(gathered[:, off : off + n])
        g.stats["all_gathers"] += 1
        g.stats["copy_bytes_avoided"] += gathered.numel() * gathered.element_size()

    def reduce_scatter(self, gid, stream, grads, out, alpha, accumulate):
        g = self._check(gid)
        cpu = torch.device("cpu")
        if len(grads) != len(g.shapes):
            raise RuntimeError(f"expected {len(g.shapes)} gradients, got {len(grads)}")
        packed = torch.zeros(self.world, g.shard_elems, dtype=torch.float32)
        for ptr, (d, k), r, off in zip(grads, g.shapes, g.rows, g.offsets):
            grad = tensor_at(ptr, d * k, g.grad_dtype, cpu).view(d, k)
            padded = torch.zeros(self.world * r, k, dtype=torch.float32)
            padded[:d].copy_(grad)
            packed[:, off : off + r * k].copy_(padded.view(self.world, r * k))
        reduced = torch.empty(g.shard_elems, dtype=torch.float32)
        dist.reduce_scatter_tensor(reduced, packed.view(-1), group=self.pg)
        if _FAULT == "rs-scale":
            alpha *= 1.0 + 2.0**-16
        result = tensor_at(out, g.shard_elems, torch.float32, cpu)
        if accumulate:
            result.add_(reduced, alpha=alpha)
        else:
            result.copy_(reduced.mul_(alpha))
        g.stats["reduce_scatters"] += 1
        g.stats["copy_bytes_avoided"] += packed.numel() * torch.empty((), dtype=g.grad_dtype).element_size()

    def arena_bytes(self):
        return sum(self.group_info(i)["region_bytes"] for i in range(len(self.groups)))

    def stats(self, gid):
        return dict(self._check(gid).stats)

    def close(self):
        self.closed = True


def install() -> None:
    """Makes ``tide.fsdp`` build this stand-in instead of ``tide._C.Communicator``."""
    import tide._runtime

    tide._runtime.set_communicator_class(Communicator)
