"""TIDE calls inside a caller's CUDA graph (NOTE [runtime] 6), on one GPU with the nccl
backend (N = 1): a warm-up step, then graph_period steps of two groups (all-gathers with the
fp32 -> bf16 cast, reduce-scatters with alpha and accumulate) captured with torch.cuda.graph,
replayed with fresh data copied into the captured buffers. Every replay's reduce-scatter
outputs and last landings must equal torch's arithmetic bitwise (N = 1: out = alpha * g in
fp32, plus out when accumulating; the landing holds bf16(master)). Skips without a GPU."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
from seed import tide_test_seed

GPU = torch.cuda.is_available()
SHAPES = [[(37, 64), (5, 1), (130, 96)], [(9, 128), (3, 3)]]
ALPHA = 0.5


def _communicator():
    from tide import _C

    if not hasattr(_C, "Communicator"):
        pytest.skip("this build of tide._C has no runtime binding")
    device = torch.cuda.current_device()
    return _C.Communicator(0, 1, 1, "nccl", dist.HashStore(), 60.0, device)


class Step:
    """One step's buffers: per group fp32 masters, bf16 gradients, fp32 outputs and a copy
    of the landing taken right after the all-gather."""

    def __init__(self, infos):
        self.masters = [[torch.empty(r * c, device="cuda") for r, c in s] for s in SHAPES]
        self.grads = [
            [torch.empty(r * c, device="cuda", dtype=torch.bfloat16) for r, c in s] for s in SHAPES
        ]
        self.outs = [torch.empty(i["shard_elems"], device="cuda") for i in infos]
        self.initial = [torch.empty_like(o) for o in self.outs]
        self.landings = [
            torch.empty(i["landing_bytes"] // 2, device="cuda", dtype=torch.bfloat16) for i in infos
        ]

    def refill(self, gen: torch.Generator) -> None:
        for group in self.masters:
            for m in group:
                m.copy_(torch.randn(m.numel(), generator=gen).cuda())
        for group in self.grads:
            for g in group:
                g.copy_(torch.randn(g.numel(), generator=gen).to(torch.bfloat16).cuda())
        for i in self.initial:
            i.copy_(torch.randn(i.numel(), generator=gen).cuda())


def _run_step(comm, ids, landing_views, step: Step, accumulate: bool) -> None:
    stream = torch.cuda.current_stream().cuda_stream
    for k, gid in enumerate(ids):
        comm.all_gather(gid, stream, [m.data_ptr() for m in step.masters[k]])
        step.landings[k].copy_(landing_views[k])
    for k in reversed(range(len(ids))):
        out = step.outs[k]
        if accumulate:
            out.copy_(step.initial[k])
        else:
            out.fill_(float("nan"))  # poison
        comm.reduce_scatter(
            ids[k], stream, [g.data_ptr() for g in step.grads[k]], out.data_ptr(), ALPHA, accumulate
        )


def _check(step: Step, infos, accumulate: bool, what: str) -> None:
    for k, info in enumerate(infos):
        for p, g in enumerate(step.grads[k]):
            at = info["out_offsets"][p]
            want = g.float() * ALPHA
            if accumulate:
                want = step.initial[k][at : at + g.numel()] + want
            got = step.outs[k][at : at + g.numel()]
            assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (
                f"{what}: group {k} param {p} out"
            )
        for p, m in enumerate(step.masters[k]):
            at = info["landing_offsets"][p] // 2
            got_p = step.landings[k][at : at + m.numel()]
            assert torch.equal(got_p.view(torch.int16), m.to(torch.bfloat16).view(torch.int16)), (
                f"{what}: group {k} param {p} landing"
            )


@pytest.mark.skipif(not GPU, reason="no GPU: CUDA graphs need one")
def test_calls_captured_in_a_torch_graph_replay_bitwise():
    from tide._memory import tensor_at

    seed = tide_test_seed(20261202)
    print(f"seed {seed} (rerun with TIDE_TEST_SEED)")
    gen = torch.Generator().manual_seed(seed)
    comm = _communicator()
    ids = []
    for k, shapes in enumerate(SHAPES):
        gid, reason = comm.register_group(f"g{k}", shapes, cast=True)
        assert gid >= 0, reason
        ids.append(gid)
    infos = [comm.group_info(g) for g in ids]  # creates the arena
    landing_views = [
        tensor_at(i["landing_ptr"], i["landing_bytes"] // 2, torch.bfloat16, torch.device("cuda"))
        for i in infos
    ]
    period = 1
    for i in infos:
        assert i["graph_period"] >= 1
        period = math.lcm(period, i["graph_period"])

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        warm = Step(infos)
        warm.refill(gen)
        _run_step(comm, ids, landing_views, warm, accumulate=False)  # the first calls
        torch.cuda.current_stream().synchronize()
        _check(warm, infos, False, "warm-up")

        steps = [Step(infos) for _ in range(period)]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
            for e, step in enumerate(steps):
                _run_step(comm, ids, landing_views, step, accumulate=e % 2 == 1)
        calls = comm.take_graph_calls()
        assert calls.calls == 2 * len(ids) * period, repr(calls)
        assert calls.handoffs == calls.calls, repr(calls)  # NOTE [lane handoff]: one per call

        for replay in range(3):
            for step in steps:
                step.refill(gen)
            torch.cuda.current_stream().synchronize()
            comm.prepare_graph_launch(calls)
            graph.replay()
            torch.cuda.current_stream().synchronize()
            comm.check()
            for e, step in enumerate(steps):
                _check(step, infos, e % 2 == 1, f"replay {replay} step {e}")

        # An ordinary call between replays puts the groups off the captured indices.
        _run_step(comm, ids, landing_views, warm, accumulate=False)
        torch.cuda.current_stream().synchronize()
        if period > 1:
            with pytest.raises(Exception, match="congruent"):
                comm.prepare_graph_launch(calls)
    comm.close()


@pytest.mark.skipif(not GPU, reason="no GPU")
def test_first_call_under_capture_is_refused():
    comm = _communicator()
    gid, reason = comm.register_group("g", SHAPES[0], cast=True)
    assert gid >= 0, reason
    masters = [torch.zeros(r * c, device="cuda") for r, c in SHAPES[0]]
    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    caught = []
    with torch.cuda.stream(side):
        with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
            masters[0].add_(1.0)
            try:
                comm.all_gather(gid, side.cuda_stream, [m.data_ptr() for m in masters])
            except Exception as e:  # noqa: BLE001 - the message is what is checked
                caught.append(str(e))
    assert caught and "warm-up" in caught[0], caught
    comm.close()
