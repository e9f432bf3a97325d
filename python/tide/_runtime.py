"""One TIDE communicator per torch process group.

The communicator is ``tide._C.Communicator`` (the runtime's binding). It bootstraps over
torch's default store under a prefix that names the process group's ranks, so that the
shard groups of HSDP each get their own. Its backend follows the process group's device:
``host`` (CPU processes of one host, POSIX shared memory) or ``nccl`` (one GPU per process).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

_communicator_class: Any = None
_generation = 0


def set_communicator_class(cls: Any) -> None:
    """Replaces the communicator class (tests use this for a stand-in); None restores the binding."""
    global _communicator_class
    _communicator_class = cls


def communicator_class() -> Any:
    if _communicator_class is not None:
        return _communicator_class
    from . import _C  # noqa: PLC0415 (the binding loads only when a communicator is needed)

    if not hasattr(_C, "Communicator"):
        raise RuntimeError("tide._C of this build has no runtime binding (Communicator)")
    return _C.Communicator


def next_generation() -> int:
    """A counter that every rank advances at each enable(), so that store keys never repeat."""
    global _generation
    _generation += 1
    return _generation


def gpus_per_node(group: dist.ProcessGroup, device: torch.device) -> int:
    """L: processes of this group on one host (the whole group for the host backend)."""
    world = group.size()
    if device.type == "cpu":
        return world
    local = int(os.environ.get("LOCAL_WORLD_SIZE", torch.cuda.device_count() or 1))
    return max(1, min(world, local))


def create(group: dist.ProcessGroup, device: torch.device, timeout_s: float, generation: int):
    ranks = dist.get_process_group_ranks(group)
    prefix = f"tide/{generation}/{'-'.join(map(str, ranks))}/"
    store = dist.PrefixStore(prefix, dist.distributed_c10d._get_default_store())
    backend = "host" if device.type == "cpu" else "nccl"
    if device.type == "cpu":
        device_index = -1
    else:
        device_index = device.index if device.index is not None else torch.cuda.current_device()
    return communicator_class()(
        group.rank(),
        group.size(),
        gpus_per_node(group, device),
        backend,
        store,
        float(timeout_s),
        device_index,
    )
