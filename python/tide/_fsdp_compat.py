"""Version checks for the FSDP2 internals that the adapter replaces.

The adapter replaces three functions of ``torch.distributed.fsdp._fully_shard``:
``foreach_all_gather``, ``foreach_all_gather_copy_out`` and ``foreach_reduce``, as imported
by ``_fsdp_param_group``, and relies on a few attributes of ``FSDPParam``. These are private:
their signatures are checked here against the layouts the adapter knows (torch 2.11 and the
torch 2.12+ layout, last checked on 2.15), and ``enable()`` refuses with a clear message on
anything else.
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass

import torch

ALL_GATHER_PARAMS = (
    "fsdp_params",
    "group",
    "async_op",
    "all_gather_copy_in_stream",
    "all_gather_stream",
    "device",
    "all_gather_comm",
)
COPY_OUT_PARAMS = ("all_gather_result", "fsdp_params", "group")
ALL_GATHER_RESULT_FIELDS = (
    "all_gather_output",
    "all_gather_event",
    "all_gather_work",
    "param_all_gather_input_dtypes",
    "param_all_gather_input_numels",
    "all_gather_input_split_sizes",
)
DIVIDE_FACTOR_PARAMS = (
    "reduce_scatter_group",
    "all_reduce_group",
    "reduce_dtype",
    "device_type",
    "factor",
    "force_sum_reduction_for_comms",
)
_REDUCE_COMMON_HEAD = (
    "fsdp_params",
    "unsharded_grads",
    "reduce_scatter_group",
    "reduce_scatter_stream",
    "reduce_scatter_comm",
)
_REDUCE_COMMON_TAIL = (
    "reduce_dtype",
    "device",
    "gradient_divide_factor",
    "all_reduce_group",
    "all_reduce_stream",
    "all_reduce_grads",
    "partial_reduce_output",
    "all_reduce_hook",
    "force_sum_reduction_for_comms",
)
FSDP_PARAM_METHODS = (
    "alloc_all_gather_outputs",
    "init_all_gather_outputs",
    "init_unsharded_param",
    "free_unsharded_param",
    "to_sharded_dtensor",
)
# torch 2.12+ frees the all-gather outputs in free_all_gather_outputs (called by
# free_unsharded_param); torch 2.11 frees them inside free_unsharded_param itself
# (_fsdp_group.py keeps TIDE's landing alive in both).
FSDP_PARAM_ATTRIBUTES = (
    "_sharded_param_data",
    "all_gather_outputs",
    "padded_sharded_param_size",
    "sharded_size",
    "contiguous_sharded_stride",
    "sharded_param",
    "fsdp_placement",
    "offload_to_cpu",
    "_orig_size",  # the local unsharded size (NOTE [DTensor parameters] in _fsdp_group.py)
)


@dataclass(frozen=True)
class Layout:
    """What differs between the torch versions the adapter knows."""

    name: str
    reduce_params: tuple[str, ...]
    reduce_has_orig_dtype: bool
    reduce_returns_post_stream: bool


LAYOUTS = (
    Layout(
        "torch 2.11",
        _REDUCE_COMMON_HEAD + ("orig_dtype",) + _REDUCE_COMMON_TAIL,
        reduce_has_orig_dtype=True,
        reduce_returns_post_stream=False,
    ),
    Layout(
        "torch 2.12+",
        _REDUCE_COMMON_HEAD + _REDUCE_COMMON_TAIL + ("prepare_reduce_scatter_inputs",),
        reduce_has_orig_dtype=False,
        reduce_returns_post_stream=True,
    ),
)


class UnsupportedTorch(RuntimeError):
    """FSDP2's internals in this torch differ from every layout the adapter knows."""


def _names(fn) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


def _return_arity(fn) -> int | None:
    annotation = inspect.signature(fn).return_annotation
    if isinstance(annotation, str) or annotation is inspect.Signature.empty:
        return None
    args = typing.get_args(annotation)
    return len(args) or None


def _refuse(what: str, found, expected) -> typing.NoReturn:
    raise UnsupportedTorch(
        f"tide.fsdp: torch {torch.__version__} has an FSDP2 {what} that TIDE does not know "
        f"(found {found}, expected {expected}); TIDE supports torch 2.11 and 2.12-2.15. "
        "Keep stock FSDP2 (do not call tide.fsdp.enable) or use a supported torch."
    )


def check(replaced: dict | None = None) -> Layout:
    """Checks torch's FSDP2 internals; returns the layout or raises UnsupportedTorch.

    ``replaced``: the stock functions already replaced in this process, by name (they are
    checked in place of the replacements)."""
    try:
        from torch.distributed.fsdp._fully_shard import (  # noqa: PLC0415
            _fsdp_collectives as collectives,
            _fsdp_param as fsdp_param,
            _fsdp_param_group as param_group,
        )
    except ImportError as error:  # pragma: no cover - depends on torch
        _refuse("module layout", error, "torch.distributed.fsdp._fully_shard")
    stock = {}
    for name in ("foreach_all_gather", "foreach_all_gather_copy_out", "foreach_reduce"):
        stock[name] = (replaced or {}).get(name) or getattr(param_group, name, None)
        if stock[name] is None:
            _refuse("parameter-group module", f"no {name} in _fsdp_param_group", name)
    if _names(stock["foreach_all_gather"]) != ALL_GATHER_PARAMS:
        _refuse("foreach_all_gather", _names(stock["foreach_all_gather"]), ALL_GATHER_PARAMS)
    copy_out = inspect.signature(stock["foreach_all_gather_copy_out"]).parameters
    head = tuple(copy_out)[: len(COPY_OUT_PARAMS)]
    extra = list(copy_out.values())[len(COPY_OUT_PARAMS) :]
    if head != COPY_OUT_PARAMS or any(p.default is inspect.Parameter.empty for p in extra):
        _refuse("foreach_all_gather_copy_out", tuple(copy_out), COPY_OUT_PARAMS)
    fields = getattr(collectives.AllGatherResult, "_fields", None)
    if tuple(fields or ()) != ALL_GATHER_RESULT_FIELDS:
        _refuse("AllGatherResult", fields, ALL_GATHER_RESULT_FIELDS)
    factors = getattr(collectives, "_get_gradient_divide_factors", None)
    if factors is None or _names(factors) != DIVIDE_FACTOR_PARAMS:
        _refuse("_get_gradient_divide_factors", factors and _names(factors), DIVIDE_FACTOR_PARAMS)
    for method in FSDP_PARAM_METHODS:
        if not callable(getattr(fsdp_param.FSDPParam, method, None)):
            _refuse("FSDPParam", f"no method {method}", FSDP_PARAM_METHODS)
    reduce_names = _names(stock["foreach_reduce"])
    for layout in LAYOUTS:
        if reduce_names == layout.reduce_params:
            arity = _return_arity(stock["foreach_reduce"])
            expected = 7 if layout.reduce_returns_post_stream else 6
            if arity not in (None, expected):
                _refuse("foreach_reduce return", f"{arity} values", f"{expected} values")
            return layout
    _refuse("foreach_reduce", reduce_names, [layout.reduce_params for layout in LAYOUTS])


def check_fsdp_param(param) -> str:
    """Empty when an FSDPParam instance has what the adapter uses, else what it lacks."""
    missing = [a for a in FSDP_PARAM_ATTRIBUTES if not hasattr(param, a)]
    return f"FSDPParam lacks {', '.join(missing)}" if missing else ""
