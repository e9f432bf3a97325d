"""TIDE for FSDP2: ``enable(model)`` after ``fully_shard``, ``report(model)`` to see it ran.

    import tide.fsdp
    fully_shard(block) for each block; fully_shard(model)
    tide.fsdp.enable(model)            # before the first forward

``enable`` checks every FSDP parameter group against what TIDE supports, agrees the
decision with every rank, registers the eligible groups with one TIDE communicator per
process group (``host`` backend for CPU processes, ``nccl`` for GPUs), and replaces, for
those groups only, FSDP2's all-gather with its copy-in and copy-out, the unsharded
parameter allocation, and the reduce-scatter with its ``_chunk_cat`` packing. Other groups
keep stock FSDP2 and the report says why. See docs/fsdp.md.
"""

from __future__ import annotations

import torch.distributed as dist
import torch.nn as nn

from . import _fsdp_calls, _fsdp_compat, _fsdp_group, _fsdp_trace, _runtime

__all__ = ["enable", "report", "memory", "close", "UnsupportedTorch"]

UnsupportedTorch = _fsdp_compat.UnsupportedTorch

_MODES = ("in-place", "slot-reuse")
# id(communicator) -> (torch tensor holding its arena or None, its MemPool, why not torch's):
# kept until close(), after the communicator (NOTE [communicator arena]).
_ARENAS: dict = {}
_ATTRIBUTE = "_tide_groups"


def _fsdp_groups(module: nn.Module) -> list[tuple[str, object]]:
    """(module path, FSDPParamGroup) for every FSDP parameter group under ``module``."""
    from torch.distributed.fsdp import FSDPModule  # noqa: PLC0415

    found, seen = [], set()
    for path, sub in module.named_modules():
        if not isinstance(sub, FSDPModule):
            continue
        state = sub._get_fsdp_state()
        groups = list(getattr(state, "_fsdp_param_groups", None) or [])
        if not groups and getattr(state, "_fsdp_param_group", None) is not None:
            groups = [state._fsdp_param_group]
        for index, group in enumerate(groups):
            if id(group) in seen:
                continue
            seen.add(id(group))
            name = path or "<root>"
            found.append((name if len(groups) == 1 else f"{name}[{index}]", group))
    return found


def _agree(reasons: list[str]) -> list[str]:
    """Every rank's reasons, merged: a group runs on TIDE only where no rank refuses it."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return reasons
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, reasons)
    merged = []
    for index in range(len(reasons)):
        mine = [(rank, r[index]) for rank, r in enumerate(everyone) if r[index]]
        merged.append(f"rank {mine[0][0]}: {mine[0][1]}" if mine else "")
    return merged


def enable(
    module: nn.Module,
    *,
    mode: str = "in-place",
    timeout_s: float = 600.0,
    strict: bool = False,
    ring: bool = True,
) -> list[dict]:
    """Puts ``module``'s eligible FSDP2 parameter groups on TIDE; returns ``report(module)``.

    Call after ``fully_shard`` and before the first forward, on every rank, with the same
    model. ``mode``: "in-place" (the default) or "slot-reuse" (paper Sec. 5). ``strict``:
    raise instead of falling back when a group cannot run on TIDE. ``ring``: groups share
    landing slots as the first iteration shows they can (the default; that iteration runs on
    stock FSDP2 while TIDE records the order: NOTE [landing slots from the first iteration]);
    False gives every group a slot of its own from the first call (memory grows with the
    model). Raises UnsupportedTorch when this torch's FSDP2 internals differ from those TIDE
    knows.
    """
    if mode not in _MODES:
        raise ValueError(f"tide.fsdp.enable: mode must be one of {_MODES}, got {mode!r}")
    if not dist.is_initialized():
        raise RuntimeError("tide.fsdp.enable: torch.distributed is not initialized")
    if getattr(module, _ATTRIBUTE, None) is not None:
        raise RuntimeError("tide.fsdp.enable: already enabled on this module")
    layout = _fsdp_compat.check(_fsdp_calls.replaced())
    groups = [_fsdp_group.TideGroup(g, name) for name, g in _fsdp_groups(module)]
    if not groups:
        raise ValueError("tide.fsdp.enable: no FSDP parameter groups (call fully_shard first)")
    for group in groups:
        group.peers = groups

    reasons = []
    for group in groups:
        params = group.fsdp_group.fsdp_params
        layout_reason = next(
            (r for r in (_fsdp_compat.check_fsdp_param(p) for p in params) if r), ""
        )
        reasons.append(_fsdp_group.local_reason(group.fsdp_group, layout_reason))
    reasons = _agree(reasons)
    for group, reason in zip(groups, reasons):
        group.reason = reason

    # One communicator per shard process group, created and used in module order on every
    # rank of that group (a collective over the group's store prefix).
    generation = _runtime.next_generation()
    communicators: dict[int, object] = {}
    for group in groups:
        if group.reason:
            continue
        pg = group.fsdp_group.mesh_info.shard_process_group
        device = group.fsdp_group.device
        if id(pg) not in communicators:
            communicators[id(pg)] = _runtime.create(pg, device, timeout_s, generation)
        group.reason = group.register(communicators[id(pg)], pg, mode)
    for group in groups:  # after every registration: the first description places the arena
        if group.gid >= 0:
            group.reason = group.describe()
    # The runtime's answers are agreed too: a group runs on TIDE only where every rank registered it.
    final = _agree([g.reason for g in groups])
    for group, reason in zip(groups, final):
        if reason:
            group.gid, group.reason = -1, reason
        else:
            group.bind()

    _fsdp_calls.install(layout)
    comms = list(communicators.values())
    setattr(module, _ATTRIBUTE, (groups, comms))
    # NOTE [landing slots from the first iteration]: stock FSDP2 until a backward has run.
    tracer = _fsdp_trace.SlotTracer([g for g in groups if g.on_tide])
    for group in tracer.groups:
        group.tracer = tracer
    if ring:
        module.register_forward_pre_hook(
            lambda *_: _activate(groups, comms, tracer) if tracer.ready() else None, prepend=True
        )
    else:
        _activate(groups, comms, tracer, own_slots=True)
    result = report(module)
    if strict and any(r["backend"] != "tide" for r in result):
        refused = [f"{r['group']}: {r['reason']}" for r in result if r["backend"] != "tide"]
        raise RuntimeError("tide.fsdp.enable(strict=True): " + "; ".join(refused))
    return result


def _activate(groups: list, communicators: list, tracer, own_slots: bool = False) -> None:
    """Gives every registered group its slot and creates each communicator's arena (a
    collective: every rank reaches it at the same forward), then TIDE serves the groups."""
    slots = {id(g): -1 for g in tracer.groups} if own_slots else tracer.slots()
    tracer.done = True
    try:
        for comm in communicators:
            mine = sorted((g for g in groups if g.comm is comm and g.registered_id >= 0),
                          key=lambda g: g.registered_id)
            if comm.world() == 1 and not own_slots:  # FSDP2 all-gathers nothing at N = 1
                for g in mine:
                    slots[id(g)] = 0
            comm.assign_landing_slots([slots.get(id(g), -1) for g in mine])
            if mine:
                first = mine[0]
                tensor, pool, why = _runtime.torch_arena(comm, first.pg, first.fsdp_group.device)
                _ARENAS[id(comm)] = (tensor, pool, why)
            comm.arena()
    except RuntimeError as e:  # e.g. ranks that traced different orders: every rank refuses
        for group in tracer.groups:
            group.gid, group.reason = -1, f"the landing slots could not be agreed: {e}"
        return
    for group in tracer.groups:
        group.slot = slots[id(group)]
        group.active = True
        if own_slots:
            group.slot_reason = "enable(ring=False)"
        elif group.slot < 0:
            group.slot_reason = "not all-gathered during the traced iteration"


def report(module: nn.Module) -> list[dict]:
    """One dict per FSDP parameter group: group, backend ("tide" or "stock"), reason,
    all_gathers, reduce_scatters, copy_bytes_avoided (FSDP2's layout copies that TIDE calls
    did not make), copy_bytes_made and copies (the copies they still made, by kind, and why:
    docs/fsdp.md), all_gather_replays and reduce_scatter_replays (GPU calls that launched their
    slot's CUDA graph: tens of microseconds of host time; docs/runtime.md), stock_calls,
    params, slot (its landing slot id: groups of one id share the memory; -1: its own) with
    slot_reason (why its own), deferred_prefetches (prefetches that found the slot held and
    waited for the group's own unshard) and landing_bytes. ``memory(module)`` gives the
    arena."""
    state = getattr(module, _ATTRIBUTE, None)
    if state is None:
        return [
            {
                "group": name,
                "backend": "stock",
                "reason": "tide.fsdp.enable was not called",
                "all_gathers": 0,
                "reduce_scatters": 0,
                "copy_bytes_avoided": 0,
                "copy_bytes_made": 0,
                "copies": {},
                "all_gather_replays": 0,
                "reduce_scatter_replays": 0,
                "stock_calls": 0,
                "params": len(g.fsdp_params),
                "active": False,
                "slot": None,
                "slot_reason": "",
                "deferred_prefetches": 0,
                "landing_bytes": 0,
            }
            for name, g in _fsdp_groups(module)
        ]
    groups, _ = state
    rows = []
    for group in groups:
        stats = group.stats()
        copies = {}
        staged = int(stats.get("gradient_bytes_staged", 0))
        shards = int(stats.get("copy_bytes_made", 0)) - staged
        if shards:
            copies["all_gather_shards"] = {
                "bytes": shards,
                "why": "each all-gather casts (bf16) or copies (fp32) this rank's shards into the "
                "shared stage: FSDP2 keeps the shards, TIDE keeps no resident copy",
            }
        if staged:
            copies["staged_gradients"] = {
                "bytes": staged,
                "why": "Slot-Reuse moves each layer's gradients into the slot it vacated, so that "
                "autograd's storage is freed at once (paper Sec. 5.3)",
            }
        if group.zero_fill_bytes:
            copies["zero_gradients"] = {
                "bytes": group.zero_fill_bytes,
                "why": "parameters without a gradient get zeros (TIDE-RS reduces every parameter)",
            }
        rows.append(
            {
                "group": group.name,
                "backend": "tide" if group.on_tide else "stock",
                "reason": group.reason,
                "all_gathers": int(stats["all_gathers"]),
                "reduce_scatters": int(stats["reduce_scatters"]),
                "copy_bytes_avoided": int(stats["copy_bytes_avoided"]),
                "copy_bytes_made": sum(c["bytes"] for c in copies.values()),
                "copies": copies,
                "all_gather_replays": int(stats.get("all_gather_replays", 0)),
                "reduce_scatter_replays": int(stats.get("reduce_scatter_replays", 0)),
                "stock_calls": group.stock_calls,
                "params": len(group.fsdp_group.fsdp_params),
                "active": group.on_tide and group.active,
                "slot": group.slot if group.on_tide else None,
                "slot_reason": group.slot_reason if group.on_tide else "",
                "deferred_prefetches": group.deferred_prefetches,
                "landing_bytes": int(group.info.get("landing_bytes", 0)) if group.on_tide else 0,
            }
        )
    return rows


def memory(module: nn.Module) -> dict:
    """TIDE's memory on this rank (NOTE [communicator arena], docs/fsdp.md): ``arena_bytes``
    over every communicator, and per communicator its arena's bytes by kind (resident, stage,
    landing slots, reduce-scatter areas), the Sec. 5.4 bound for its groups and its slots
    with the groups in each. On CPU the arena is shared memory, part of the process's RSS; on
    GPUs it is a tensor of a torch.cuda.MemPool over NCCL's allocator, so torch's memory
    statistics include it (``in_torch_allocator``; ``allocator_note`` says why where not)."""
    state = getattr(module, _ATTRIBUTE, None)
    if state is None:
        return {"arena_bytes": 0, "communicators": []}
    groups, communicators = state
    names = {}
    for group in groups:
        if group.comm is not None and group.gid >= 0 or group.stats_when_stock is not None:
            names.setdefault(id(group.comm), {})[group.registered_id] = group.name
    if any(g.on_tide and not g.active for g in groups):
        return {"arena_bytes": 0, "communicators": [], "pending": "the first iteration's order "
                "assigns the landing slots; the arena exists from the second"}
    out = []
    for comm in communicators:
        arena = dict(comm.arena())
        arena["in_torch_allocator"] = bool(arena.pop("provided", False))
        arena["allocator_note"] = _ARENAS.get(id(comm), (None, None, ""))[2]
        by_id = names.get(id(comm), {})
        arena["slots"] = [
            dict(s, groups=[by_id.get(i, str(i)) for i in s["groups"]]) for s in arena["slots"]
        ]
        out.append(arena)
    return {"arena_bytes": sum(a["arena_bytes"] for a in out), "communicators": out}


def close(module: nn.Module) -> None:
    """Closes the module's TIDE communicators; its TIDE groups must not run afterwards."""
    state = getattr(module, _ATTRIBUTE, None)
    if state is None:
        return
    for comm in state[1]:
        comm.close()
        _ARENAS.pop(id(comm), None)  # the arena's memory goes after its communicator

