"""Minimal reproduction of the defect PyTorch's TestFullyShardGradientAccumulation
.test_1f1b_microbatching found with TIDE injected as enable(root, ring=False)
(bench/results/fsdp2/upstream-tests.md, defect 4). 4 gloo processes on CPU, torch's test
Transformer (ModelArgs(dropout_p=0.0)), reshard_after_forward=False, every FSDP module
unsharded explicitly with unshard(async_op=True) BEFORE tide.fsdp.enable(model, ring=False),
then 3 microbatches with set_requires_gradient_sync / set_is_last_backward on the last one:

    python3 repro/enable_after_unshard.py           # prints the mismatched gradients vs a
                                                    # reference model (expected: none)

enable() is documented as "after fully_shard and before the first forward", which this call
is; with ring=True (default) or enable() before the unshard() calls, the gradients match.
"""

import copy
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.testing._internal.distributed._tensor.common_dtensor import (
    ModelArgs,
    Transformer,
    TransformerBlock,
)


def worker(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import tide.fsdp  # noqa: PLC0415

    torch.manual_seed(42)
    args = ModelArgs(dropout_p=0.0)
    model = Transformer(args)
    ref = copy.deepcopy(model)
    for m in model.modules():
        if isinstance(m, TransformerBlock):
            fully_shard(m, reshard_after_forward=False)
    fully_shard(model, reshard_after_forward=False)
    torch.manual_seed(43 + rank)
    inps = [torch.randint(0, args.vocab_size, (2, 16)) for _ in range(3)]
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.unshard(async_op=True)
    tide.fsdp.enable(model, ring=False)  # after the unshards, before the first forward
    for i, inp in enumerate(inps):
        last = i == 2
        model.set_requires_gradient_sync(last)
        model.set_is_last_backward(last)
        model(inp).sum().backward()
        ref(inp).sum().backward()
    for p in ref.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
    bad = [n for (n, p), (_, q) in zip(ref.named_parameters(), model.named_parameters())
           if not torch.allclose(p.grad, q.grad.full_tensor(), atol=1e-4, rtol=1e-4)]
    if rank == 0:
        print(f"mismatched gradients: {len(bad)} {bad[:4]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(4, 29800 + os.getpid() % 150), nprocs=4)
