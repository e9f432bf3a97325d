"""Every patch TIDE sets on torch's FSDP2 objects: installed and removed here, nowhere else.

The adapter's logic stays where it was: the replacing collectives in _fsdp_calls.py, a
group's state, landing views and wrapped methods in _fsdp_group.py, enable() and close() in
fsdp.py. This module only sets and restores the attributes, so that what TIDE changes of
FSDP2 reads as one list. Each patched name, what replaces it, and how it is restored:

Process-wide, on the module ``torch.distributed.fsdp._fully_shard._fsdp_param_group`` (where
``FSDPParamGroup`` looks them up), by ``install_calls`` at the first enable() that serves a
group (once per process):
  1. ``foreach_all_gather``          -> ``_fsdp_calls._all_gather``
  2. ``foreach_all_gather_copy_out`` -> ``_fsdp_calls._all_gather_copy_out``
  3. ``foreach_reduce``              -> ``_fsdp_calls._reduce``
  Never restored: close() leaves them in place, and they hand every call of a group TIDE does
  not serve (after close(), every call) unchanged to the stock function they replaced, kept
  here (``stock_call``; ``stock_calls`` for the version check in _fsdp_compat.py).
Per FSDP parameter group (an ``FSDPParamGroup``'s instance attribute over its class's
method), by ``wrap_group_method`` at ``TideGroup.bind`` (enable()); ``unwrap_group_methods``
at ``TideGroup.unbind`` (close()) deletes each attribute that is still TIDE's, so the class's
method serves again:
  4. ``_to_sharded``, ``_to_sharded_post_forward`` -> the stock method, then the group's landing
     slot is released (NOTE [landing slots])
  5. ``pre_forward``, ``pre_backward`` -> the stock method, run as the group's own unshard
     (autograd pinning, carried no-sync gradients: NOTE [reversible fallbacks])
  6. ``post_backward`` -> the stock method, then the group is unpinned
  7. ``unshard`` -> the landing-slot check (evict, suspend or defer a prefetch), then the
     stock method
Per FSDP parameter (an ``FSDPParam`` instance), by ``install_landing`` at a group's first
served all-gather (``TideGroup.install_views``: NOTE [zero-offset landing views]);
``drop_landing`` (``TideGroup._drop_views``: at a suspension, a fall-back, and so at close())
deletes the instance attributes and empties ``all_gather_outputs``, so FSDP2 allocates its
own again at the next all-gather:
  8. ``all_gather_outputs`` -> the parameter's landing views (FSDP2's own list: one view, or
     one per output of an ``fsdp_pre_all_gather`` extension: NOTE [extension all-gathers])
  9. ``alloc_all_gather_outputs`` -> a no-op
  10. ``free_all_gather_outputs`` (torch 2.12+) -> a no-op; and ``free_unsharded_param`` ->
      frees only the inner tensors a tensor subclass's post-all-gather made that are not
      views of the landing (FSDP2 frees them all, and on torch 2.11 the outputs with them)
  Beside them, ``drop_unsharded_param`` deletes FSDP2's cached ``_unsharded_param`` (no patch:
  FSDP2 rebuilds it over the current all-gather output at the next unshard).
Per FSDP state (the ``FSDPState`` of each FSDP module under the model), by
``wrap_state_method`` at enable(); the restore it returns (kept in ``_Enabled.undo``, run by
close()) deletes the attribute where it is still TIDE's:
  11. ``_end_backward_iteration`` (torch 2.15: the end of the automatic callback and of
      ``finalize_backward``, which pipeline schedules call), else
      ``_root_post_backward_final_callback`` -> the stock method, then the iteration boundary
      and the communicators' health check (NOTE [job stop] 2)
Not patches, and not here: the forward pre-hooks enable() registers on the user's module
(removed by close()).
"""

from __future__ import annotations

from typing import Callable

# Patches 1-3: the stock functions of _fsdp_param_group that install_calls replaced, by name.
_STOCK_CALLS: dict = {}


def install_calls(replacements: dict) -> None:
    """Patches 1-3: sets each ``replacements[name]`` on _fsdp_param_group once per process
    (idempotent), keeping the stock function."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as param_group  # noqa: PLC0415

    if _STOCK_CALLS:
        return
    for name, replacement in replacements.items():
        _STOCK_CALLS[name] = getattr(param_group, name)
        setattr(param_group, name, replacement)


def stock_calls() -> dict:
    """The stock functions replaced so far in this process, by name."""
    return dict(_STOCK_CALLS)


def stock_call(name: str) -> Callable:
    """The stock function that patch ``name`` replaced."""
    return _STOCK_CALLS[name]


def wrap_group_method(fsdp_group, name: str, wrapper, wrapped: dict) -> None:
    """Patches 4-7: sets ``wrapper`` as the FSDP group's method ``name`` (an instance attribute
    over the class's method), recorded in ``wrapped`` for ``unwrap_group_methods``."""
    setattr(fsdp_group, name, wrapper)
    wrapped[name] = wrapper


def unwrap_group_methods(fsdp_group, wrapped: dict) -> None:
    """Removes the wrappers ``wrap_group_method`` set (those still set) and forgets them."""
    for name, wrapper in wrapped.items():
        if fsdp_group.__dict__.get(name) is wrapper:
            delattr(fsdp_group, name)
    wrapped.clear()


def install_landing(fsdp_param, views: list) -> None:
    """Patches 8-10: the parameter's all-gather outputs are ``views`` (its landing), which
    FSDP2 neither allocates nor frees."""
    fsdp_param.all_gather_outputs = list(views)
    fsdp_param.alloc_all_gather_outputs = _no_op
    if hasattr(fsdp_param, "free_all_gather_outputs"):  # torch 2.12+
        fsdp_param.free_all_gather_outputs = _no_op
    # An extension's post-all-gather may return the landing views themselves as inner tensors
    # (a float8 tensor over the gathered bytes); torch 2.11 frees the outputs here as well.
    fsdp_param.free_unsharded_param = _free_inner_tensors_of(fsdp_param)


def drop_landing(fsdp_param) -> None:
    """Removes patches 8-10: FSDP2 allocates and frees its own all-gather outputs again."""
    for name in ("alloc_all_gather_outputs", "free_all_gather_outputs", "free_unsharded_param"):
        fsdp_param.__dict__.pop(name, None)
    fsdp_param.all_gather_outputs = []


def drop_unsharded_param(fsdp_param):
    """Deletes FSDP2's cached unsharded parameter (rebuilt at its next unshard over the current
    all-gather output); returns it, or None."""
    return fsdp_param.__dict__.pop("_unsharded_param", None)


def wrap_state_method(fsdp_state, name: str, wrapper) -> Callable[[], None]:
    """Patch 11: sets ``wrapper`` as the FSDP state's ``name``; returns its restore."""
    setattr(fsdp_state, name, wrapper)

    def restore() -> None:
        if fsdp_state.__dict__.get(name) is wrapper:
            delattr(fsdp_state, name)

    return restore


def _no_op() -> None:
    return None


def _free_inner_tensors_of(fsdp_param):
    """free_unsharded_param without freeing the all-gather outputs (TIDE's landing): only the
    tensors a tensor subclass's post-all-gather made, over storage of their own, are freed."""

    def free_unsharded_param() -> None:
        landing = {t.untyped_storage().data_ptr() for t in fsdp_param.all_gather_outputs}
        for tensor in getattr(fsdp_param, "_unsharded_inner_tensors", ()):
            storage = tensor.untyped_storage()
            if storage.size() != 0 and storage.data_ptr() not in landing:
                storage.resize_(0)

    return free_unsharded_param
