"""Calls of two groups on two caller streams, one of them CUDA's legacy default stream (the
handle 0, torch.cuda.default_stream()): the second group's all-gather must run after the first's
(NOTE [CUDA call sequences] 2), since both cast their shards into the communicator's one shared
stage. A runner once took the handle 0 for "no call yet", so a call after one on the default
stream did not wait for it and its cast overwrote the stage under the first call's scatter
(FSDP2's explicit unshard(async_op=True) issues its all-gather on the current stream: parity
case i on the ipc backend). The first call is held back on the device by a sleep, so that an
unordered second call would run first. One GPU, nccl backend, N = 1; skips without a GPU."""

from __future__ import annotations


import pytest
import torch
import torch.distributed as dist
from seed import tide_test_seed

GPU = torch.cuda.is_available()
# Large enough that a cast into the stage takes longer than a kernel launch.
SHAPES = [[(2048, 1024), (37, 5)], [(1024, 2048), (3, 3)]]
TRIALS = 12


@pytest.mark.skipif(not GPU, reason="no GPU")
def test_a_call_after_one_on_the_legacy_default_stream_waits_for_it():
    from tide import _C
    from tide._memory import tensor_at

    if not hasattr(_C, "Communicator"):
        pytest.skip("this build of tide._C has no runtime binding")
    legacy = torch.cuda.default_stream()
    if legacy.cuda_stream != 0:
        pytest.skip("torch's default stream is not CUDA's legacy default stream here")
    seed = tide_test_seed(20261203)
    print(f"seed {seed} (rerun with TIDE_TEST_SEED)")
    gen = torch.Generator().manual_seed(seed)
    comm = _C.Communicator(0, 1, 1, "nccl", dist.HashStore(), 60.0, torch.cuda.current_device())
    ids = []
    for k, shapes in enumerate(SHAPES):
        gid, reason = comm.register_group(f"g{k}", shapes, cast=True)
        assert gid >= 0, reason
        ids.append(gid)
    infos = [comm.group_info(g) for g in ids]
    views = [
        tensor_at(i["landing_ptr"], i["landing_bytes"] // 2, torch.bfloat16, torch.device("cuda"))
        for i in infos
    ]
    masters = [[torch.empty(r * c, device="cuda") for r, c in s] for s in SHAPES]
    copies = [torch.empty_like(v) for v in views]
    side = torch.cuda.Stream()
    streams = [legacy, side]
    for trial in range(TRIALS):
        for group in masters:
            for m in group:
                m.copy_(torch.randn(m.numel(), generator=gen))
        for c in copies:
            c.fill_(float("nan"))  # poison
        torch.cuda.synchronize()
        for k, gid in enumerate(ids):
            with torch.cuda.stream(streams[k]):
                if k == 0:
                    torch.cuda._sleep(20_000_000)  # the first call starts well after the second's enqueue
                comm.all_gather(gid, streams[k].cuda_stream, [m.data_ptr() for m in masters[k]])
                copies[k].copy_(views[k])
        torch.cuda.synchronize()
        comm.check()
        for k, info in enumerate(infos):
            for p, m in enumerate(masters[k]):
                at = info["landing_offsets"][p] // 2
                got = copies[k][at : at + m.numel()]
                want = m.to(torch.bfloat16)
                assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (
                    f"trial {trial}: group {k} ({'legacy default' if k == 0 else 'side'} stream) "
                    f"param {p}: the landing is not bf16 of its master"
                )
    comm.close()
