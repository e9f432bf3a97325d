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

_generation = 0


def communicator_class() -> Any:
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


def _nccl_allocators(group: dist.ProcessGroup, device: torch.device, errors: list):
    """ncclMemAlloc as torch allocators: the NCCL process group's own, else tide._C's."""
    try:
        yield group._get_backend(device).mem_allocator
    except (AttributeError, RuntimeError, TypeError) as e:
        errors.append(f"the process group's NCCL allocator: {e}")
    from . import _C  # noqa: PLC0415

    if getattr(_C, "nccl_allocator", False):
        try:
            yield torch.cuda.memory.CUDAPluggableAllocator(
                _C.__file__, "tide_nccl_mem_alloc", "tide_nccl_mem_free"
            ).allocator()
        except (AttributeError, RuntimeError, TypeError, OSError) as e:
            errors.append(f"tide's NCCL allocator: {e}")
    else:
        errors.append("this build of tide._C has no NCCL allocator (built without NCCL)")


def torch_arena(comm, group: dist.ProcessGroup, device: torch.device):
    """The communicator's arena allocated by torch, before the arena exists (collective).

    On GPUs TIDE's arena must be ncclMemAlloc memory (its NCCL windows need it). PyTorch's NCCL
    process group exposes that allocator (``mem_allocator``), so the arena is a tensor of a
    ``torch.cuda.MemPool`` over it: ``memory_allocated``, ``max_memory_allocated`` and
    ``memory_reserved`` then include it. Returns (tensor, pool, "") with the memory handed to
    the communicator, or (None, None, why not) where the backend allocates it itself."""
    needed = int(comm.arena_request())
    if needed == 0 or device.type != "cuda":
        return None, None, "the host backend's arena is shared memory (in the RSS)"
    errors = []
    for allocator in _nccl_allocators(group, device, errors):
        try:
            pool = torch.cuda.MemPool(allocator)
            with torch.cuda.use_mem_pool(pool, device=device):
                tensor = torch.empty(needed, dtype=torch.uint8, device=device)
            break
        except (AttributeError, RuntimeError, TypeError) as e:
            errors.append(str(e))
    else:
        return None, None, "outside torch's allocator: " + "; ".join(errors)
    comm.provide_arena(tensor.data_ptr(), needed)
    return tensor, pool, ""


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
