"""Records a torchtitan run per rank, for the tests and the result table: with
TIDE_TITAN_RECORD=DIR set, each rank writes DIR/rank<r>.json after Trainer.train() returns:

  losses        {step: global average loss}, as torchtitan logs it (every step: log_freq 1)
  grad_norms    {step: gradient norm}
  step_seconds  {step: wall time of Trainer.train_step}
  report        tide.fsdp.report(part) rows of every model part (stock runs too: rows of a
                module TIDE never enabled say backend "stock")
  dynamo        torch._dynamo's counters (frames, unique graphs, recompiles, graph breaks),
                to tell a compile from a slow step
  world, rank, argv

It wraps Trainer.train_step, MetricsProcessor.log and Trainer.train; nothing else changes.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path

VARIABLE = "TIDE_TITAN_RECORD"


def install() -> None:
    out = os.environ.get(VARIABLE)
    if not out:
        return
    from torchtitan.components.metrics import MetricsProcessor  # noqa: PLC0415
    from torchtitan.trainer import Trainer  # noqa: PLC0415

    record = {"losses": {}, "grad_norms": {}, "step_seconds": {}, "argv": sys.argv[1:]}

    train_step = Trainer.train_step

    @functools.wraps(train_step)
    def timed_train_step(self, *args, **kwargs):
        start = time.perf_counter()
        result = train_step(self, *args, **kwargs)
        record["step_seconds"][str(self.step)] = time.perf_counter() - start
        return result

    log = MetricsProcessor.log

    @functools.wraps(log)
    def recording_log(self, step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs):
        record["losses"][str(step)] = float(global_avg_loss)
        record["grad_norms"][str(step)] = float(grad_norm)
        return log(self, step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs)

    train = Trainer.train

    @functools.wraps(train)
    def recording_train(self, *args, **kwargs):
        result = train(self, *args, **kwargs)
        import torch.distributed as dist  # noqa: PLC0415
        import tide.fsdp  # noqa: PLC0415

        rows = [row for part in self.model_parts for row in tide.fsdp.report(part)]
        rank = dist.get_rank()
        from torch._dynamo.utils import counters  # noqa: PLC0415

        dynamo = {k: dict(v) for k, v in counters.items() if k in ("stats", "recompiles", "graph_break")}
        record.update(rank=rank, world=dist.get_world_size(), dynamo=dynamo,
                      report=json.loads(json.dumps(rows, default=str)))
        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        (path / f"rank{rank}.json").write_text(json.dumps(record, indent=1, sort_keys=True))
        return result

    Trainer.train_step = timed_train_step
    MetricsProcessor.log = recording_log
    Trainer.train = recording_train
