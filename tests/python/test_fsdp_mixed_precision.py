"""bf16 parameters with an fp32 reduce dtype (the paper's target, Sec. 4.3): TIDE-RS reads
the bf16 gradients where autograd left them and sums in fp32, with no upcast copy.

Watched with a TorchDispatchMode during a backward: every copy or cast (``_to_copy``,
``copy_``, ``_chunk_cat``, ``cat``) that writes an fp32 tensor of a gradient's size (one
parameter's, or a group's packed total) is counted. Stock FSDP2 makes one (its ``_chunk_cat``
packs the bf16 gradients into an fp32 buffer): the positive control that shows the watch sees
what it looks for. With TIDE there must be none (its fp32 output shard is written by TIDE-RS,
not copied), and the report must count no cast among its copies. One process (gloo, TIDE's
host backend); seed printed."""

from __future__ import annotations


import pytest
import torch
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils._python_dispatch import TorchDispatchMode

import tide.fsdp
from seed import tide_test_seed

SEED = tide_test_seed()


pytestmark = pytest.mark.usefixtures("world_of_one")


COPIES = {"_to_copy", "copy_", "_chunk_cat", "cat"}


class FloatGradients(TorchDispatchMode):
    """Counts copies and casts whose fp32 outputs have one of `sizes` elements."""

    def __init__(self, sizes: set[int]) -> None:
        super().__init__()
        self.sizes = sizes
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in COPIES:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.numel() in self.sizes:
                    self.seen.append(f"{func} -> fp32 x {t.numel()}")
        return out


def _model() -> nn.Module:
    torch.manual_seed(SEED)
    # Odd sizes that no activation of a 5-row batch shares.
    return nn.Sequential(nn.Linear(13, 37), nn.GELU(), nn.Linear(37, 11), nn.Linear(11, 7))


def _sharded(model: nn.Module) -> nn.Module:
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


def _gradient_sizes(model: nn.Module) -> set[int]:
    sizes = {p.numel() for p in model.parameters()}
    for layer in model:
        params = list(layer.parameters())
        if params:
            sizes.add(sum(p.numel() for p in params))  # a group's packed gradients
    return sizes


def _step(model, x, watch):
    loss = model(x).float().pow(2).mean()
    with watch:
        loss.backward()
    model.zero_grad()


def test_bf16_gradients_are_read_in_place():
    print(f"seed {SEED} (rerun with TIDE_TEST_SEED)")
    gen = torch.Generator().manual_seed(SEED)
    x = torch.randn(5, 13, generator=gen)
    sizes = _gradient_sizes(_model())

    stock = _sharded(_model())
    control = FloatGradients(sizes)
    _step(stock, x, control)
    assert control.seen, "the watch saw no fp32 gradient buffer in stock FSDP2 (the control)"

    model = _sharded(_model())
    rows = tide.fsdp.enable(model)
    assert all(r["backend"] == "tide" for r in rows), rows
    _step(model, x, FloatGradients(sizes))  # the first iteration: stock, traced
    watch = FloatGradients(sizes)
    for _ in range(2):
        _step(model, x, watch)
    rows = tide.fsdp.report(model)
    assert all(r["active"] and r["reduce_scatters"] == 2 for r in rows), rows
    assert not watch.seen, f"fp32 gradient-sized tensors made during TIDE's backward: {watch.seen[:5]}"
    for r in rows:
        assert set(r["copies"]) <= {"all_gather_shards"}, r["copies"]
