"""Minimal reproductions of the two defects PyTorch's TestFullyShardGradientAccumulation
.test_gradient_accumulation found with TIDE injected (bench/results/fsdp2/upstream-tests.md).
4 gloo processes on CPU, an nn.Linear root plus 3 MLP blocks, 3 microbatches per iteration:

    python3 repro/grad_acc_activation.py counts stock|tide      # all-gathers CommDebugMode counts
    python3 repro/grad_acc_activation.py root_only stock|tide   # the root's gradient per iteration
    (RING=0: tide.fsdp.enable(model, ring=False))

counts: mode "all" (set_requires_gradient_sync on every module). Stock: 21 all-gathers per
iteration in this model (24 in the upstream test). TIDE: 27 in iteration 1, where _activate's agreement collectives (all_gather_object
over the model's process group, inside the user's forward) land in the test's CommDebugMode.
root_only: set_requires_gradient_sync(last, recurse=False): the blocks reduce every microbatch,
the root accumulates. TIDE's tracer is ready after the blocks' first reduce-scatter
(microbatch 0), so _activate runs at microbatch 1 while the root holds an accumulated
unsharded gradient: the root's reduced gradient loses microbatch 0 (iteration 0 sum 0.004276
against stock's -0.221850). With RING=0 (no activation mid-window) TIDE matches stock.
"""

import collections
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.debug import CommDebugMode

LIN = 32


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj, self.out_proj = nn.Linear(LIN, 4 * LIN), nn.Linear(4 * LIN, LIN)

    def forward(self, x):
        return self.out_proj(torch.relu(self.in_proj(x)))


def worker(rank, world, case, mode, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(LIN, LIN), *[MLP() for _ in range(3)])
    for block in model[1:]:
        fully_shard(block)
    fully_shard(model)
    if mode == "tide":
        import tide.fsdp  # noqa: PLC0415

        tide.fsdp.enable(model, ring=os.environ.get("RING", "1") != "0")
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.manual_seed(43 + rank)
    for it in range(3):
        counts = collections.Counter()
        for mb in range(3):
            model.set_requires_gradient_sync(mb == 2, recurse=case == "counts")
            with CommDebugMode() as comm:
                model(torch.randn(2, LIN)).sum().backward()
            counts.update(comm.get_comm_counts())
        if rank == 0:
            if case == "counts":
                print(mode, "iteration", it, "all-gathers", counts[torch.ops.c10d._allgather_base_])
            else:
                grad = model[0].weight.grad.to_local().double().sum().item()
                print(mode, "iteration", it, f"root gradient sum {grad:.6f}")
        optim.step()
        optim.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    case, mode = sys.argv[1], sys.argv[2]
    mp.spawn(worker, args=(4, case, mode, 29500 + os.getpid() % 400), nprocs=4)
