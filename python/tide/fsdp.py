"""TIDE for FSDP2: ``enable(model)`` after ``fully_shard``, ``report(model)`` to see it ran.

    import tide.fsdp
    fully_shard(block) for each block; fully_shard(model)
    tide.fsdp.enable(model)            # before the first forward

``enable`` checks every FSDP parameter group against what TIDE supports, agrees the
decision with every rank, registers the eligible groups with one TIDE communicator per
process group (``host`` backend for CPU processes, ``nccl`` or ``ipc`` for GPUs: NOTE
[backend selection] in _runtime.py), and replaces, for those groups only, FSDP2's all-gather
with its copy-in and copy-out, the unsharded parameter allocation, and the reduce-scatter
with its ``_chunk_cat`` packing. Other groups keep stock FSDP2 and the report says why; a
communicator that fails while serving stops the job with ``CommunicationError`` (NOTE [job
stop] in _failure.py); ``close(model)`` returns the model to stock FSDP2. See docs/fsdp.md.
"""

from __future__ import annotations

import atexit
import re
import weakref
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn as nn

from . import _failure, _fsdp_calls, _fsdp_compat, _fsdp_extensions, _fsdp_group, _fsdp_patches, _fsdp_trace, _lend, _observe, _runtime

__all__ = ["enable", "report", "memory", "close", "UnsupportedTorch", "CommunicationError"]

UnsupportedTorch = _fsdp_compat.UnsupportedTorch
CommunicationError = _failure.CommunicationError

_MODES = ("in-place", "slot-reuse")
# id(communicator) -> (torch tensor holding its arena or None, its MemPool, why not torch's):
# kept until close(), after the communicator (NOTE [communicator arena]).
_ARENAS: dict = {}
_ATTRIBUTE = "_tide_groups"
# Communicators not closed yet: released at interpreter exit, before the binding's objects
# would outlive it.
_LIVE: "weakref.WeakSet" = weakref.WeakSet()


@atexit.register
def _release_at_exit() -> None:
    for comm in list(_LIVE):
        try:
            comm.close_at_exit()
        except Exception:  # noqa: BLE001 (exiting: a failed close must not mask the exit status)
            pass
    _lend.forget_all()
    _ARENAS.clear()
_CLOSED = "_tide_closed"


@dataclass
class _Enabled:
    """What enable() did to a module, for report(), memory() and close() (held on the module)."""

    groups: list
    communicators: list
    strict: bool = False
    hooks: list = field(default_factory=list)  # removable handles
    undo: list = field(default_factory=list)  # callables restoring what was wrapped
    tracer: object = None


def _fsdp_groups(module: nn.Module) -> list[tuple[str, object]]:
    """(module path, FSDPParamGroup) for every FSDP parameter group under ``module``."""
    found, seen = [], set()
    for path, sub in _fsdp_modules(module):
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


def _fsdp_modules(module: nn.Module) -> list[tuple[str, nn.Module]]:
    from torch.distributed.fsdp import FSDPModule  # noqa: PLC0415

    return [(path, sub) for path, sub in module.named_modules() if isinstance(sub, FSDPModule)]


def _check_module(function: str, module) -> None:
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"tide.fsdp.{function}: module must be a torch.nn.Module (the model after "
            f"fully_shard), got {type(module).__name__}"
        )


def _check_arguments(module, mode, timeout_s, strict, ring, abort_all) -> None:
    """TypeError for an argument of the wrong type, ValueError for a wrong value: each names
    the argument."""
    _check_module("enable", module)
    if not isinstance(mode, str):
        raise TypeError(f"tide.fsdp.enable: mode must be a str, got {type(mode).__name__}")
    if mode not in _MODES:
        raise ValueError(f"tide.fsdp.enable: mode must be one of {_MODES}, got {mode!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        raise TypeError(f"tide.fsdp.enable: timeout_s must be a number, got {type(timeout_s).__name__}")
    if not timeout_s > 0:
        raise ValueError(f"tide.fsdp.enable: timeout_s must be positive, got {timeout_s!r}")
    for name, value in (("strict", strict), ("ring", ring), ("abort_all_process_groups", abort_all)):
        if not isinstance(value, bool):
            raise TypeError(f"tide.fsdp.enable: {name} must be a bool, got {type(value).__name__}")


_RANK_PREFIX = re.compile(r"^rank \d+: ")


def _agree(reasons: list[str], pg=None, keys: list | None = None) -> list[str]:
    """Every rank's reasons, merged over ``pg`` (the world when None): a group runs on TIDE
    only where no rank refuses it; the reason names the first rank (global) that did.

    ``keys`` name the groups across ranks (default: their position). Ranks may hold different
    groups (pipeline stages: each stage's ranks shard their own modules), so the world's
    agreement merges by key: a rank that holds no group of a key has nothing to say of it."""
    size = dist.get_world_size() if pg is None else pg.size()
    if size == 1:
        return reasons
    keys = list(range(len(reasons))) if keys is None else keys
    everyone = _observe.gather_objects(dict(zip(keys, reasons)), pg or dist.group.WORLD)
    ranks = list(range(size)) if pg is None else dist.get_process_group_ranks(pg)
    merged = []
    for key in keys:
        mine = [(ranks[i], r[key]) for i, r in enumerate(everyone) if r.get(key)]
        if not mine:
            merged.append("")
        elif _RANK_PREFIX.match(mine[0][1]):  # agreed before: it names its rank already
            merged.append(mine[0][1])
        else:
            merged.append(f"rank {mine[0][0]}: {mine[0][1]}")
    return merged


def _group_keys(groups: list) -> list:
    """Names of the groups that match across ranks: (the shard ranks, the position among the
    groups of those ranks). Ranks of one shard process group hold the same modules in order."""
    seen: dict = {}
    keys = []
    for group in groups:
        mesh_info = group.fsdp_group.mesh_info
        ranks = _shard_ranks(group) if hasattr(mesh_info, "shard_process_group") else ("replicate",)
        keys.append((ranks, seen.get(ranks, 0)))
        seen[ranks] = seen.get(ranks, 0) + 1
    return keys


def _agree_one(reason: str, pg) -> str:
    return _agree([reason], pg)[0]


def enable(
    module: nn.Module,
    *,
    mode: str = "in-place",
    timeout_s: float = 600.0,
    strict: bool = False,
    ring: bool = True,
    abort_all_process_groups: bool = False,
) -> list[dict]:
    """Puts ``module``'s eligible FSDP2 parameter groups on TIDE; returns ``report(module)``.

    Call after ``fully_shard`` and before the first forward, on every rank, with the same
    model. ``mode``: "in-place" (the default) or "slot-reuse" (paper Sec. 5). Whatever TIDE
    cannot serve (a group outside its contract, a process group or backend it cannot run on,
    an NCCL setting, this torch's FSDP2 internals, a communicator or arena that cannot be
    created) stays on stock FSDP2 with the reason in the report; ``strict=True`` raises
    instead, naming the reason (UnsupportedTorch for torch's internals). ``ring``: groups
    share landing slots as the first iteration shows they can (the default; that iteration
    runs on stock FSDP2 while TIDE records the order: NOTE [landing slots from the first
    iteration]); False gives every group a slot of its own from the first call (memory grows
    with the model). A communicator that fails once it serves calls raises
    CommunicationError and stops the job (NOTE [job stop]); it aborts the torch process groups
    TIDE served, and every torch process group of the process with
    ``abort_all_process_groups=True``. A module with FSDP modules but no parameter groups gets
    an empty report.
    """
    _check_arguments(module, mode, timeout_s, strict, ring, abort_all_process_groups)
    if not dist.is_initialized():
        raise RuntimeError("tide.fsdp.enable: torch.distributed is not initialized")
    if getattr(module, _ATTRIBUTE, None) is not None:
        raise RuntimeError(
            "tide.fsdp.enable: already enabled on this module (tide.fsdp.close(module) returns "
            "it to stock FSDP2 first)"
        )
    found = _fsdp_groups(module)
    if not found:
        if not _fsdp_modules(module):
            raise ValueError("tide.fsdp.enable: no FSDP module under it (call fully_shard first)")
        return []  # FSDP2 has nothing to communicate for it: nothing for TIDE either
    layout, torch_reason = _fsdp_layout(strict)
    groups = [_fsdp_group.TideGroup(g, name) for name, g in found]
    for group in groups:
        group.peers = groups

    communicators: dict = {}
    world_reason = _runtime.unservable_process_group(dist.group.WORLD)
    if world_reason:  # not even the agreement can run: decided alike on every rank
        for group in groups:
            group.reason = world_reason
    else:
        _decide_eligibility(groups, torch_reason, {id(sub): path for path, sub in module.named_modules()})
        communicators = _open_communicators(groups, timeout_s, mode)
        # The runtime's answers are agreed too: a group runs on TIDE only where every rank
        # registered it.
        final = _agree([g.reason for g in groups], keys=_group_keys(groups))
        for group, reason in zip(groups, final):
            if reason:
                group.gid, group.reason = -1, reason
    served = [g for g in groups if g.on_tide]
    comms = [c for c in communicators.values() if any(g.comm is c for g in served)]
    if strict and len(served) < len(groups):
        for comm in communicators.values():
            comm.close()
        _refuse_strictly(groups)
    for comm in communicators.values():
        if comm not in comms:  # no group of it runs on TIDE
            comm.close()
    for comm in comms:  # NOTE [job stop] 1: what a failure of it aborts of torch's
        comm.torch_groups = None if abort_all_process_groups else list(
            {id(g.pg): g.pg for g in served if g.comm is comm}.values()
        )
        _LIVE.add(comm)
    state = _Enabled(groups, comms, strict)
    if served:
        _serve(module, state, layout, ring)
    setattr(module, _ATTRIBUTE, state)
    if hasattr(module, _CLOSED):
        delattr(module, _CLOSED)
    return report(module)


def _fsdp_layout(strict: bool):
    """(this torch's FSDP2 layout, '') or, where TIDE does not know its internals, (None, why);
    strict: UnsupportedTorch."""
    try:
        return _fsdp_compat.check(_fsdp_patches.stock_calls()), ""
    except UnsupportedTorch as e:
        if strict:
            raise
        return None, f"this torch's FSDP2 internals are not those TIDE knows: {e}"


def _decide_eligibility(groups: list, torch_reason: str, module_paths: dict) -> None:
    """Each group's reason to stay stock from its parameters and policies, agreed by every rank.
    ``module_paths`` (id(module) -> its path) names a refused parameter by its path."""
    reasons = []
    for group in groups:
        params = group.fsdp_group.fsdp_params
        layout_reason = torch_reason or next(
            (r for r in (_fsdp_compat.check_fsdp_param(p) for p in params) if r), ""
        )
        reasons.append(_fsdp_group.local_reason(group.fsdp_group, layout_reason, module_paths))
    for group, reason in zip(groups, _agree(reasons, keys=_group_keys(groups))):
        group.reason = reason


def _open_communicators(groups: list, timeout_s: float, mode: str) -> dict:
    """One communicator per set of shard ranks, created and used in module order on every rank
    of those ranks (collectives over the first group's process group), with the groups
    registered on it. Groups whose process groups are distinct objects over the same ranks
    share it (one arena, one ring): DeviceMesh makes a new process group per mesh where the
    default backend is gloo and CUDA is present, so every fully_shard call has its own.
    Returns {shard ranks: GuardedCommunicator}."""
    generation = _runtime.next_generation()
    communicators: dict = {}
    for group in groups:
        if group.reason:
            continue
        pg = group.fsdp_group.mesh_info.shard_process_group
        if _shard_ranks(group) not in communicators:
            communicators[_shard_ranks(group)] = _open_communicator(pg, group.fsdp_group.device, timeout_s, generation)
    failed: dict = {}  # id(comm) -> why its bootstrap failed: no later group waits on it again
    for group in groups:
        if group.reason:
            continue
        comm, reason = communicators[_shard_ranks(group)]
        if reason or id(comm) in failed:
            group.reason = reason or failed[id(comm)]
            continue
        group.reason, broken = _register(group, comm, mode)
        if broken:  # the communicator's bootstrap is unusable: none of its groups runs on TIDE
            failed[id(comm)] = group.reason
            for other in groups:
                if other.comm is comm and other.gid >= 0:
                    other.gid, other.reason = -1, group.reason
    for group in groups:  # after every registration: the first description places the arena
        if group.gid >= 0:
            group.reason = group.describe()
    return {key: comm for key, (comm, _) in communicators.items() if comm is not None}


def _shard_ranks(group) -> tuple[int, ...]:
    """The global ranks of the group's shard process group: what its communicator serves (the
    store keys of one enable() are unique per communicator: _runtime.store_for)."""
    return tuple(dist.get_process_group_ranks(group.fsdp_group.mesh_info.shard_process_group))


def _open_communicator(pg, device, timeout_s: float, generation: int):
    """(GuardedCommunicator, '') on the backend chosen for ``pg`` (NOTE [backend selection]),
    or (None, why not), the same on every rank of ``pg``. Every collective here is over
    ``pg``, reached by all its ranks: the facts, then the agreement on what each rank found
    alone (its store, its communicator)."""
    unservable = _runtime.unservable_process_group(pg)
    if unservable:
        return None, unservable
    local, store = "", None
    try:
        store = _runtime.store_for(pg, generation, timeout_s)
        _runtime.announce(store, pg)
    except (RuntimeError, ValueError, KeyError) as e:
        local = f"torch's default store cannot bootstrap TIDE: {e}"
    facts = _runtime.gather_facts(pg, device)
    choice = _runtime.choose_backend(facts)
    if not choice.backend:
        return None, choice.reason
    local = local or _runtime.store_not_shared(store, pg)
    comm = None
    if not local:
        try:
            local_ranks = _runtime.gpus_per_node(facts, choice.backend)
            node = facts[pg.rank()].node
            raw = _runtime.create(pg, device, timeout_s, choice.backend, store, local_ranks, node)
            comm = _failure.GuardedCommunicator(raw, choice.backend, choice.reason)
        except (RuntimeError, ValueError, TypeError, OSError) as e:
            local = f"the {choice.backend} communicator could not be created: {e}"
    reason = _agree_one(local, pg)
    if reason and comm is not None:
        comm.close()
    return (None, reason) if reason else (comm, "")


def _register(group, comm, mode: str) -> tuple[str, bool]:
    """Registers the group (a collective over the store): (the runtime's refusal or '', whether
    the bootstrap itself failed). A bootstrap that fails (a peer that does not answer within
    the timeout) is a reason, agreed later, not an error."""
    try:
        pg = group.fsdp_group.mesh_info.shard_process_group
        # NOTE [extension all-gathers] 2: an extension group's all-gathers run on its outputs'
        # registration, never on this one
        extension = _fsdp_extensions.has_extension(group.fsdp_group.fsdp_params)
        return group.register(comm, pg, mode, all_gathered=not extension), False
    except (RuntimeError, ValueError) as e:
        why = _one_line(str(e))
        return f"registration with the TIDE runtime failed (is every rank calling enable()?): {why}", True


def _one_line(text: str) -> str:
    """An error's text for a report: a Python traceback the binding passed on (a store's
    error) shortened to the text before it and its last line."""
    head, _, trace = text.partition("Traceback (most recent call last):")
    last = [line.strip() for line in trace.splitlines() if line.strip()]
    return (head.strip() + " " + last[-1]).strip() if last else text.strip()


def _refuse_strictly(groups: list) -> None:
    refused = [f"{g.name}: {g.reason}" for g in groups if not g.on_tide]
    raise RuntimeError(
        f"tide.fsdp.enable(strict=True): {len(refused)} of {len(groups)} FSDP parameter "
        "group(s) cannot run on TIDE: " + "; ".join(refused) + ". Remove the cause named, or "
        "call enable() without strict=True to train these groups on stock FSDP2"
    )


def _serve(module: nn.Module, state: _Enabled, layout, ring: bool) -> None:
    """Routes the served groups' calls to TIDE and hooks the health checks (NOTE [job stop])."""
    for group in state.groups:
        if group.on_tide:
            group.bind()
    _fsdp_calls.install(layout)
    comms = state.communicators
    # NOTE [landing slots from the first iteration]: stock FSDP2 until a backward has run.
    tracer = _fsdp_trace.SlotTracer([g for g in state.groups if g.on_tide])
    state.tracer = tracer
    for group in tracer.groups:
        group.tracer = tracer
    state.hooks.append(
        module.register_forward_pre_hook(lambda *_: _between_steps(comms), prepend=True)
    )
    _check_after_backward(module, state)
    if ring:
        state.hooks.append(
            module.register_forward_pre_hook(
                lambda *_: _activate(state) if tracer.ready() else None, prepend=True
            )
        )
    else:
        _activate(state, own_slots=True)


def _between_steps(comms: list) -> None:
    """Before a forward's first call: a lent arena back (NOTE [arena lending]; an optimizer step
    that raised skipped its post-hook), then the communicators' health (NOTE [job stop] 2)."""
    _lend.settle()
    _failure.check_health(comms)


# Where FSDP2 ends a backward iteration: torch 2.15's common end of the automatic callback and
# of manual finalization (``finalize_backward``, which pipeline schedules call after their last
# micro-batch), else the root's post-backward callback (torch 2.11-2.14).
_ITERATION_ENDS = ("_end_backward_iteration", "_root_post_backward_final_callback")


def _check_after_backward(module: nn.Module, state: _Enabled) -> None:
    """NOTE [job stop] 2: the communicators' health where FSDP2 ends a backward iteration, after
    FSDP2's own end (the last reduce-scatter issued, before an optimizer step can read its
    output); it is also the iteration boundary of NOTE [reversible fallbacks]. FSDP2 ends it on
    whichever state's pre-backward ran first (or on the module a pipeline schedule finalizes),
    so every state of the module gets the check (_fsdp_patches.py, patch 11; close() restores
    it)."""
    for _, sub in _fsdp_modules(module):
        fsdp_state = sub._get_fsdp_state()
        name = next((n for n in _ITERATION_ENDS if hasattr(fsdp_state, n)), None)
        if name is None:
            continue  # the forward pre-hook still checks once per step
        original = getattr(fsdp_state, name)

        def checked(_original=original) -> None:
            _original()
            for group in state.groups:  # NOTE [reversible fallbacks]: an iteration boundary
                group.boundary_passed = True
            _failure.check_health(state.communicators)

        state.undo.append(_fsdp_patches.wrap_state_method(fsdp_state, name, checked))


def _activate(state: _Enabled, own_slots: bool = False) -> None:
    """Gives every registered group its slot and creates each communicator's arena (a
    collective: every rank reaches it at the same forward), then TIDE serves the groups. A
    communicator whose arena any rank cannot lay out, allocate or create leaves its groups
    on stock FSDP2 with the reason, on every rank (NOTE [job stop] 3)."""
    tracer = state.tracer
    slots = {id(g): -1 for g in tracer.groups} if own_slots else tracer.slots()
    fp32_grads = set(tracer.fp32_grads)
    tracer.forget()
    for comm in state.communicators:
        mine = sorted((g for g in state.groups if g.comm is comm and g.registered_id >= 0),
                      key=lambda g: g.registered_id)
        if not any(g.on_tide for g in mine):  # the same on every rank (agreed at enable)
            continue
        twins = _register_twins(comm, mine, fp32_grads, slots)
        outputs = _register_extension_outputs(comm, mine, slots)
        reason = _create_arena(comm, mine + twins + outputs, slots, own_slots)
        if reason:
            for group in mine:
                if group.on_tide:
                    group.fall_back(reason)
            comm.close()
            _ARENAS.pop(id(comm), None)  # after its communicator (NOTE [communicator arena])
            if state.strict:
                raise RuntimeError(
                    f"tide.fsdp (strict=True): {reason}. Call enable() without strict=True to "
                    "train these groups on stock FSDP2"
                )
            continue
        comm.serving = True
    for group in tracer.groups:
        if not group.on_tide:
            continue
        group.slot = slots[id(group)]
        group.active = True
        fsdp_group = group.fsdp_group
        if fsdp_group.is_unsharded or getattr(fsdp_group, "_all_gather_result", None) is not None:
            # NOTE [reversible fallbacks]: unsharded by stock FSDP2 (an unshard() before
            # enable(ring=False)); autograd will save its stock parameters
            group.suspend("unsharded by stock FSDP2 before TIDE served the group (an unshard() "
                          "before enable()); stock FSDP2 until the next iteration")
        if own_slots:
            group.slot_reason = "enable(ring=False)"
        elif group.slot < 0:
            group.slot_reason = "not all-gathered during the traced iteration"


def _share_slot(slots: dict, group, other) -> None:
    """``other`` (a registration of ``group``'s FSDP2 group) takes ``group``'s slot id: its
    slot's, or for a group with a slot of its own (-1) a new id, every rank alike."""
    if slots.get(id(group), -1) < 0:
        slots[id(group)] = max([-1] + list(slots.values())) + 1
    slots[id(other)] = slots[id(group)]


def _register_twins(comm, mine: list, fp32_grads: set, slots: dict) -> list:
    """NOTE [no-sync accumulation]: registers an fp32-gradient twin for every group of the
    communicator that any rank reduced with fp32 gradients in the traced iteration (agreed
    over its process group: every rank registers the same twins in the same order). A twin
    shares its group's landing slot and is never all-gathered; it only adds reduce-scatter
    areas for fp32 gradients to the arena. Returns the twins, registered after ``mine``."""
    pg = mine[0].pg
    wanted = [g for g in mine if g.on_tide and g.grad_dtype == torch.bfloat16]
    local = [id(g) in fp32_grads for g in wanted]
    if pg.size() > 1:
        everyone = _observe.gather_objects(local, pg)
        local = [any(r[i] for r in everyone) for i in range(len(wanted))]
    twins = []
    for group, needed in zip(wanted, local):
        if not needed:
            continue
        twin, reason = _register_sibling(comm, group, "fp32 accumulated gradients", slots,
                                         mode="in-place", grad_dtype=torch.float32,
                                         all_gathered=False)
        if reason:
            group.twin_refusal = reason
            continue
        group.twin = twin
        twins.append(twin)
    return twins


def _register_sibling(comm, group, what: str, slots: dict, **register):
    """Another registration of ``group``'s FSDP2 group (``what`` it holds), in the group's
    landing slot (``_share_slot``): (the registration, '') or (None, the runtime's refusal).
    ``register``: TideGroup.register's keywords."""
    sibling = _fsdp_group.TideGroup(group.fsdp_group, f"{group.name} ({what})")
    try:
        reason = sibling.register(comm, group.pg, **register)
    except (RuntimeError, ValueError) as e:
        reason = _one_line(str(e))
    if reason:
        return None, reason
    sibling.active = True
    _share_slot(slots, group, sibling)
    return sibling, ""


def _register_extension_outputs(comm, mine: list, slots: dict) -> list:
    """NOTE [extension all-gathers] 2: registers the all-gather outputs of every group of the
    communicator whose parameters have an fsdp_pre_all_gather extension, as the traced
    iteration recorded them, in the group's landing slot. Each rank's items and reason are
    agreed over the process group (the same items on every rank, or the group on stock FSDP2
    with the reason); the registrations follow in the same order on every rank. Returns them."""
    pg = mine[0].pg
    wanted = [g for g in mine if g.on_tide and (g.items is not None or g.items_reason
                                                 or _fsdp_extensions.has_extension(g.fsdp_group.fsdp_params))]
    if not wanted:
        return []
    local = []
    for group in wanted:
        why = group.items_reason
        if not why and not _fsdp_extensions.has_extension(group.fsdp_group.fsdp_params):
            why = "its fsdp_pre_all_gather extension was removed after enable()"
        if not why and group.items is None:
            why = "no all-gather of it was traced in the first iteration"
        why = why or _fsdp_extensions.layout_reason(group.items, group.param_names(), pg.size())
        local.append((why, None if why else [[(str(i.dtype), i.size) for i in p] for p in group.items]))
    everyone = _observe.gather_objects(local, pg) if pg.size() > 1 else [local]
    outputs = []
    for k, group in enumerate(wanted):
        reasons = [r[k][0] for r in everyone if r[k][0]]
        if not reasons and any(r[k][1] != local[k][1] for r in everyone):
            reasons = ["its all-gather outputs differ between ranks"]
        if reasons:
            group.fall_back(f"fsdp_pre_all_gather extension: {reasons[0]}")
            continue
        ag, reason = _register_sibling(comm, group, "all-gather outputs", slots,
                                       mode=group.mode, items=group.items)
        if reason:
            group.fall_back(f"fsdp_pre_all_gather extension: the runtime refused its all-gather outputs ({reason})")
            continue
        group.ag = ag
        outputs.append(ag)
    return outputs


def _create_arena(comm, mine: list, slots: dict, own_slots: bool) -> str:
    """Lays out, allocates and creates the communicator's arena; '' or why not, agreed over
    its process group (each step that a rank may fail alone is agreed before the next
    collective, so that no rank waits for one that gave up)."""
    pg, device = mine[0].pg, mine[0].fsdp_group.device
    local = ""
    try:
        if comm.world() == 1 and not own_slots:  # FSDP2 all-gathers nothing at N = 1
            for group in mine:
                slots[id(group)] = 0
        # Slot ids every rank assigns alike, or differently: arena_request's agreement then
        # refuses on every rank (e.g. ranks that traced different orders).
        comm.assign_landing_slots([slots.get(id(g), -1) for g in mine])
        if device.type == "cuda":  # the first iteration's cached blocks go back before the arena comes
            torch.cuda.empty_cache()
        _ARENAS[id(comm)] = _runtime.torch_arena(comm, pg, device, comm.backend)
    except (RuntimeError, ValueError, MemoryError) as e:
        local = str(e)
    reason = _agree_one(local, pg)
    if reason:
        return f"the communicator's arena could not be laid out or allocated ({reason}); stock FSDP2 from then on"
    try:
        arena = comm.arena()  # creates it: collective
    except (RuntimeError, ValueError, MemoryError) as e:
        local = str(e)
    reason = _agree_one(local, pg)
    if reason:
        return f"the communicator's arena could not be created ({reason}); stock FSDP2 from then on"
    _lend_arena(comm, mine, int(arena["arena_bytes"]))
    return ""


def _lend_arena(comm, groups: list, data_bytes: int) -> None:
    """NOTE [arena lending]: the arena's data bytes become lendable to optimizer steps, where
    the arena is a tensor of torch's allocator (GPUs) and lending is on."""
    whole, pool, why = _ARENAS.get(id(comm), (None, None, ""))
    if whole is None or _lend.lending_refusal():
        return
    _ARENAS[id(comm)] = (None, pool, why)  # the loan holds the arena from now on
    loan = _lend.Loan(comm, groups, pool, whole)
    del whole
    loan.split(data_bytes)
    _ARENAS[id(comm)] = (loan, pool, why)
    _lend.add(loan)


def report(module: nn.Module) -> list[dict]:
    """One dict per FSDP parameter group: group, backend ("tide" or "stock"), reason (why it is
    on stock FSDP2: docs/fsdp.md, Failure and fallback), runtime_backend (the TIDE runtime's
    backend serving it: "host", "nccl" or "ipc"; "" on stock) with runtime_backend_reason (why
    not the first choice, e.g. ipc for ranks sharing a GPU), all_gathers, reduce_scatters,
    copy_bytes_avoided (FSDP2's layout copies that TIDE calls did not make), copy_bytes_made
    and copies (the copies they still made, by kind, and why: docs/fsdp.md),
    all_gather_replays and reduce_scatter_replays (GPU calls that replayed their slot's CUDA
    graph: tens of microseconds of host time; docs/runtime.md) and all_gather_graph_captures
    and reduce_scatter_graph_captures (calls that captured it) with
    all_gather_repoint_failure and reduce_scatter_repoint_failure (why fresh pointers cannot
    be patched into the slot graph, so fresh calls take the stream path), rail_messages and
    rail_message_bytes (what this rank sent to ranks of other hosts as rail messages:
    docs/runtime.md, Hosts) with message_path ("<all-gather>/<reduce-scatter>": "two-sided",
    "one-sided", "ipc-rendezvous" or "none"; "" without rail messages) and
    message_path_reason (why not one-sided), stock_calls, params, slot (its
    landing slot id: groups of one id share the memory; -1: its own) with slot_reason (why its
    own), deferred_prefetches (prefetches that found the slot held and waited for the group's
    own unshard), landing_bytes, and all_gather_lane / reduce_scatter_lane ("tide-ag",
    "tide-rs", or "ep": the expert-parallel lane of a group whose ranks are one per host,
    docs/runtime.md) with lane_reason (why the group is on those lanes), all_gather_dtypes and
    all_gather_bytes (what one all-gather lands on each rank: an fsdp_pre_all_gather
    extension's outputs, docs/fsdp.md, or the parameters in their all-gather dtype). ``memory(module)`` gives the arena."""
    _check_module("report", module)
    state = getattr(module, _ATTRIBUTE, None)
    if state is None:
        reason = ("tide.fsdp.close returned it to stock FSDP2" if getattr(module, _CLOSED, False)
                  else "tide.fsdp.enable was not called")
        return [_row(_fsdp_group.TideGroup.at_rest(g, name, reason)) for name, g in _fsdp_groups(module)]
    return [_row(group) for group in state.groups]


def _copies(group, stats: dict) -> dict:
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
            "why": "parameters without a gradient (frozen, or unused) read one zero buffer, made "
            "once and as large as the largest of them (TIDE-RS reduces every parameter)",
        }
    if group.upcast_bytes:
        copies["upcast_gradients"] = {
            "bytes": group.upcast_bytes,
            "why": "the group's reduce-scatter had fp32 gradients (accumulated without sync, or "
            "a TP-replicated parameter's, which FSDP2 reduces over TP in fp32) beside bf16 ones, "
            "which were upcast to run on its fp32-gradient registration (NOTE [no-sync "
            "accumulation], NOTE [DTensor parameters])",
        }
    return copies


def _row(group) -> dict:
    """report()'s row of one group, built here only: of a TideGroup enable() made, or of one
    at rest (``TideGroup.at_rest``: a group enable() never saw, or close() returned), whose
    counts are zero and whose TIDE fields are empty."""
    stats = group.stats()
    copies = _copies(group, stats)
    on_tide = group.on_tide
    info = group.info if on_tide else {}
    row = {
        "group": group.name,
        "backend": "tide" if on_tide else "stock",
        "reason": group.reason,
        "runtime_backend": group.comm.backend if on_tide else "",
        "runtime_backend_reason": group.comm.choice_reason if on_tide else "",
        "all_gathers": int(stats["all_gathers"]),
        "reduce_scatters": int(stats["reduce_scatters"]) + _twin_reduce_scatters(group),
        "copy_bytes_avoided": int(stats["copy_bytes_avoided"]),
        "copy_bytes_made": sum(c["bytes"] for c in copies.values()),
        "copies": copies,
        "stock_calls": group.stock_calls,
        "stock_reasons": dict(group.stock_reasons),
        "suspended": group.suspended,
        "evictions": group.evictions,
        "resumes": group.resumes,
        "accumulation": _accumulation(group),
        "params": len(group.fsdp_group.fsdp_params),
        "active": on_tide and group.active,
        "slot": group.slot if on_tide else None,
        "slot_reason": group.slot_reason if on_tide else "",
        "deferred_prefetches": group.deferred_prefetches,
        "landing_bytes": int(info.get("landing_bytes", 0)),
        # NOTE [runtime] 11: "ep" where the collective runs on the expert-parallel lane.
        "all_gather_lane": str(info.get("all_gather_lane", "")),
        "reduce_scatter_lane": str(info.get("reduce_scatter_lane", "")),
        "lane_reason": str(info.get("lane_reason", "")),
    }
    row.update(_all_gather_what(group) if on_tide else {"all_gather_dtypes": [], "all_gather_bytes": 0})
    for key, kind in _STAT_FIELDS.items():
        row[key] = kind(stats.get(key, kind()))
    return row


# report()'s fields read straight from the runtime's group stats, with their type.
_STAT_FIELDS = {
    "all_gather_replays": int,
    "reduce_scatter_replays": int,
    "all_gather_graph_captures": int,
    "reduce_scatter_graph_captures": int,
    "all_gather_repoint_failure": str,
    "reduce_scatter_repoint_failure": str,
    "rail_messages": int,
    "rail_message_bytes": int,
    "message_path": str,
    "message_path_reason": str,
}


def _all_gather_what(group) -> dict:
    """What one all-gather of the group lands on each rank: its dtypes (an extension's outputs',
    NOTE [extension all-gathers], else the parameters' all-gather dtype) and bytes."""
    if group.ag is not None:
        return {"all_gather_dtypes": _fsdp_extensions.dtype_names(group.items),
                "all_gather_bytes": _fsdp_extensions.bytes_per_call(group.items, group.world)}
    numel = sum(int(fp.padded_sharded_param_size.numel()) for fp in group.fsdp_group.fsdp_params)
    item = torch.empty((), dtype=group.ag_dtype).element_size()
    return {"all_gather_dtypes": [str(group.ag_dtype).removeprefix("torch.")],
            "all_gather_bytes": group.world * numel * item}


def _twin_reduce_scatters(group) -> int:
    twin = group.twin
    if twin is None or not group.on_tide:
        return 0
    return int(twin.comm.stats(twin.gid)["reduce_scatters"])


def _accumulation(group) -> str:
    """How fp32 gradients beside bf16 parameters (no-sync accumulated, or TP-replicated
    parameters') are reduced (NOTE [no-sync accumulation])."""
    if group.twin is not None:
        return "tide-rs on the fp32 gradients (its fp32-gradient registration)"
    if group.twin_refusal:
        return f"stock: the fp32-gradient registration was refused: {group.twin_refusal}"
    return ""


def memory(module: nn.Module) -> dict:
    """TIDE's memory on this rank (NOTE [communicator arena], docs/fsdp.md): ``arena_bytes``
    over every communicator, and per communicator its arena's bytes by kind (resident, stage,
    landing slots, reduce-scatter areas), the Sec. 5.4 bound for its groups and its slots
    with the groups in each. On CPU the arena is shared memory, part of the process's RSS; on
    GPUs it is a tensor of a torch.cuda.MemPool over NCCL's allocator, so torch's memory
    statistics include it (``in_torch_allocator``; ``allocator_note`` says why where not)."""
    _check_module("memory", module)
    state = getattr(module, _ATTRIBUTE, None)
    if state is None:
        return {"arena_bytes": 0, "communicators": []}
    groups = state.groups
    names = {}
    for group in groups:
        if group.comm is not None and group.gid >= 0 or group.stats_when_stock is not None:
            names.setdefault(id(group.comm), {})[group.registered_id] = group.name
            for other in (group.twin, group.ag):  # its other registrations
                if other is not None:
                    names[id(group.comm)][other.registered_id] = other.name
    if any(g.on_tide and not g.active for g in groups):
        return {"arena_bytes": 0, "communicators": [], "pending": "the first iteration's order "
                "assigns the landing slots; the arena exists from the second"}
    out = []
    for comm in state.communicators:
        if not comm.serving:  # its arena was never created (its groups fell back)
            continue
        arena = dict(comm.arena())
        arena["in_torch_allocator"] = bool(arena.pop("provided", False))
        holder, _, arena["allocator_note"] = _ARENAS.get(id(comm), (None, None, ""))
        if isinstance(holder, _lend.Loan):  # NOTE [arena lending]
            arena["lent_bytes"] = holder.head_bytes
            arena["lent_steps"] = holder.loans
            arena["lend_reason"] = holder.reason
        by_id = names.get(id(comm), {})
        arena["slots"] = [
            dict(s, groups=[by_id.get(i, str(i)) for i in s["groups"]]) for s in arena["slots"]
        ]
        out.append(arena)
    return {"arena_bytes": sum(a["arena_bytes"] for a in out), "communicators": out}


def close(module: nn.Module) -> None:
    """Returns the module to stock FSDP2: every group leaves TIDE, the hooks go and the
    communicators close. Call it on every rank, between steps (no group unsharded); the model
    then trains on stock FSDP2, and enable() may be called again."""
    _check_module("close", module)
    state = getattr(module, _ATTRIBUTE, None)
    if state is None:
        return
    unsharded = [g.name for g in state.groups if g.on_tide and g.fsdp_group.is_unsharded]
    if unsharded:
        raise RuntimeError(
            "tide.fsdp.close: groups " + ", ".join(unsharded) + " are unsharded (their parameters "
            "are in TIDE's arena): call close() between steps, after the backward"
        )
    for handle in state.hooks:
        handle.remove()
    for restore in state.undo:
        restore()
    for group in state.groups:
        group.unbind("tide.fsdp.close returned it to stock FSDP2")
    for comm in state.communicators:
        _lend.remove(comm)
        comm.close()
        _ARENAS.pop(id(comm), None)  # the arena's memory goes after its communicator
    delattr(module, _ATTRIBUTE)
    setattr(module, _CLOSED, True)
