"""One rank that enables TIDE on a model with one group TIDE refuses (fp16 masters), trains a
step and exits (test_fsdp_training_loop.py): its report's reasons, and what exit prints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard

import tide.fsdp


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 12), nn.Linear(12, 4).half()

    def forward(self, x):
        return self.b(self.a(x).half()).float()


def main() -> int:
    out_dir = Path(sys.argv[2])
    dist.init_process_group("gloo")
    torch.manual_seed(3)
    model = Mixed()
    fully_shard(model.a)
    fully_shard(model.b)
    fully_shard(model)
    tide.fsdp.enable(model)
    for _ in range(2):
        model(torch.randn(3, 8)).sum().backward()
    rows = tide.fsdp.report(model)
    (out_dir / f"rank{dist.get_rank()}.json").write_text(json.dumps({"report": rows}))
    dist.destroy_process_group()
    return 0  # the model and TIDE's communicator are alive until the interpreter exits


if __name__ == "__main__":
    sys.exit(main())
