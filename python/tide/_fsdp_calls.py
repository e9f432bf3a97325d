"""The group-level FSDP2 paths that TIDE replaces, and the stock fallbacks around them.

Installed once into ``torch.distributed.fsdp._fully_shard._fsdp_param_group`` (where
``FSDPParamGroup`` looks them up), each replacement serves the groups that ``enable()``
put on TIDE and hands every other call, unchanged, to the stock function it replaced.

All-gather (paper Sec. 3, App. F):
  1. ``foreach_all_gather``: on FSDP2's all-gather stream, after its copy-in stream, one
     ``comm.all_gather`` with the per-parameter padded shard pointers. TIDE lands every
     parameter in its landing matrix, which is the parameter's all-gather output from the
     group's first all-gather on (NOTE [zero-offset landing views]). No flat buffer, no
     copy-in by FSDP2.
  2. ``foreach_all_gather_copy_out``: the caller's stream waits for the all-gather's event;
     there is nothing to copy out.
Reduce-scatter (paper Sec. 4):
  3. ``foreach_reduce``: on FSDP2's reduce-scatter stream, after the caller's stream, one
     ``comm.reduce_scatter`` reading the unsharded gradients in place (no ``_chunk_cat``) into
     an fp32 packed shard with FSDP2's scaling folded into ``alpha``. Then, as FSDP2 does:
     HSDP's replicate all-reduce, the all-reduce hook, the post-divide, and sharded gradients
     as views of the packed shard, accumulated into existing ones. Where nothing follows the
     reduce-scatter and every parameter's sharded gradient already is a view of this group's
     last packed shard, TIDE accumulates in place (``accumulate=True``).
Calls outside what TIDE serves (another process group, as after a post-forward reshard to a
smaller mesh; HSDP with the all-reduce deferred; a gradient dtype TIDE was not registered
for) run stock and are counted in ``stock_calls``.
"""

from __future__ import annotations

import inspect
import weakref

import torch
import torch.distributed as dist

from . import _fsdp_group
from ._fsdp_compat import Layout

_installed: dict = {}
_layout: Layout | None = None


def _device_handle(device: torch.device):
    from torch.distributed.device_mesh import _get_device_handle  # noqa: PLC0415

    return _get_device_handle(device.type)


def _stream_handle(stream) -> int:
    return int(getattr(stream, "cuda_stream", 0) or 0)


def install(layout: Layout) -> None:
    """Replaces the three paths once per process (idempotent)."""
    global _layout
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as param_group  # noqa: PLC0415

    _layout = layout
    if _installed:
        return
    for name, replacement in (
        ("foreach_all_gather", _all_gather),
        ("foreach_all_gather_copy_out", _all_gather_copy_out),
        ("foreach_reduce", _reduce),
    ):
        original = getattr(param_group, name)
        _installed[name] = original
        setattr(param_group, name, replacement)


def replaced() -> dict:
    """The stock functions replaced so far in this process, by name."""
    return dict(_installed)


def _bind(name: str, args, kwargs) -> dict:
    bound = inspect.signature(_installed[name]).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


# --- All-gather -----------------------------------------------------------------------------


class _TideAllGatherOutput(torch.Tensor):
    """Marks an AllGatherResult whose data TIDE already landed (an empty tensor)."""


def _all_gather(*args, **kwargs):
    a = _bind("foreach_all_gather", args, kwargs)
    traced = _fsdp_group.traced_group(a["fsdp_params"])
    if traced is not None and not traced.active:  # NOTE [landing slots from the first iteration]
        traced.tracer.all_gathered(traced)
        return _installed["foreach_all_gather"](*args, **kwargs)
    group = _fsdp_group.group_of(a["fsdp_params"])
    if group is None or a["group"] is not group.pg or len(a["fsdp_params"]) != len(group.index):
        if group is not None:
            group.stock_calls += 1
        return _installed["foreach_all_gather"](*args, **kwargs)
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import AllGatherResult  # noqa: PLC0415

    device = a["device"]
    handle = _device_handle(device)
    copy_in_stream, ag_stream = a["all_gather_copy_in_stream"], a["all_gather_stream"]
    params = a["fsdp_params"]
    shards = [fp._sharded_param_data for fp in params]
    numels = [int(fp.padded_sharded_param_size.numel()) for fp in params]
    for shard, numel in zip(shards, numels):
        if shard.numel() != numel or not shard.is_contiguous():
            raise RuntimeError(f"tide.fsdp: {group.name}: sharded data is not FSDP2's padded shard")
    # NOTE [landing slots]: the group's own unshard finds its slot held by another group.
    if not group.comm.holds_slot(group.gid):
        holder = group.slot_holder()
        if holder is not None:
            from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState  # noqa: PLC0415

            if group.fsdp_group._training_state == TrainingState.PRE_BACKWARD:
                raise RuntimeError(
                    f"tide.fsdp: group '{group.name}' must be unsharded for its backward while group "
                    f"'{holder.name}' still holds their shared landing slot {group.slot}; autograd keeps "
                    "both groups' parameters in that slot. Call tide.fsdp.enable(model, ring=False) "
                    "to give every group a slot of its own"
                )
            group.fall_back(
                f"its landing slot {group.slot} was still held by group '{holder.name}' at its own "
                "forward all-gather (both unsharded at once, e.g. nested FSDP modules); stock FSDP2 "
                "from then on"
            )
            group.stock_calls += 1
            return _installed["foreach_all_gather"](*args, **kwargs)
    ag_stream.wait_stream(copy_in_stream)
    with handle.stream(ag_stream):
        group.comm.all_gather(group.gid, _stream_handle(ag_stream), [s.data_ptr() for s in shards])
        for shard in shards:
            if shard.device.type == "cuda":
                shard.record_stream(ag_stream)
        if not group.views_installed:
            group.install_views(device)
        event = ag_stream.record_event()
    marker = torch.empty(0, dtype=group.ag_dtype, device=device).as_subclass(_TideAllGatherOutput)
    return AllGatherResult(
        all_gather_output=marker,
        all_gather_event=event,
        all_gather_work=None,
        param_all_gather_input_dtypes=[[group.ag_dtype] for _ in params],
        param_all_gather_input_numels=[[n] for n in numels],
        all_gather_input_split_sizes=numels,
    )


def _all_gather_copy_out(*args, **kwargs):
    a = _bind("foreach_all_gather_copy_out", args, kwargs)
    result = a["all_gather_result"]
    if not isinstance(result.all_gather_output, _TideAllGatherOutput):
        return _installed["foreach_all_gather_copy_out"](*args, **kwargs)
    if result.all_gather_event is not None:
        _device_handle(result.all_gather_output.device).current_stream().wait_event(
            result.all_gather_event
        )
    return None


# --- Reduce-scatter -------------------------------------------------------------------------


def _alpha_and_post(a: dict, world: int) -> tuple[float, float | None, object]:
    """FSDP2's scaling as (alpha for TIDE-RS, post-divide factor, all-reduce op)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as collectives  # noqa: PLC0415

    reduce_dtype = a["reduce_dtype"]
    pre, post, _, all_reduce_op = collectives._get_gradient_divide_factors(
        a["reduce_scatter_group"],
        a["all_reduce_group"],
        reduce_dtype,
        a["device"].type,
        a["gradient_divide_factor"],
        a["force_sum_reduction_for_comms"],
    )
    factor = a["gradient_divide_factor"]
    if pre is not None or post is not None:  # sums with explicit division (fp16 or forced)
        alpha = 1.0 / pre if pre else 1.0
    elif factor is not None:  # AVG (factor == N) or PREMUL_SUM(1 / factor)
        alpha = 1.0 / factor
    else:
        replicas = a["all_reduce_group"].size() if a["all_reduce_group"] is not None else 1
        alpha = 1.0 if world * replicas == 1 else 1.0 / world  # SUM, else AVG
    return alpha, post, all_reduce_op


def _stock_reduce(group, args, kwargs):
    if group is not None:
        group.stock_calls += 1
    return _installed["foreach_reduce"](*args, **kwargs)


def _reduce(*args, **kwargs):
    a = _bind("foreach_reduce", args, kwargs)
    params, grads = a["fsdp_params"], a["unsharded_grads"]
    traced = _fsdp_group.traced_group(params)
    if traced is not None and not traced.active:  # NOTE [landing slots from the first iteration]
        traced.tracer.reduced(traced)
        return _installed["foreach_reduce"](*args, **kwargs)
    group = _fsdp_group.group_of(params)
    if group is None:
        return _installed["foreach_reduce"](*args, **kwargs)
    rs_group, ar_group = a["reduce_scatter_group"], a["all_reduce_group"]
    defer_all_reduce = ar_group is not None and not a["all_reduce_grads"]
    if (
        rs_group is not group.pg
        or defer_all_reduce
        or a["partial_reduce_output"] is not None
        or any(g.dtype != group.grad_dtype or not g.is_contiguous() for g in grads)
        or any(fp not in group.index for fp in params)
    ):
        return _stock_reduce(group, args, kwargs)

    device = a["device"]
    handle = _device_handle(device)
    current = handle.current_stream()
    rs_stream = a["reduce_scatter_stream"]
    alpha, post, all_reduce_op = _alpha_and_post(a, group.world)
    hook = a["all_reduce_hook"]
    follows = ar_group is not None or hook is not None or post not in (None, 1)

    # The gradients where autograd left them, in group order (TIDE-RS reads them in place and
    # reduces in fp32: no upcast); zeros for parameters without one.
    by_index: dict[int, torch.Tensor] = {group.index[fp]: g for fp, g in zip(params, grads)}
    all_params = group.fsdp_group.fsdp_params
    ordered = []
    for p, fp in enumerate(all_params):
        if p not in by_index:
            zeros = torch.zeros(fp.sharded_param.shape, dtype=group.grad_dtype, device=device)
            group.zero_fill_bytes += zeros.numel() * zeros.element_size()
            by_index[p] = zeros
        ordered.append(by_index[p])

    packed = _accumulation_target(group, params) if not follows and len(params) == len(all_params) else None
    accumulate = packed is not None
    shard_elems = int(group.info["shard_elems"])
    # Slot-Reuse (paper Sec. 5.3): the layer vacated its slot at reshard; its gradients move
    # there and their storage is freed at this host point. TIDE-RS then reads the slot, and the
    # slot's next all-gather waits for those reads. Where another group holds the slot already,
    # the gradients are read in place as In-Place does.
    staged = group.mode == "slot-reuse" and group.slot_holder() is None and not group.comm.holds_slot(group.gid)
    if staged:
        group.comm.stage_gradients(group.gid, _stream_handle(current), [g.data_ptr() for g in ordered])
        grads.clear()
        del by_index
        ordered = []
    rs_stream.wait_stream(current)
    with handle.stream(rs_stream):
        if packed is None:
            packed = torch.empty(shard_elems, dtype=torch.float32, device=device)
        group.comm.reduce_scatter(
            group.gid,
            _stream_handle(rs_stream),
            [g.data_ptr() for g in ordered],
            packed.data_ptr(),
            float(alpha),
            accumulate,
        )
        if device.type == "cuda":
            for g in ordered:  # In-Place: autograd's gradients live until TIDE-RS read them
                g.record_stream(rs_stream)
        grads.clear()
        del ordered
        rs_event = rs_stream.record_event()
        post_stream = rs_stream
        all_reduce_input = all_reduce_event = None
        if ar_group is not None:  # HSDP: the replicate all-reduce, as FSDP2 runs it
            post_stream = a["all_reduce_stream"]
            post_stream.wait_stream(rs_stream)
            with handle.stream(post_stream):
                dist.all_reduce(packed, group=ar_group, op=all_reduce_op)
                all_reduce_input, all_reduce_event = packed, post_stream.record_event()
    if hook is not None:
        post_stream = a["all_reduce_stream"]
        post_stream.wait_stream(rs_stream)
        with handle.stream(post_stream):
            hook(packed)
            all_reduce_input, all_reduce_event = packed, post_stream.record_event()
    with handle.stream(post_stream):
        if post not in (None, 1):
            packed.div_(post)
        if not accumulate:
            _view_out(group, params, packed)
        _run_post_accumulate_hooks(params)
        post_event = post_stream.record_event()
    # Weakly: the sharded gradients (views of it) keep it alive until zero_grad drops them, as
    # FSDP2's own reduce-scatter output; a strong reference kept it to the next backward.
    group.packed_grad = weakref.ref(packed)
    empty = torch.empty(0, dtype=torch.float32, device=device)
    if _layout is not None and _layout.reduce_returns_post_stream:
        return (empty, rs_event, post_stream, post_event, all_reduce_input, all_reduce_event, None)
    return (empty, rs_event, post_event, all_reduce_input, all_reduce_event, None)


def _grad_view(group, p: int, fp, packed: torch.Tensor) -> torch.Tensor:
    return torch.as_strided(
        packed,
        size=fp.sharded_size,
        stride=fp.contiguous_sharded_stride,
        storage_offset=int(group.info["out_offsets"][p]),
    )


def _accumulation_target(group, params) -> torch.Tensor | None:
    """The group's last packed shard when every sharded gradient is still a view of it."""
    ref = getattr(group, "packed_grad", None)
    packed = ref() if ref is not None else None
    if packed is None:
        return None
    for fp in params:
        grad = fp.sharded_param.grad
        if grad is None:
            return None
        local = grad._local_tensor
        expected = _grad_view(group, group.index[fp], fp, packed)
        if (
            local.untyped_storage().data_ptr() != packed.untyped_storage().data_ptr()
            or local.storage_offset() != expected.storage_offset()
            or local.stride() != expected.stride()
            or local.shape != expected.shape
        ):
            return None
    return packed


def _view_out(group, params, packed: torch.Tensor) -> None:
    for fp in params:
        view = _grad_view(group, group.index[fp], fp, packed)
        if fp.sharded_param.grad is not None:
            fp.sharded_param.grad._local_tensor += view
        else:
            fp.sharded_param.grad = fp.to_sharded_dtensor(view)


def _run_post_accumulate_hooks(params) -> None:
    for fp in params:
        hooks = getattr(fp.sharded_param, "_post_accumulate_grad_hooks", None) or {}
        for hook in hooks.values():
            hook(fp.sharded_param)
