"""TIDE's calls as torch's tools see them: profiler ranges, CommDebugMode counts, and the
contexts TIDE does not serve (traced FSDP2, compiled autograd).

NOTE [visible in torch's tools]
  1. Profiler: every TIDE call runs inside ``torch.profiler.record_function`` named
     ``tide::<collective> <group> <bytes>B`` on the thread that enqueues it, with the stream
     FSDP2 gave it current, so a trace shows the range beside FSDP2's own
     (``FSDP::all_gather`` ...) and, on GPUs, the work it launches correlated to it. On CUDA
     the same name is an NVTX range for Nsight Systems.
  2. CommDebugMode: stock FSDP2's collectives reach it through the dispatcher
     (``c10d._allgather_base_``, ``c10d._reduce_scatter_base_``). TIDE's do not go through the
     dispatcher, so each call adds itself, under those same keys, to every CommDebugMode on
     the dispatch-mode stack: the counts a test expects from stock FSDP2 hold with TIDE, per
     module and pass as well. This reaches into CommDebugMode's counters (``comm_counts``,
     ``comm_module_counts``); a torch whose CommDebugMode lacks them is left uncounted. A
     group of one rank counts nothing: FSDP2 issues no collective at world size 1 (its
     all-gather and reduce-scatter become local copies), so CommDebugMode sees none on stock
     either (PyTorch's TestFullyShardWorldSize1 asserts 0).
  3. Traced FSDP2 (``torch._dynamo.config.skip_fsdp_hooks = False`` under ``torch.compile``)
     and compiled autograd trace FSDP2's collectives into a graph, where TIDE's calls cannot
     go: such calls run stock FSDP2, counted with the reason (NOTE [stock calls are counted by
     reason] in _fsdp_group.py).
  4. TIDE's own agreement collectives (``enable()``'s, and the arena's creation at the first
     served forward, inside the user's step) are not FSDP2's: they run with the dispatch modes
     set aside (``gather_objects``), so a CommDebugMode around the step counts what stock
     FSDP2 would issue, and nothing else.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"


@contextlib.contextmanager
def call(collective: str, group, nbytes: int):
    """NOTE [visible in torch's tools] 1 and 2 around one TIDE call."""
    name = f"tide::{collective} {group.name} {int(nbytes)}B"
    if group.world > 1:  # NOTE [visible in torch's tools] 2: none at world size 1
        _count_in_debug_modes(collective)
    nvtx = torch.cuda.is_available() and group.fsdp_group.device.type == "cuda"
    with torch.profiler.record_function(name):
        if nvtx:
            torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            if nvtx:
                torch.cuda.nvtx.range_pop()


def _debug_modes() -> list:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack  # noqa: PLC0415

    try:
        from torch.distributed.tensor.debug import CommDebugMode  # noqa: PLC0415
    except ImportError:  # pragma: no cover - depends on torch
        return []
    return [m for m in _get_current_dispatch_mode_stack() if isinstance(m, CommDebugMode)]


def _count_in_debug_modes(collective: str) -> None:
    modes = _debug_modes()
    if not modes:
        return
    c10d = torch.ops.c10d
    op = c10d._allgather_base_ if collective == ALL_GATHER else c10d._reduce_scatter_base_
    for mode in modes:
        counts = getattr(mode, "comm_counts", None)
        if counts is None:
            continue
        counts[op] += 1
        tracker = getattr(mode, "advanced_module_tracker", None)
        module_counts = getattr(mode, "comm_module_counts", None)
        if tracker is None or module_counts is None:
            continue
        key = "backward" if getattr(tracker, "is_bw", False) else "forward"
        names = [tracker.name] + [
            p for p in tracker.module_parents_dict.get(tracker.name, ()) if p != tracker.name
        ]
        for name in names:
            entry = module_counts.setdefault(name, {})
            for k in ("forward", "backward"):
                entry.setdefault(k, _defaultdict())
            entry[key][op] += 1


def _defaultdict():
    from collections import defaultdict  # noqa: PLC0415

    return defaultdict(int)


def unservable_context() -> str:
    """NOTE [visible in torch's tools] 3: why a call in this context cannot run on TIDE."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and compiler.is_compiling():
        return ("FSDP2's collectives are traced by torch.compile (torch._dynamo.config."
                "skip_fsdp_hooks=False): TIDE's calls cannot be part of a traced graph")
    try:
        from torch._dynamo import compiled_autograd  # noqa: PLC0415
    except ImportError:  # pragma: no cover - depends on torch
        return ""
    if getattr(compiled_autograd, "in_compiled_autograd_region", False) or getattr(
        compiled_autograd, "compiled_autograd_enabled", False
    ):
        return "compiled autograd traces the backward, FSDP2's reduce-scatters with it"
    return ""


def gather_objects(obj, pg) -> list:
    """Every rank's ``obj`` over ``pg`` (``dist.all_gather_object``), outside the dispatch
    modes on the stack (NOTE [visible in torch's tools] 4)."""
    from torch.utils._python_dispatch import _disable_current_modes  # noqa: PLC0415

    everyone: list = [None] * pg.size()
    with _disable_current_modes():
        dist.all_gather_object(everyone, obj, group=pg)
    return everyone
