"""Per FSDP parameter group state: eligibility, registration and the landing views.

NOTE [zero-offset landing views]
FSDP2 builds each unsharded parameter with ``torch.as_strided(all_gather_outputs[0], ...,
storage_offset=0)`` and, for every all-gather, resizes that output's storage up and (at
reshard) down to zero. For a TIDE group, from its first all-gather on (the runtime places its
arena at the first call), ``all_gather_outputs[0]`` of parameter p is instead
a tensor whose storage is rooted at p's matrix in the group's landing zone (TIDE's arena):
``storage_offset() == 0``, a version counter of its own, and a size of exactly
``N * R_p * K_p`` elements, FSDP2's padded unsharded size. TIDE-AG writes that memory behind
autograd's back, so no version counter moves (FSDP2 itself wraps its copy-out in
``_unsafe_preserve_version_counter`` for the same reason). The landing is persistent, so the
parameter's alloc and free become no-ops: its memory is the arena's, reported by
``tide.fsdp.memory`` and not by torch's allocator. A ``copy.deepcopy`` of such a tensor (or of
a state dict) clones the storage into ordinary memory, as for any tensor.

NOTE [landing slots]
The landing is not the group's alone: groups share the communicator's landing slots (NOTE
[communicator arena] in the C++ runtime; paper App. F), so the landing views of groups in
one slot alias. Which groups share which slot comes from the first iteration's order (NOTE
[landing slots from the first iteration] in _fsdp_trace.py): with FSDP2's prefetch depth of 1
the blocks alternate two slots and the root, which FSDP2 keeps unsharded, has one of its own.
A group holds its slot from its all-gather until FSDP2 reshards it (``_to_sharded``, wrapped
here), which releases it on the current stream: the slot's next all-gather waits on the
device for that stream's work so far. Autograd keeps the unsharded parameters of a forward
for its backward, as views of the slot; FSDP2 re-gathers the group into the same storage
before that backward reads them, so the slot must never hold another group's parameters then.
Where a later iteration unshards in a pattern the traced one did not show (an evaluation
forward under no_grad that leaves a reshard_after_forward=False block unsharded, a block kept
unsharded by set_reshard_after_backward(False), deeper prefetching), a group may find its slot
held by another group.

NOTE [reversible fallbacks]
  - a holder that nothing reads (``evictable``: no grad-enabled forward of it since its
    backward, not inside its own forward or backward, no all-gather pending) is resharded by
    FSDP2's own ``_to_sharded``, and the group takes the slot on TIDE; FSDP2 all-gathers the
    holder again when it next needs it (one all-gather more, no stock call);
  - otherwise, at a prefetch by FSDP2 (forward or backward prefetch): the prefetch is
    deferred, and the group is all-gathered at its own pre-forward or pre-backward;
  - at an explicit ``unshard()`` by the user, or at the group's own forward all-gather: the
    group is suspended: its all-gathers run stock FSDP2 (its own all-gather outputs come back)
    until an iteration boundary has passed (FSDP2 ended the backward iteration: the root's
    post-backward, or ``finalize_backward`` after a pipeline schedule's last micro-batch), and
    it returns to TIDE at its next all-gather before a forward (its own, a prefetch, or an
    explicit ``unshard()``, as pipeline schedules make). Its reduce-scatters stay on TIDE. Each
    such call is counted under its reason (NOTE [stock calls are counted by reason]);
  - a group that stock FSDP2 unsharded before TIDE served it (an ``unshard()`` before
    ``enable(ring=False)``, or a pipeline stage that its schedule keeps unsharded across
    micro-batches) is suspended the same way: autograd saves its stock parameters;
  - a gradient accumulated without sync on an unsharded parameter that TIDE rebuilds over
    another all-gather output (its views installed or dropped mid-accumulation) is carried to
    the rebuilt parameter at the group's next own unshard;
  - at a group's own unshard in backward: no storage can serve both, so this raises, naming the
    two groups (enable(..., ring=False) gives every group a slot of its own).
So no group's parameters are ever overwritten while FSDP2 or autograd holds them. A tensor
kept by the user from a resharded parameter (FSDP2 frees its storage; TIDE's cannot be
freed) reads whatever its slot holds now: FSDP2 itself never reads one.
"""

from __future__ import annotations

import logging
import weakref

import torch

from . import _fsdp_extensions, _fsdp_patches, _memory
from ._runtime import MAX_PARAMS  # the runtime's limit, read from tide._C

_log = logging.getLogger("tide.fsdp")

# NOTE [stock calls are counted by reason]
# Every call of a group on TIDE that runs stock FSDP2 instead is counted under its reason (report()'s ``stock_reasons``), and a warning is
# logged once per reason and group. The one expected reason is the traced first iteration
# (NOTE [landing slots from the first iteration]), logged at INFO.
TRACED = "the first iteration runs on stock FSDP2 while TIDE records the order of unshards"

# FSDPParam -> TideGroup, for the replaced collectives to find their group.
GROUP_OF_PARAM: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _mp_policy(fsdp_group, fsdp_param):
    return getattr(fsdp_param, "mp_policy", None) or getattr(fsdp_group, "mp_policy", None)


def _dtypes(fsdp_group, fsdp_param):
    """(orig, param, reduce) dtypes as FSDP2 resolves them at lazy init."""
    orig = fsdp_param.sharded_param.dtype
    policy = _mp_policy(fsdp_group, fsdp_param)
    param = getattr(policy, "param_dtype", None)
    if param == orig or not orig.is_floating_point:
        param = None
    return orig, param, getattr(policy, "reduce_dtype", None)


def param_name(fp, module_paths: dict | None = None) -> str:
    """The parameter's path from the root, as named in reports: FSDP2's own ``_param_fqn``
    where it is set (at the root's lazy init), else the path of the module that holds it
    (``module_paths``: id(module) -> path, from the model ``enable()`` was given)."""
    fqn = getattr(fp, "_param_fqn", None)
    if fqn:
        return fqn
    info = getattr(fp, "_module_info", None)
    if info is None:
        return "a parameter"
    path = (module_paths or {}).get(id(info.module))
    if path is None:
        return f"{type(info.module).__name__}.{info.param_name}"
    return f"{path}.{info.param_name}" if path else info.param_name


def local_shape(fp) -> torch.Size:
    """The parameter's unsharded local shape: what FSDP2 shards on dim 0 and all-gathers.

    NOTE [DTensor parameters]
    FSDP2 shards a parameter's local tensor: the tensor itself, or for a DTensor parameter
    (tensor parallel beside FSDP, or FSDP2's SPMD-mesh path: ``fully_shard(...,
    dp_mesh_dims=...)``, where every parameter is a DTensor over the whole SPMD mesh) the
    DTensor's local tensor, whose size FSDP2 keeps as ``_orig_size``. It chunks that tensor on
    dim 0 over the shard process group (``mesh_info.shard_process_group``), pads every chunk
    to the first one's size (``padded_sharded_param_size``) and all-gathers the chunks
    rank-major; the unsharded parameter is ``as_strided`` over the all-gather output, then
    wrapped as a DTensor again with the parameter's own spec. Where TP also shards dim 0,
    FSDP2 records the composition as ``_StridedShard`` in the DTensor metadata, but the bytes
    it moves are the same dim-0 chunks of the TP-local tensor. So TIDE serves every such
    parameter with its local shape: the global DTensor shape (``sharded_param.shape``) would
    include the TP dimensions. TP's own collectives (in the model's forward and backward, and
    the TP reduction of a replicated parameter's gradient before FSDP2's reduce-scatter) are
    not touched."""
    return fp._orig_size


def local_reason(fsdp_group, layout_reason: str, module_paths: dict | None = None) -> str:
    """Why this rank cannot run the group on TIDE; empty when it can. Names the parameter
    (``param_name``) where one parameter is the cause."""
    from torch.distributed.fsdp._fully_shard._fsdp_common import FSDPMeshInfo  # noqa: PLC0415

    params = fsdp_group.fsdp_params
    if layout_reason:
        return layout_reason
    if not params:
        return "no parameters"
    if len(params) > MAX_PARAMS:
        return f"{len(params)} parameters > {MAX_PARAMS}"
    if not isinstance(fsdp_group.mesh_info, FSDPMeshInfo):
        return "not sharded (replicate-only mesh)"
    custom = custom_collective(fsdp_group)
    if custom:
        return custom
    if fsdp_group.is_unsharded:
        return "enable() was called while the group is unsharded (call it before forward)"
    reduce_dtypes = set()
    for fp in params:
        name = param_name(fp, module_paths)
        if getattr(fp, "offload_to_cpu", False):
            return "CPU offload"
        if fp.fsdp_placement.dim != 0:
            return f"{name} is sharded as Shard({fp.fsdp_placement.dim}), not Shard(0)"
        dtensor_reason = _dtensor_reason(fp, name)
        if dtensor_reason:
            return dtensor_reason
        local = fp._sharded_param_data
        if type(local) is not torch.Tensor and not _fsdp_extensions.has_extension([fp]):
            return (f"{name} is a {type(local).__name__} without fsdp_pre_all_gather: TIDE reads "
                    "dense shards in place (NOTE [extension all-gathers])")
        if getattr(fp, "_has_sharded_grad_dtype_override", False):
            return f"{name} has a grad_dtype override"
        orig, param, reduce = _dtypes(fsdp_group, fp)
        if orig != torch.float32:
            return f"{name} is {orig}; TIDE keeps fp32 masters"
        if param not in (None, torch.bfloat16):
            return f"param_dtype {param} unsupported (None or bfloat16)"
        if reduce not in (None, torch.float32, torch.bfloat16):
            return f"reduce_dtype {reduce} unsupported (None, float32 or bfloat16)"
        reduce_dtypes.add((param, reduce))
    if len(reduce_dtypes) != 1:
        return "mixed precision policies differ within the group"
    return ""


def _dtensor_reason(fp, name: str) -> str:
    """NOTE [DTensor parameters]: why FSDP2's sharding of this parameter is not the dim-0
    chunking of its local tensor that TIDE serves ('' when it is)."""
    if not getattr(fp, "is_dtensor", False) and not getattr(fp, "is_spmd_types", False):
        return ""
    size = getattr(fp, "_orig_size", None)
    if size is None or len(size) == 0:
        return f"{name}: FSDP2 keeps no local size for this DTensor parameter (_orig_size)"
    padded = fp.padded_sharded_param_size
    if tuple(padded[1:]) != tuple(size[1:]):
        return (f"{name}: FSDP2's shard {tuple(padded)} is not a dim-0 chunk of the local "
                f"tensor {tuple(size)}")
    return ""


def custom_collective(fsdp_group) -> str:
    """Why the group's collectives are the user's own (set_custom_all_gather,
    set_custom_reduce_scatter, ...), checked at enable() and at every call: '' when stock's."""
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as collectives  # noqa: PLC0415

    if type(getattr(fsdp_group, "_all_gather_comm", None)) not in (None, collectives.DefaultAllGather):
        return "a custom all-gather is set (set_custom_all_gather)"
    if type(getattr(fsdp_group, "_reduce_scatter_comm", None)) not in (None, collectives.DefaultReduceScatter):
        return "a custom reduce-scatter is set (set_custom_reduce_scatter)"
    if getattr(fsdp_group, "_all_gather_output_fn", None) not in (
        None,
        getattr(collectives, "_default_all_gather_output_fn", None),
    ):
        return "a custom all-gather output function is set"
    return ""


class TideGroup:
    """One FSDP parameter group and what TIDE keeps for it."""

    def __init__(self, fsdp_group, name: str) -> None:
        self.fsdp_group = fsdp_group
        self.name = name
        self.reason = ""
        self.comm = None
        self.gid = -1
        self.pg = None
        self.info: dict = {}
        self.index: dict = {}
        self.cast = False
        self.ag_dtype = torch.float32
        self.grad_dtype = torch.float32
        self.world = 1
        self.stock_calls = 0
        self.views_installed = False
        self.slot = -1  # NOTE [landing slots]: the slot id (-1: its own)
        self.slot_reason = ""
        self.zero_fill_bytes = 0  # reduce-scatter inputs TIDE made (parameters without a gradient)
        self.upcast_bytes = 0  # gradients upcast to fp32 beside accumulated ones (NOTE [no-sync accumulation])
        self.stats_when_stock = None  # the TIDE calls' stats when it fell back
        self.registered_id = -1  # its id in the communicator (kept after a fall-back)
        self.peers: list = []  # every TideGroup of the same enable()
        self.mode = "in-place"
        self.own_unshard = False  # inside the group's own pre_forward / pre_backward
        self.tracer = None  # NOTE [landing slots from the first iteration]
        self.active = False  # its arena exists: TIDE serves its calls
        self.deferred_prefetches = 0
        self.wrapped: dict = {}  # FSDP group methods bind() replaced, by name
        self.stock_reasons: dict[str, int] = {}  # NOTE [stock calls are counted by reason]
        # NOTE [reversible fallbacks]: why the group's all-gathers run stock FSDP2 until the
        # next iteration boundary ('' when they do not), and whether that boundary passed.
        self.suspended = ""
        self.boundary_passed = False
        self.pinned = False  # autograd may hold its unsharded parameters (NOTE [landing slots])
        self.evictions = 0  # idle holders resharded so that this group could take its slot
        self.twin = None  # the registration for fp32 accumulated gradients (NOTE [no-sync accumulation])
        self.twin_refusal = ""  # why the runtime refused that registration
        self.resumes = 0
        self.carried_grads: dict = {}  # FSDPParam -> a no-sync gradient its dropped unsharded parameter held
        # NOTE [extension all-gathers]: the all-gather outputs per parameter (recorded by the
        # traced iteration; None where no call was traced or the group has no extension),
        # why they cannot be landed, and their registration (the group's all-gathers then).
        self.items: list | None = None
        self.items_reason = ""
        self.ag = None

    @classmethod
    def at_rest(cls, fsdp_group, name: str, reason: str) -> "TideGroup":
        """A group TIDE does not hold (enable() never saw it, or close() returned it), for its
        report() row: nothing registered, nothing counted."""
        group = cls(fsdp_group, name)
        group.reason = reason
        return group

    @property
    def on_tide(self) -> bool:
        return self.gid >= 0

    @property
    def landing_gid(self) -> int:
        """The registration whose all-gathers fill the group's landing slot: its own, or its
        extension outputs' (NOTE [extension all-gathers])."""
        return self.ag.gid if self.ag is not None else self.gid

    def param_names(self) -> list[str]:
        return [param_name(fp) for fp in self.fsdp_group.fsdp_params]

    def record_items(self, items: list) -> None:
        """NOTE [extension all-gathers] 1: the outputs of an all-gather of the traced iteration;
        every traced call must show the same."""
        if self.items_reason:
            return
        if self.items is None:
            self.items = items
            return
        why = _fsdp_extensions.mismatch(items, self.items, self.param_names())
        if why:
            self.items_reason = f"its all-gather outputs changed between calls of the first iteration: {why}"

    def count_stock(self, reason: str) -> None:
        """NOTE [stock calls are counted by reason]."""
        self.stock_calls += 1
        first = reason not in self.stock_reasons
        self.stock_reasons[reason] = self.stock_reasons.get(reason, 0) + 1
        if first:
            level = logging.INFO if reason == TRACED else logging.WARNING
            _log.log(level, "tide.fsdp: group '%s' runs a call on stock FSDP2: %s", self.name, reason)

    def shapes(self) -> list[tuple[int, int]]:
        shapes = []
        for fp in self.fsdp_group.fsdp_params:
            size = local_shape(fp)  # NOTE [DTensor parameters]
            shapes.append((int(size[0]), int(size[1:].numel())))
        return shapes

    def plan_dtypes(self) -> None:
        fp = self.fsdp_group.fsdp_params[0]
        _, param, _ = _dtypes(self.fsdp_group, fp)
        self.cast = param == torch.bfloat16
        self.ag_dtype = torch.bfloat16 if self.cast else torch.float32
        # The dtype autograd leaves the unsharded gradients in (the parameters'): TIDE-RS reads
        # them there and reduces in fp32 whatever the reduce dtype (no upcast copy).
        self.grad_dtype = self.ag_dtype

    def register(self, comm, pg, mode: str, grad_dtype=None, items=None,
                 all_gathered: bool = True) -> str:
        """Registers the group with the communicator; returns the runtime's refusal or ''.
        ``grad_dtype``: the gradients' dtype where not the parameters' (NOTE [no-sync
        accumulation]). ``items``: register the all-gather outputs of an extension group
        instead of its parameters (NOTE [extension all-gathers] 2; never reduce-scattered).
        ``all_gathered=False``: a registration whose all-gather never runs (a twin; an extension
        group's own, whose outputs' registration fills the slot): its landing is laid out in
        1-byte items (the runtime's "u8") and without resident shards, so that it never sizes
        the shared landing slot beyond what the all-gathers that do run need.

        Collective over ``pg``; every group of a communicator registers before any
        ``describe()``, since the runtime places its arena at the first use of a group."""
        self.plan_dtypes()
        if grad_dtype is not None:
            self.grad_dtype = grad_dtype
        shapes, cast = self.shapes(), self.cast
        ag_name = _memory.dtype_name(self.ag_dtype)
        if items is not None:  # never reduce-scattered: the gradient dtype is a placeholder
            self.ag_dtype = _fsdp_extensions.carrier(items, pg.size())
            self.grad_dtype = torch.bfloat16
            shapes = _fsdp_extensions.carrier_shapes(items, pg.size(), self.ag_dtype)
            ag_name = _memory.dtype_name(self.ag_dtype)
            cast = self.cast = False
        elif not all_gathered:
            ag_name, cast = _memory.LANDING_ONLY, False
        self.mode = mode
        gid, reason = comm.register_group(
            self.name,
            shapes,
            ag_name,
            _memory.dtype_name(self.grad_dtype),
            mode,
            cast,
            staged_shards=not cast,  # FSDP2 keeps the shards: no resident copy in TIDE
            landing_slot=self.slot,
        )
        if gid < 0:
            return reason or "refused by the TIDE runtime"
        self.comm, self.gid, self.pg, self.world = comm, gid, pg, pg.size()
        self.registered_id = gid
        return ""

    def describe(self) -> str:
        """Reads the group's layout from the runtime; '' when it matches FSDP2's padding."""
        self.info = self.comm.group_info(self.gid, create_arena=False)
        for fp, rows in zip(self.fsdp_group.fsdp_params, self.info["rows_per_rank"]):
            if int(fp.padded_sharded_param_size[0]) != int(rows):
                return (
                    f"TIDE pads {rows} rows per rank where FSDP2 pads "
                    f"{fp.padded_sharded_param_size[0]}"
                )
        return ""

    def bind(self) -> None:
        """Routes the group's FSDP2 calls to TIDE (views follow at the first all-gather) and
        releases its slot whenever FSDP2 reshards it (NOTE [landing slots])."""
        for p, fp in enumerate(self.fsdp_group.fsdp_params):
            self.index[fp] = p
            GROUP_OF_PARAM[fp] = self
        fsdp_group = self.fsdp_group
        for name in ("_to_sharded", "_to_sharded_post_forward"):
            original = getattr(fsdp_group, name)

            def resharded(_original=original):
                _original()
                self.release()

            self._wrap(name, resharded)
        for name in ("pre_forward", "pre_backward"):
            original = getattr(fsdp_group, name)

            def own(*args, _original=original, _forward=name == "pre_forward", **kwargs):
                if _forward and torch.is_grad_enabled():
                    self.pinned = True  # autograd may save its unsharded parameters
                self.own_unshard = True
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.own_unshard = False
                    self._restore_carried_grads()

            self._wrap(name, own)
        post_backward = fsdp_group.post_backward

        def backward_done(*args, **kwargs):
            try:
                return post_backward(*args, **kwargs)
            finally:
                self.pinned = False  # its backward ran: autograd is done with its parameters

        self._wrap("post_backward", backward_done)
        unshard = fsdp_group.unshard

        def checked_unshard(*args, **kwargs):
            holder = self.slot_holder() if self.on_tide and self.active else None
            if holder is not None and not self.own_unshard:
                if holder.evictable():
                    self.evict(holder)
                elif self._explicit():  # the user asked for it: unsharded it is, on stock FSDP2
                    self.suspend(
                        f"an explicit unshard() found its landing slot {self.slot} held by group "
                        f"'{holder.name}', whose parameters autograd may still read"
                    )
                else:  # FSDP2's prefetch: at the group's own unshard instead
                    self.deferred_prefetches += 1
                    return None
            return unshard(*args, **kwargs)

        self._wrap("unshard", checked_unshard)

    def _explicit(self) -> bool:
        """An unshard() the user called (FSDP2's prefetches run in FORWARD or PRE_BACKWARD)."""
        from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState  # noqa: PLC0415

        return self.fsdp_group._training_state == TrainingState.IDLE

    def evictable(self) -> bool:
        """NOTE [reversible fallbacks]: the group is unsharded in a slot, nothing of FSDP2 or
        autograd reads its parameters (no grad-enabled forward since its backward; not inside
        a forward or backward of its own; no all-gather pending), so resharding it is safe:
        FSDP2 all-gathers it again when it next needs it."""
        from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState  # noqa: PLC0415

        group = self.fsdp_group
        return (
            not self.pinned
            and group.is_unsharded
            and getattr(group, "_all_gather_result", None) is None
            and group._training_state in (TrainingState.IDLE, TrainingState.POST_BACKWARD)
        )

    def evict(self, holder) -> None:
        """Reshards the idle ``holder`` (FSDP2's own reshard) so that this group takes the slot."""
        holder.fsdp_group._to_sharded()
        self.evictions += 1

    def suspend(self, reason: str) -> None:
        """NOTE [reversible fallbacks]: the group's all-gathers run stock FSDP2 (its own
        all-gather outputs come back) until an iteration boundary passed; its reduce-scatters
        stay on TIDE (they read autograd's gradients, wherever the parameters were)."""
        self._drop_views()
        self.suspended = reason
        self.boundary_passed = False

    def resume_if_possible(self) -> bool:
        """At an all-gather before the group's forward (its own, a prefetch, or an explicit
        unshard(), as pipeline schedules make): back on TIDE once an iteration boundary passed
        since it was suspended (autograd holds none of its stock parameters then: FSDP2 ended
        the backward iteration, every micro-batch's included)."""
        from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState  # noqa: PLC0415

        if not self.suspended:
            return True
        if not (self.boundary_passed
                and self.fsdp_group._training_state in (TrainingState.FORWARD, TrainingState.IDLE)):
            return False
        self.suspended = ""
        self.resumes += 1
        return True

    def _wrap(self, name: str, wrapper) -> None:
        """Sets ``wrapper`` as the FSDP group's method ``name`` (_fsdp_patches.py, patches
        4-7; removed again by unbind)."""
        _fsdp_patches.wrap_group_method(self.fsdp_group, name, wrapper, self.wrapped)

    def unbind(self, reason: str) -> None:
        """Returns the group to stock FSDP2 for good (tide.fsdp.close): its calls, its
        parameters' all-gather outputs and its FSDP2 methods are stock again."""
        if self.on_tide:
            self.fall_back(reason)
        _fsdp_patches.unwrap_group_methods(self.fsdp_group, self.wrapped)
        self.index.clear()
        self.comm = self.tracer = None
        self.active = False

    def release(self) -> None:
        """FSDP2 resharded the group: its slot is free after the current stream's work."""
        if self.on_tide and not self.active and self.tracer is not None:
            self.tracer.resharded(self)
        elif self.on_tide and self.comm.holds_slot(self.landing_gid):
            device = self.fsdp_group.device
            stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
            self.comm.release(self.landing_gid, stream)

    def slot_holder(self):
        """The other group on TIDE whose parameters fill this group's slot now, or None."""
        if self.slot < 0:
            return None
        for other in self.peers:
            if (
                other is not self
                and other.on_tide
                and other.comm is self.comm
                and other.slot == self.slot
                and self.comm.holds_slot(other.landing_gid)
            ):
                return other
        return None

    def fall_back(self, reason: str) -> None:
        """Returns the group to stock FSDP2 for good (NOTE [landing slots]): FSDP2's own
        all-gather outputs and unsharded parameters come back at its next all-gather."""
        if self.gid >= 0:
            self.stats_when_stock = dict(self.comm.stats(self.gid))
        if self.ag is not None and self.ag.gid >= 0:
            self.ag.fall_back(reason)
        self.gid, self.reason = -1, reason
        self._drop_views()
        for fp in self.fsdp_group.fsdp_params:
            GROUP_OF_PARAM.pop(fp, None)

    def _drop_views(self) -> None:
        """FSDP2's own all-gather outputs and unsharded parameters come back at its next
        all-gather (the group is sharded: nothing views the landing)."""
        if self.views_installed:
            for fp in self.fsdp_group.fsdp_params:
                self._forget_unsharded_param(fp)
                _fsdp_patches.drop_landing(fp)
        self.views_installed = False

    def install_views(self, device: torch.device) -> None:
        """Points each parameter's all-gather output at its landing matrix (see NOTE above).

        The runtime places its arena at the first call, so this runs after the group's first
        all-gather; the addresses are stable from then on."""
        self.info = self.comm.group_info(self.gid)
        landing = self.ag.comm.group_info(self.ag.gid) if self.ag is not None else self.info
        base = int(landing["landing_ptr"])
        if base == 0:
            raise RuntimeError(f"tide.fsdp: {self.name}: the runtime reports no landing zone")
        offsets = iter(int(o) for o in landing["landing_offsets"])
        for p, fp in enumerate(self.fsdp_group.fsdp_params):
            if self.ag is not None:  # NOTE [extension all-gathers] 3: a view per output
                views = [_memory.tensor_at(base + next(offsets), self.world * item.numel, item.dtype, device)
                         for item in self.items[p]]
            else:
                numel = self.world * int(fp.padded_sharded_param_size.numel())
                views = [_memory.tensor_at(base + next(offsets), numel, self.ag_dtype, device)]
            self._forget_unsharded_param(fp)  # rebuilt over the landing by FSDP2's copy-out step
            _fsdp_patches.install_landing(fp, views)  # _fsdp_patches.py, patches 8-10
        self.views_installed = True

    def _forget_unsharded_param(self, fp) -> None:
        """Drops FSDP2's unsharded parameter so that its next unshard rebuilds it over the
        current all-gather output. A gradient it accumulated without sync (no-sync
        accumulation begun before the views changed) is carried over to the rebuilt one."""
        param = _fsdp_patches.drop_unsharded_param(fp)
        if param is not None and param.grad is not None:
            self.carried_grads[fp] = param.grad

    def _restore_carried_grads(self) -> None:
        """After the group's own unshard: the rebuilt parameters take the carried gradients."""
        while self.carried_grads:
            fp, grad = self.carried_grads.popitem()
            param = getattr(fp, "_unsharded_param", None)
            if param is None:  # not rebuilt yet: at the next own unshard
                self.carried_grads[fp] = grad
                return
            param.grad = grad

    def landing_view(self, p: int) -> torch.Tensor:
        return self.fsdp_group.fsdp_params[p].all_gather_outputs[0]

    def stats(self) -> dict:
        if self.comm is None or self.gid < 0 and self.stats_when_stock is None:
            return {"all_gathers": 0, "reduce_scatters": 0, "copy_bytes_avoided": 0, "copy_bytes_made": 0}
        stats = dict(self.comm.stats(self.gid)) if self.gid >= 0 else dict(self.stats_when_stock)
        if self.ag is not None:  # its all-gathers ran on its extension outputs' registration
            ag = self.ag.stats()
            for key in ("all_gathers", "copy_bytes_avoided", "copy_bytes_made"):
                stats[key] = int(stats.get(key, 0)) + int(ag.get(key, 0))
        return stats


def group_of(fsdp_params) -> TideGroup | None:
    """The group TIDE serves these parameters' calls for (its arena exists), or None."""
    group = traced_group(fsdp_params)
    return group if group is not None and group.active else None


def traced_group(fsdp_params) -> TideGroup | None:
    """The group on TIDE these parameters belong to, active or still being traced."""
    if not fsdp_params:
        return None
    group = GROUP_OF_PARAM.get(fsdp_params[0])
    return group if group is not None and group.on_tide else None
