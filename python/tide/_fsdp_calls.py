"""The group-level FSDP2 paths that TIDE replaces, and the stock fallbacks around them.

Installed once into ``torch.distributed.fsdp._fully_shard._fsdp_param_group`` (where
``FSDPParamGroup`` looks them up; _fsdp_patches.py, patches 1-3), each replacement serves the
groups that ``enable()`` put on TIDE and hands every other call, unchanged, to the stock
function it replaced.

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
NOTE [no-sync accumulation]
With ``set_requires_gradient_sync(False)`` FSDP2 accumulates the unsharded gradients over
backwards, in the reduce dtype where it is wider than the parameters' (fp32 beside bf16
parameters), and reduces the sum at the backward that syncs. TIDE registers a group for the
dtype autograd leaves its gradients in (bf16), so for a group the traced first iteration
reduced with fp32 gradients, ``enable()``'s activation registers a twin for fp32 gradients
(fsdp.py, ``_register_twins``): same parameters, same landing slot, never all-gathered. The
syncing reduce-scatter then runs TIDE-RS on the fp32 sums where they lie; a parameter whose
gradient was not accumulated (bf16) is upcast first, and the copy counted. Reducing every
micro-batch into the sharded gradient instead (accumulate=True) would communicate at every
backward, which is what no-sync asks FSDP2 not to do, so TIDE does not.
The same registration serves fp32 gradients that FSDP2 makes beside bf16 parameters for
another reason: a parameter replicated over TP (a norm weight) whose gradient FSDP2 reduces
over TP in fp32 before the reduce-scatter (NOTE [DTensor parameters] in _fsdp_group.py). The
group's bf16 gradients are then upcast beside it, counted as such: the runtime registers one
gradient dtype per group.
Calls outside what TIDE serves (another process group, as after a post-forward reshard to a
smaller mesh; HSDP with the all-reduce deferred; a gradient dtype TIDE was not registered
for) run stock and are counted by reason (NOTE [stock calls are counted by reason]).
"""

from __future__ import annotations

import inspect
import weakref

import torch
import torch.distributed as dist

from . import _fsdp_extensions, _fsdp_group, _fsdp_patches, _observe
from ._fsdp_compat import Layout

_layout: Layout | None = None


def _device_handle(device: torch.device):
    from torch.distributed.device_mesh import _get_device_handle  # noqa: PLC0415

    return _get_device_handle(device.type)


def _stream_handle(stream) -> int:
    return int(getattr(stream, "cuda_stream", 0) or 0)


def install(layout: Layout) -> None:
    """Replaces the three paths once per process (idempotent: _fsdp_patches.install_calls)."""
    global _layout
    _layout = layout
    _fsdp_patches.install_calls({
        "foreach_all_gather": _all_gather,
        "foreach_all_gather_copy_out": _all_gather_copy_out,
        "foreach_reduce": _reduce,
    })


def _bind(name: str, args, kwargs) -> dict:
    bound = inspect.signature(_fsdp_patches.stock_call(name)).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def _served(params, a: dict, refusal, trace):
    """The group on TIDE that serves this call, or None: the call runs stock FSDP2. A group
    still traced (NOTE [landing slots from the first iteration]) records it with ``trace``;
    a group that ``refusal`` refuses counts the call under its reason."""
    traced = _fsdp_group.traced_group(params)
    if traced is not None and not traced.active:
        trace(traced)
        traced.count_stock(_fsdp_group.TRACED)
        return None
    group = _fsdp_group.group_of(params)
    if group is None:
        return None
    reason = refusal(group, a)
    if reason:
        group.count_stock(reason)
        return None
    return group


def _unservable(group) -> str:
    """Why no call of the group can run on TIDE now (a traced context, a custom collective)."""
    return _observe.unservable_context() or _fsdp_group.custom_collective(group.fsdp_group)


# --- All-gather -----------------------------------------------------------------------------


class _TideAllGatherOutput(torch.Tensor):
    """Marks an AllGatherResult whose data TIDE already landed (an empty tensor)."""


def _all_gather(*args, **kwargs):
    a = _bind("foreach_all_gather", args, kwargs)
    group = _served(a["fsdp_params"], a, _all_gather_refusal, lambda t: t.tracer.all_gathered(t))
    if group is None:
        result = _fsdp_patches.stock_call("foreach_all_gather")(*args, **kwargs)
        _record_items(a["fsdp_params"], result)
        return result
    if group.ag is not None:
        return _all_gather_items(group, a, args, kwargs)
    params = a["fsdp_params"]
    shards = [fp._sharded_param_data for fp in params]
    numels = [int(fp.padded_sharded_param_size.numel()) for fp in params]
    for shard, numel in zip(shards, numels):
        if shard.numel() != numel or not shard.is_contiguous():
            raise RuntimeError(f"tide.fsdp: {group.name}: sharded data is not FSDP2's padded shard")
    return _land(group, group.gid, a, shards, [[group.ag_dtype] for _ in params], [[n] for n in numels],
                 sum(numels) * group.world * _itemsize(group.ag_dtype))


def _land(group, gid: int, a: dict, inputs: list, dtypes: list, numels: list, nbytes: int):
    """One TIDE-AG call of registration ``gid`` on FSDP2's all-gather stream, after its copy-in
    stream, reading ``inputs`` (one per registered parameter, in order); the landing views
    follow at the group's first call. Returns the AllGatherResult FSDP2's copy-out receives
    (``dtypes`` and ``numels``: per parameter, its inputs' as FSDP2 records them)."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import AllGatherResult  # noqa: PLC0415

    device = a["device"]
    handle = _device_handle(device)
    ag_stream = a["all_gather_stream"]
    ag_stream.wait_stream(a["all_gather_copy_in_stream"])
    with handle.stream(ag_stream), _observe.call("all_gather", group, nbytes):
        group.comm.all_gather(gid, _stream_handle(ag_stream), [t.data_ptr() for t in inputs])
        for t in inputs:
            if t.device.type == "cuda":
                t.record_stream(ag_stream)
        if not group.views_installed:
            group.install_views(device)
        event = ag_stream.record_event()
    marker = torch.empty(0, dtype=group.ag_dtype, device=device).as_subclass(_TideAllGatherOutput)
    return AllGatherResult(
        all_gather_output=marker,
        all_gather_event=event,
        all_gather_work=None,
        param_all_gather_input_dtypes=dtypes,
        param_all_gather_input_numels=numels,
        all_gather_input_split_sizes=[n for param_numels in numels for n in param_numels],
    )


def _record_items(params, result) -> None:
    """NOTE [extension all-gathers] 1: the outputs of a traced extension group's all-gather."""
    traced = _fsdp_group.traced_group(params)
    if (traced is not None and not traced.active and result is not None
            and _fsdp_extensions.has_extension(params) and len(params) == len(traced.index)):
        traced.record_items(_fsdp_extensions.recorded(params, result))


def _all_gather_items(group, a: dict, args, kwargs):
    """NOTE [extension all-gathers] 3: FSDP2's all-gather inputs (its pre-all-gather's
    outputs, or the cast shards), landed by one TIDE-AG call on the outputs' registration."""
    params = a["fsdp_params"]
    with _device_handle(a["device"]).stream(a["all_gather_copy_in_stream"]):
        inputs = [fp.all_gather_inputs for fp in params]
    why = ""
    if not _fsdp_extensions.as_laid_out(inputs, params, group.items):  # names only for the reason
        names = group.param_names()
        why = (_fsdp_extensions.check_inputs(inputs, names)
               or _fsdp_extensions.mismatch(_fsdp_extensions.current(inputs, params), group.items, names))
    if why:  # the same on every rank (FSDP2 pads every shard alike): stock FSDP2 for good
        reason = f"its all-gather outputs changed after TIDE laid them out: {why}"
        group.fall_back(reason)
        group.count_stock(reason)
        return _fsdp_patches.stock_call("foreach_all_gather")(*args, **kwargs)
    flat = [t for tensors in inputs for t in tensors]
    return _land(group, group.ag.gid, a, flat,
                 [[item.dtype for item in items] for items in group.items],
                 [[item.numel for item in items] for items in group.items],
                 _fsdp_extensions.bytes_per_call(group.items, group.world))


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def _all_gather_refusal(group, a: dict) -> str:
    """Why this all-gather of a group on TIDE runs stock FSDP2 ('' when TIDE serves it).
    A held slot is resolved here: an idle holder is resharded, otherwise the group's
    all-gathers go stock until the next iteration (NOTE [reversible fallbacks])."""
    unservable = _unservable(group)
    if unservable:
        return unservable
    if a["group"] is not group.pg:
        return ("the all-gather runs over another process group than the one TIDE registered "
                "(reshard_after_forward=<int>: FSDP2 re-gathers over the post-forward mesh)")
    if len(a["fsdp_params"]) != len(group.index):
        return f"the all-gather covers {len(a['fsdp_params'])} of the group's {len(group.index)} parameters"
    if not group.resume_if_possible():
        return group.suspended
    if group.ag is None and _fsdp_extensions.has_extension(a["fsdp_params"]):
        reason = ("an fsdp_pre_all_gather extension appeared after the first iteration, which "
                  "TIDE traced without it (NOTE [extension all-gathers])")
        group.fall_back(reason)  # its landing views must not take FSDP2's copy-out
        return reason
    if group.comm.holds_slot(group.landing_gid):
        return ""
    holder = group.slot_holder()  # NOTE [landing slots]: the slot is another group's now
    if holder is None:
        return ""
    if holder.evictable():
        group.evict(holder)
        return ""
    from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState  # noqa: PLC0415

    if group.fsdp_group._training_state == TrainingState.PRE_BACKWARD:
        raise RuntimeError(
            f"tide.fsdp: group '{group.name}' must be unsharded for its backward while group "
            f"'{holder.name}' still holds their shared landing slot {group.slot}; autograd keeps "
            "both groups' parameters in that slot. Call tide.fsdp.enable(model, ring=False) "
            "to give every group a slot of its own"
        )
    group.suspend(
        f"its landing slot {group.slot} was held by group '{holder.name}', whose parameters "
        "autograd may still read, at its own forward all-gather (more groups unsharded at once "
        "than the first iteration showed); stock FSDP2 until the next iteration"
    )
    return group.suspended

def _all_gather_copy_out(*args, **kwargs):
    a = _bind("foreach_all_gather_copy_out", args, kwargs)
    result = a["all_gather_result"]
    if not isinstance(result.all_gather_output, _TideAllGatherOutput):
        return _fsdp_patches.stock_call("foreach_all_gather_copy_out")(*args, **kwargs)
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


def _reduce_refusal(group, a: dict) -> str:
    """Why this reduce-scatter of a group on TIDE runs stock FSDP2 ('' when TIDE serves it)."""
    unservable = _unservable(group)
    if unservable:
        return unservable
    prepare = a.get("prepare_reduce_scatter_inputs")
    if prepare is not None and prepare is not _default_prepare():
        return "a custom prepare_reduce_scatter_inputs is set (TIDE reads the gradients themselves)"
    if a["reduce_scatter_group"] is not group.pg:
        return "the reduce-scatter runs over another process group than the one TIDE registered"
    if a["all_reduce_group"] is not None and not a["all_reduce_grads"]:
        return "HSDP with the replicate all-reduce deferred (set_requires_all_reduce(False))"
    if a["partial_reduce_output"] is not None:
        return "a partial reduce output from a deferred all-reduce is pending"
    grads, params = a["unsharded_grads"], a["fsdp_params"]
    if any(fp not in group.index for fp in params):
        return "the reduce-scatter holds parameters of another group"
    if any(type(g) is not torch.Tensor for g in grads):  # its data_ptr() is not its bytes
        return ("a gradient is a tensor subclass (a parameter subclass's gradient): TIDE-RS "
                "reads dense gradients in place, FSDP2 copies it through the subclass")
    if any(not g.is_contiguous() for g in grads):
        return "a gradient is not contiguous"
    dtypes = {g.dtype for g in grads}
    served = {group.grad_dtype} | ({torch.float32} if group.twin is not None else set())
    if not dtypes <= served:
        if torch.float32 in dtypes and group.grad_dtype == torch.bfloat16:
            if group.twin_refusal:
                return f"gradients accumulated in fp32 without sync: the runtime refused their registration ({group.twin_refusal})"
            return ("gradients accumulated in fp32 without sync (set_requires_gradient_sync(False)) "
                    "first appeared after the first iteration, when TIDE laid out its arena; "
                    "accumulate from the first step on to have TIDE reduce them")
        return (f"gradients in {sorted(str(d) for d in dtypes)}, where TIDE registered the "
                f"group for {group.grad_dtype}")
    return ""


def _default_prepare():
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as collectives  # noqa: PLC0415

    return getattr(collectives, "_default_reduce_scatter_input_fn", None)


_ZEROS: dict = {}  # (device, dtype) -> a zero tensor, read for parameters without a gradient


def _zeros(group, shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Zeros of ``shape`` read by TIDE-RS for a parameter without a gradient (frozen, or
    unused in this backward): views of one buffer per device and dtype, made once and only
    ever read, as large as the largest such parameter."""
    numel = int(torch.Size(shape).numel())
    key = (str(device), dtype)
    buffer = _ZEROS.get(key)
    if buffer is None or buffer.numel() < numel:
        buffer = torch.zeros(numel, dtype=dtype, device=device)
        _ZEROS[key] = buffer
        group.zero_fill_bytes += buffer.numel() * buffer.element_size()
    return buffer[:numel]


def _reduce(*args, **kwargs):
    a = _bind("foreach_reduce", args, kwargs)
    params, grads = a["fsdp_params"], a["unsharded_grads"]
    group = _served(params, a, _reduce_refusal, lambda t: t.tracer.reduced(t, grads))
    if group is None:
        return _fsdp_patches.stock_call("foreach_reduce")(*args, **kwargs)
    ar_group = a["all_reduce_group"]

    device = a["device"]
    handle = _device_handle(device)
    current = handle.current_stream()
    rs_stream = a["reduce_scatter_stream"]
    alpha, post, all_reduce_op = _alpha_and_post(a, group.world)
    hook = a["all_reduce_hook"]
    follows = ar_group is not None or hook is not None or post not in (None, 1)

    # NOTE [no-sync accumulation]: gradients FSDP2 accumulated in fp32 over no-sync backwards
    # go to the group's fp32-gradient registration; the rest to its own.
    gid, grad_dtype = group.gid, group.grad_dtype
    if group.twin is not None and any(g.dtype == torch.float32 for g in grads):
        gid, grad_dtype = group.twin.gid, torch.float32
    # The gradients where autograd left them, in group order (TIDE-RS reads them in place and
    # reduces in fp32); a shared zero buffer for parameters without one (frozen, unused).
    by_index: dict[int, torch.Tensor] = {}
    for fp, g in zip(params, grads):
        if g.dtype != grad_dtype:  # a gradient not accumulated in a no-sync backward: upcast
            g = g.to(grad_dtype)
            group.upcast_bytes += g.numel() * g.element_size()
        by_index[group.index[fp]] = g
    all_params = group.fsdp_group.fsdp_params
    ordered = []
    for p, fp in enumerate(all_params):
        if p not in by_index:
            by_index[p] = _zeros(group, _fsdp_group.local_shape(fp), grad_dtype, device)
        ordered.append(by_index[p])

    packed = _accumulation_target(group, params) if not follows and len(params) == len(all_params) else None
    accumulate = packed is not None
    shard_elems = int(group.info["shard_elems"])
    # Slot-Reuse (paper Sec. 5.3): the layer vacated its slot at reshard; its gradients move
    # there and their storage is freed at this host point. TIDE-RS then reads the slot, and the
    # slot's next all-gather waits for those reads. Where another group holds the slot already,
    # the gradients are read in place as In-Place does.
    rs_bytes = sum(g.numel() * g.element_size() for g in ordered)
    # An extension group's own registration lands 1-byte items (NOTE [extension all-gathers]
    # 2): its slot does not have the gradients' geometry, so they are read in place.
    staged = (gid == group.gid and group.mode == "slot-reuse" and group.ag is None
              and group.slot_holder() is None
              and not group.comm.holds_slot(group.landing_gid))
    if staged:
        group.comm.stage_gradients(gid, _stream_handle(current), [g.data_ptr() for g in ordered])
        grads.clear()
        del by_index
        ordered = []
    rs_stream.wait_stream(current)
    with handle.stream(rs_stream), _observe.call("reduce_scatter", group, rs_bytes):
        if packed is None:
            packed = torch.empty(shard_elems, dtype=torch.float32, device=device)
        group.comm.reduce_scatter(
            gid,
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
