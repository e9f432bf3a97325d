"""A CUDA graph captured in torch's default (global) capture mode while a TIDE communicator's
watchdog polls a call still in flight (NOTE [CUDA call sequences] 6): the watchdog thread's
event queries run in the relaxed capture mode, so the capture stays valid and its graph
replays. One GPU, the nccl backend at N = 1. Skips without a GPU."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

GPU = torch.cuda.is_available()


@pytest.mark.skipif(not GPU, reason="no GPU: CUDA graphs need one")
def test_watchdog_queries_leave_a_global_capture_intact():
    from tide import _C

    if not hasattr(_C, "Communicator"):
        pytest.skip("this build of tide._C has no runtime binding")
    device = torch.cuda.current_device()
    comm = _C.Communicator(0, 1, 1, "nccl", dist.HashStore(), 60.0, device)  # watchdog: 100 ms
    gid, reason = comm.register_group("g", [(37, 64), (5, 3)], cast=True)
    assert gid >= 0, reason
    masters = [torch.randn(37 * 64, device="cuda"), torch.randn(15, device="cuda")]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        comm.all_gather(gid, side.cuda_stream, [m.data_ptr() for m in masters])  # the arena
    side.synchronize()

    x = torch.randn(1 << 16, device="cuda")
    y = torch.zeros_like(x)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(int(2e9))  # about a second: the next call's completion stays pending
        comm.all_gather(gid, side.cuda_stream, [m.data_ptr() for m in masters])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # capture_error_mode="global", torch's default
        y.copy_(x * 2.0)
        time.sleep(0.5)  # several watchdog periods while the call is in flight
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2.0)
    comm.check()  # the watchdog did not abort
