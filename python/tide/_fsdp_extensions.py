"""FSDP2's all-gather extensions on TIDE: what ``fsdp_pre_all_gather`` returns, landed
parameter-major.

NOTE [extension all-gathers]
A parameter whose local tensor implements ``fsdp_pre_all_gather`` / ``fsdp_post_all_gather``
(torchao's float8 weights, NF4, any tensor subclass) chooses what FSDP2 all-gathers: a tuple
of tensors per parameter, any dtype, each all-gathered by dim-0 concatenation over the shard
ranks. FSDP2 packs them into one flat buffer, all-gathers it rank-major, and copies every
output out into ``fsdp_param.all_gather_outputs`` (each of ``world * numel`` elements, rank r's
input at ``[r * numel, (r + 1) * numel)``), which ``fsdp_post_all_gather`` then reads (as
``view(-1, *size[1:])``), once to build the unsharded parameter and, at later unshards, with
``out=`` that parameter.

TIDE lands those outputs where FSDP2's copy-out would have put them, with no flat buffer and
no copy-out:
  1. The traced first iteration (stock FSDP2) records, for every parameter of the group, the
     outputs' dtypes and per-rank sizes (``Item``): FSDP2's own ``AllGatherResult`` and its
     ``_extensions_data.all_gather_input_sizes``. Every parameter of such a group is an item
     list, the plain ones included (one output: the shard in ``param_dtype``, which FSDP2's
     ``all_gather_inputs`` casts, as stock does).
  2. At activation each such group gets a second registration with the communicator: the
     items as its "parameters", in a carrier type (``carrier``): bf16 where every item's
     per-rank bytes are even, else single bytes (the runtime's 1-byte "u8"). An all-gather is
     a copy, so any dtype's bytes move exactly as carrier items; the carrier matrix of an item
     is (world x rows, row bytes / carrier bytes), or (world, per-rank bytes / carrier bytes)
     where a row's bytes do not divide. The landing is parameter-major: item k of the group
     starts at world x (the per-rank bytes of the items before it), which must be a multiple
     of its element size for its view in its own dtype. Its landing shares the group's landing slot; the group's own registration
     (the parameters with their gradients) keeps serving its reduce-scatters. That one is
     never all-gathered, so it is registered at enable() with a landing of 1-byte items and
     no resident shards (``register(all_gathered=False)``): the slot is sized by the outputs,
     and a float8 group's slot is about half a bf16 one's.
  3. Each all-gather calls FSDP2's ``all_gather_inputs`` (which calls ``fsdp_pre_all_gather``
     and keeps its metadata, such as float8 scales, for the post-all-gather, as FSDP2 does)
     on its copy-in stream, checks every output against the recorded items, and runs one
     TIDE-AG call over them. Each parameter's ``all_gather_outputs`` are views of its items'
     landing matrices in their own dtypes, persistent as for plain parameters (NOTE
     [zero-offset landing views] in _fsdp_group.py), so ``fsdp_post_all_gather(out=...)``
     finds the same storage at every unshard.
What stays stock, with the reason: an output that is not a dense contiguous tensor, whose
landing would not start at a multiple of its element size (an odd byte count before an fp32
output at an odd world size, say), whose dtype or size differs between calls or between the
first iteration's calls, or which is not the same on every rank (the group's reason names the
parameter). A group whose outputs change after TIDE laid them out
returns to stock FSDP2 for good at that all-gather: the ranks see the same sizes (FSDP2 pads
every shard alike), so they fall back together.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_CARRIERS = (torch.bfloat16, torch.uint8)  # the runtime's item types for the outputs, widest first


@dataclass(frozen=True)
class Item:
    """One all-gather output of one parameter, per rank."""

    dtype: torch.dtype
    size: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.size:
            n *= int(d)
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def carrier_shape(self, world: int, carrier: torch.dtype) -> tuple[int, int] | None:
        """(rows over all ranks, carrier columns) of its landing matrix, or None where the
        carrier's items do not hold its bytes."""
        size = carrier.itemsize
        rows = int(self.size[0]) if self.size else 1
        if rows > 0 and (self.nbytes // rows) % size == 0:
            return world * rows, self.nbytes // rows // size
        if self.nbytes % size == 0:
            return world, self.nbytes // size
        return None

    def describe(self) -> str:
        return f"{str(self.dtype).removeprefix('torch.')}{list(self.size)}"


def has_extension(fsdp_params) -> bool:
    """Whether any parameter's local tensor chooses what FSDP2 all-gathers."""
    return any(hasattr(fp._sharded_local_tensor, "fsdp_pre_all_gather") for fp in fsdp_params)


def _sizes(fp, numels: list[int]) -> list[tuple[int, ...]]:
    """The per-rank sizes of a parameter's all-gather inputs at the all-gather just made."""
    data = getattr(fp, "_extensions_data", None)
    sizes = getattr(data, "all_gather_input_sizes", None) if data is not None else None
    if sizes and len(sizes) == len(numels):
        return [tuple(int(d) for d in s) for s in sizes]
    return [tuple(int(d) for d in fp.padded_sharded_param_size)] if len(numels) == 1 else []


def recorded(fsdp_params, result) -> list[list[Item]]:
    """The items of an all-gather stock FSDP2 just made (step 1), from its AllGatherResult."""
    items = []
    for fp, dtypes, numels in zip(fsdp_params, result.param_all_gather_input_dtypes,
                                  result.param_all_gather_input_numels):
        sizes = _sizes(fp, list(numels))
        items.append([Item(d, s) for d, s in zip(dtypes, sizes)] if len(sizes) == len(dtypes) else [])
    return items


def current(inputs: list[list[torch.Tensor]], fsdp_params) -> list[list[Item]]:
    """The items of the inputs FSDP2's ``all_gather_inputs`` returned for this call."""
    items = []
    for fp, tensors in zip(fsdp_params, inputs):
        sizes = _sizes(fp, [t.numel() for t in tensors])
        items.append([Item(t.dtype, s) for t, s in zip(tensors, sizes)])
    return items


def as_laid_out(inputs: list[list[torch.Tensor]], fsdp_params, items: list[list[Item]]) -> bool:
    """Whether this call's inputs are dense, contiguous and the laid-out items (the per-call
    check of step 3; ``check_inputs`` and ``mismatch`` say why not)."""
    return (all(type(t) is torch.Tensor and t.is_contiguous() for tensors in inputs for t in tensors)
            and current(inputs, fsdp_params) == items)


def carrier(items: list[list[Item]], world: int) -> torch.dtype:
    """The item type of the outputs' registration (step 2): the widest that holds every item."""
    return next((c for c in _CARRIERS
                 if all(i.carrier_shape(world, c) is not None for p in items for i in p)), _CARRIERS[-1])


def layout_reason(items: list[list[Item]], names: list[str], world: int) -> str:
    """Why these items cannot be landed by TIDE-AG ('' when they can), naming the parameter."""
    at = 0  # the landing's byte offset of the next item (parameter-major: world x per-rank bytes)
    for name, param_items in zip(names, items):
        if not param_items:
            return f"{name}: its all-gather outputs could not be read from FSDP2"
        for k, item in enumerate(param_items):
            if item.nbytes == 0:
                return f"{name}: all-gather output {k} ({item.describe()}) is empty"
            if at % item.itemsize:
                return (f"{name}: all-gather output {k} ({item.describe()}) would land at byte "
                        f"{at} of the group's landing, not a multiple of its {item.itemsize}-byte "
                        "elements (the outputs before it have an odd byte count per rank)")
            at += world * item.nbytes
    return ""


def mismatch(items: list[list[Item]], want: list[list[Item]], names: list[str]) -> str:
    """Why this call's items differ from the laid-out ones ('' when they do not)."""
    for name, got, expected in zip(names, items, want):
        if got != expected:
            return (f"{name}: fsdp_pre_all_gather returned {[i.describe() for i in got]}, where TIDE "
                    f"laid out {[i.describe() for i in expected]}")
    return ""


def check_inputs(inputs: list[list[torch.Tensor]], names: list[str]) -> str:
    """Why an all-gather input cannot be read in place by TIDE-AG ('' when all can)."""
    for name, tensors in zip(names, inputs):
        for k, t in enumerate(tensors):
            if type(t) is not torch.Tensor:
                return f"{name}: all-gather output {k} is a {type(t).__name__}, not a dense tensor"
            if not t.is_contiguous():
                return f"{name}: all-gather output {k} is not contiguous"
    return ""


def carrier_shapes(items: list[list[Item]], world: int, carrier: torch.dtype) -> list[tuple[int, int]]:
    """The carrier matrices the items' registration lays out, in item order (step 2)."""
    return [item.carrier_shape(world, carrier) for param_items in items for item in param_items]


def dtype_names(items: list[list[Item]]) -> list[str]:
    """The distinct dtypes the group all-gathers, in order of first appearance."""
    names: list[str] = []
    for param_items in items:
        for item in param_items:
            name = str(item.dtype).removeprefix("torch.")
            if name not in names:
                names.append(name)
    return names


def bytes_per_call(items: list[list[Item]], world: int) -> int:
    """The bytes one all-gather lands on every rank: every item's per-rank bytes x world."""
    return world * sum(item.nbytes for param_items in items for item in param_items)
