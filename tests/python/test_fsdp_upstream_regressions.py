"""Defects found by running PyTorch's own FSDP2 tests with TIDE injected
(bench/fsdp2_upstream/, bench/results/fsdp2/upstream-tests.md), each as a test of its own."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.debug import CommDebugMode

import tide.fsdp

pytestmark = pytest.mark.usefixtures("world_of_one")


def test_world_of_one_shows_no_collective_in_comm_debug_mode():
    """PyTorch's TestFullyShardWorldSize1.test_train_parity_single_worldsize1: at world size 1
    FSDP2 issues no collective, and CommDebugMode counts none. TIDE serves the group (its
    reduce-scatter runs), and must not count it as a collective either."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 15), nn.ReLU(), nn.Linear(15, 8))
    fully_shard(model)
    tide.fsdp.enable(model)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    inp = torch.randn(4, 16)
    counts = []
    for _ in range(4):
        optim.zero_grad()
        with CommDebugMode() as mode:
            model(inp).sum().backward()
        counts.append(mode.get_total_counts())
        optim.step()
    rows = tide.fsdp.report(model)
    assert rows[0]["backend"] == "tide", rows[0]["reason"]
    assert rows[0]["reduce_scatters"] > 0, rows  # TIDE did serve calls: the check is not vacuous
    assert counts == [0, 0, 0, 0]
    tide.fsdp.close(model)
