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
``arena_bytes`` and not by torch's allocator. A ``copy.deepcopy`` of such a tensor (or of a
state dict) clones the storage into ordinary memory, as for any tensor.
"""

from __future__ import annotations

import weakref

import torch

from . import _memory

MAX_PARAMS = 256

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


def local_reason(fsdp_group, layout_reason: str) -> str:
    """Why this rank cannot run the group on TIDE; empty when it can."""
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as collectives  # noqa: PLC0415
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
    if type(fsdp_group._all_gather_comm) is not collectives.DefaultAllGather:
        return "a custom all-gather is set (set_custom_all_gather)"
    if type(fsdp_group._reduce_scatter_comm) is not collectives.DefaultReduceScatter:
        return "a custom reduce-scatter is set (set_custom_reduce_scatter)"
    if getattr(fsdp_group, "_all_gather_output_fn", None) not in (
        None,
        getattr(collectives, "_default_all_gather_output_fn", None),
    ):
        return "a custom all-gather output function is set"
    if fsdp_group.is_unsharded:
        return "enable() was called while the group is unsharded (call it before forward)"
    reduce_dtypes = set()
    for fp in params:
        name = getattr(fp, "_param_fqn", None) or "a parameter"
        if getattr(fp, "offload_to_cpu", False):
            return "CPU offload"
        if fp.fsdp_placement.dim != 0:
            return f"{name} is sharded as Shard({fp.fsdp_placement.dim}), not Shard(0)"
        if getattr(fp, "is_dtensor", False):
            return f"{name} is a DTensor over another mesh (tensor parallel)"
        if hasattr(fp._sharded_local_tensor, "fsdp_pre_all_gather"):
            return f"{name} has an fsdp_pre_all_gather extension"
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

    @property
    def on_tide(self) -> bool:
        return self.gid >= 0

    def shapes(self) -> list[tuple[int, int]]:
        shapes = []
        for fp in self.fsdp_group.fsdp_params:
            size = fp.sharded_param.shape  # the global (unsharded) shape of the DTensor
            shapes.append((int(size[0]), int(size[1:].numel())))
        return shapes

    def plan_dtypes(self) -> None:
        fp = self.fsdp_group.fsdp_params[0]
        _, param, reduce = _dtypes(self.fsdp_group, fp)
        self.cast = param == torch.bfloat16
        self.ag_dtype = torch.bfloat16 if self.cast else torch.float32
        # The dtype autograd produces the unsharded gradients in, unless FSDP upcasts them.
        self.grad_dtype = torch.float32 if reduce == torch.float32 or not self.cast else torch.bfloat16

    def register(self, comm, pg, mode: str) -> str:
        """Registers the group with the communicator; returns the runtime's refusal or ''.

        Collective over ``pg``; every group of a communicator registers before any
        ``describe()``, since the runtime places its arena at the first use of a group."""
        self.plan_dtypes()
        gid, reason = comm.register_group(
            self.name,
            self.shapes(),
            _memory.dtype_name(self.ag_dtype),
            _memory.dtype_name(self.grad_dtype),
            mode,
            self.cast,
        )
        if gid < 0:
            return reason or "refused by the TIDE runtime"
        self.comm, self.gid, self.pg, self.world = comm, gid, pg, pg.size()
        return ""

    def describe(self) -> str:
        """Reads the group's layout from the runtime; '' when it matches FSDP2's padding."""
        self.info = self.comm.group_info(self.gid)
        for fp, rows in zip(self.fsdp_group.fsdp_params, self.info["rows_per_rank"]):
            if int(fp.padded_sharded_param_size[0]) != int(rows):
                return (
                    f"TIDE pads {rows} rows per rank where FSDP2 pads "
                    f"{fp.padded_sharded_param_size[0]}"
                )
        return ""

    def bind(self) -> None:
        """Routes the group's FSDP2 calls to TIDE (views follow at the first all-gather)."""
        for p, fp in enumerate(self.fsdp_group.fsdp_params):
            self.index[fp] = p
            GROUP_OF_PARAM[fp] = self

    def install_views(self, device: torch.device) -> None:
        """Points each parameter's all-gather output at its landing matrix (see NOTE above).

        The runtime places its arena at the first call, so this runs after the group's first
        all-gather; the addresses are stable from then on."""
        self.info = self.comm.group_info(self.gid)
        base = int(self.info["landing_ptr"])
        if base == 0:
            raise RuntimeError(f"tide.fsdp: {self.name}: the runtime reports no landing zone")
        for p, fp in enumerate(self.fsdp_group.fsdp_params):
            numel = self.world * int(fp.padded_sharded_param_size.numel())
            view = _memory.tensor_at(
                base + int(self.info["landing_offsets"][p]), numel, self.ag_dtype, device
            )
            if hasattr(fp, "_unsharded_param"):
                del fp._unsharded_param  # rebuilt over the landing by FSDP2's copy-out step
            fp.all_gather_outputs = [view]
            fp.alloc_all_gather_outputs = _no_op
            if hasattr(fp, "free_all_gather_outputs"):  # torch 2.12+
                fp.free_all_gather_outputs = _no_op
            else:  # torch 2.11: free_unsharded_param would free the landing view itself
                fp.free_unsharded_param = _free_inner_tensors_of(fp)
        self.views_installed = True

    def landing_view(self, p: int) -> torch.Tensor:
        return self.fsdp_group.fsdp_params[p].all_gather_outputs[0]

    def stats(self) -> dict:
        if not self.on_tide:
            return {"all_gathers": 0, "reduce_scatters": 0, "copy_bytes_avoided": 0}
        return dict(self.comm.stats(self.gid))


def _no_op() -> None:
    return None


def _free_inner_tensors_of(fp):
    """free_unsharded_param for torch 2.11 without freeing the all-gather outputs (TIDE's
    landing): only the tensors a tensor subclass's post-all-gather made are freed."""

    def free_unsharded_param() -> None:
        for tensor in getattr(fp, "_unsharded_inner_tensors", ()):
            if tensor.untyped_storage().size() != 0:
                tensor.untyped_storage().resize_(0)

    return free_unsharded_param


def group_of(fsdp_params) -> TideGroup | None:
    if not fsdp_params:
        return None
    group = GROUP_OF_PARAM.get(fsdp_params[0])
    return group if group is not None and group.on_tide else None
