"""One rank of the FSDP2 parity run: stock FSDP2 against FSDP2 with TIDE, side by side.

Launched by test_fsdp_parity.py as WORLD_SIZE processes (gloo, CPU). Every case trains two
copies of one seeded model for STEPS steps, stock and TIDE, on the same inputs, and checks
at every step:
  - every all-gathered parameter (every unshard, forward and backward) bitwise equal;
  - the loss within LOSS_BOUND (it is bitwise equal when the parameters are);
  - every sharded fp32 gradient within the reassociation bound below;
  - report(): every group on TIDE, its call counters moving (in cases i and n a group may
    stay on stock FSDP2, with a reason, where TIDE refuses it: FALLBACK_CASES; the groups on
    TIDE must still move their counters, and at least one group must be on TIDE);
  - groups a step does not run (case m) move no counter and get no gradient.

Cases (a)-(f) are described in test_fsdp_parity.py, with (g)-(o): (g) activation
checkpointing around each block of the decoder; (h) two forwards (two micro-batches' losses
summed), then one backward; (i) explicit prefetching, rotating per step: each block's forward
preceded by the next block's unshard() (async_op=False; async_op=True with .wait()), or
forward and backward prefetch lists of two modules (depth 2); (j) reshard_after_forward=False
on the first two of three blocks; (k) reshard_after_forward=<int>: 2 at 4 ranks (the backward
all-gather runs over 2), 1 at 2 ranks (FSDP2 turns it into False); (l) gradients accumulated
without zero_grad: two synchronised backwards per step, an optimizer step every second step
(four backwards per gradient); (m) partial forwards: some steps run only the first 1, 2 or 3
of 4 blocks; (n) shared modules: two blocks, each fully_shard-ed, routed A -> B -> A (and
B -> A -> B); (o) the MLP with each fully_shard over a process group of its own, all over the
same ranks: one TIDE communicator (one arena) serves every group.

NOTE [reassociation bound]
A sum of n fp32 terms in any order has an error of at
most (n - 1) u sum|x_i| (u = 2^-24), so two orders differ by at most 2(n - 1) u sum|x_i|; the
scaling by alpha and an accumulation add a few roundings of the result. Per element:
    |g_tide - g_stock| <= (2 n + 4) u alpha S,   S = sum over ranks and micro-batches of |g|,
with n the number of terms summed (ranks x micro-batches; a module used twice, or two
forwards before one backward, counts as two micro-batches, since FSDP2 may reduce its
gradients in two parts). S is measured by a hook on the stock model's unsharded parameters,
from one zero_grad to the next. After each optimizer step, TIDE's sharded parameters are
set to stock's so that every step starts from the same point.
"""

from __future__ import annotations

import copy
import io
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

import tide.fsdp
from tide.demo.model import Config, Decoder, batch
from tide.demo.teardown import end_distributed_run
from seed import tide_test_seed

U = 2.0**-24
LOSS_BOUND_ULPS = 8
STEPS = 10
# Cases where TIDE may refuse a group (it then stays on stock FSDP2 and report() gives the
# reason): more groups unsharded at once than TIDE may hold, with prefetching two modules
# ahead (i) and with modules used twice (n). Everywhere else every group must be on TIDE.
FALLBACK_CASES = "in"


class Routed:
    """The loop over the blocks, set per step on both models alike: ``route``, the blocks to
    run in order (None: each once); ``checkpointed``, activation checkpointing around each
    block; ``explicit_unshard``, None, "sync" or "async": before each block's forward, the
    next block of the route is unshard()-ed (async: waited for after the block's forward)."""

    route = None
    checkpointed = False
    explicit_unshard = None
    ahead = 0  # case i: how many blocks ahead the Probe expects unsharded or in flight

    def run_blocks(self, x):
        route = range(len(self.blocks)) if self.route is None else self.route
        route = list(route)
        for pos, index in enumerate(route):
            block = self.blocks[index]
            handle = None
            if self.explicit_unshard and pos + 1 < len(route):
                handle = self.blocks[route[pos + 1]].unshard(async_op=self.explicit_unshard == "async")
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
            if handle is not None:
                handle.wait()
        return x


class MLP(Routed, nn.Module):
    """Uneven, odd shapes: rows not divisible by the world size, 1-D biases and norm weights."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            [
                nn.Sequential(nn.Linear(13, 37), nn.LayerNorm(37), nn.GELU()),
                nn.Sequential(nn.Linear(37, 5), nn.Tanh()),
                nn.Sequential(nn.Linear(5, 23, bias=False), nn.LayerNorm(23), nn.GELU()),
            ]
        )
        self.head = nn.Linear(23, 3)

    def forward(self, x):
        return self.head(self.run_blocks(x))

    def loss(self, x):
        return (self(x) - x[:, :3].sin()).pow(2).mean()


class Tower(Routed, nn.Module):
    """Blocks of one width (19 rows: uneven at 2 and 4 ranks), so that any route through them
    is a model: partial forwards (early exits) and blocks used twice."""

    WIDTH = 19

    def __init__(self, blocks: int) -> None:
        super().__init__()
        w = self.WIDTH
        self.inp = nn.Linear(13, w)
        self.blocks = nn.ModuleList(
            [nn.Sequential(nn.Linear(w, w), nn.LayerNorm(w), nn.GELU()) for _ in range(blocks)]
        )
        self.head = nn.Linear(w, 3)

    def forward(self, x):
        return self.head(self.run_blocks(self.inp(x)))

    def loss(self, x):
        return (self(x) - x[:, :3].sin()).pow(2).mean()


class MoE(Routed, nn.Module):
    """(p) An MoE layer: a dense part (input, router, head) sharded over every rank and experts
    (the blocks, each its own fully_shard) sharded over the expert sub-mesh, one rank per
    host; every expert runs on every token, weighted by the router's top-2 gates. The last
    expert keeps fp32 parameters (no mixed precision): its gradients are fp32, which the
    lane's reduce-scatter does not take, so that one falls back to TIDE-RS."""

    EXPERTS, WIDTH, HIDDEN = 4, 19, 29
    FP32_EXPERT = EXPERTS - 1

    def __init__(self) -> None:
        super().__init__()
        w, h = self.WIDTH, self.HIDDEN
        self.inp = nn.Linear(13, w)
        self.router = nn.Linear(w, self.EXPERTS)
        self.blocks = nn.ModuleList(
            [nn.Sequential(nn.Linear(w, h), nn.GELU(), nn.Linear(h, w)) for _ in range(self.EXPERTS)]
        )
        self.head = nn.Linear(w, 3)

    def forward(self, x):
        h = self.inp(x)
        gates = torch.softmax(self.router(h).float(), dim=-1)
        top = gates.topk(2, dim=-1)
        weights = torch.zeros_like(gates).scatter(-1, top.indices, top.values).to(h.dtype)
        out = h
        for e, expert in enumerate(self.blocks):
            y = expert(h.float()).to(h.dtype) if e == self.FP32_EXPERT else expert(h)
            out = out + weights[:, e : e + 1] * y
        return self.head(out)

    def loss(self, x):
        return (self(x).float() - x[:, :3].sin()).pow(2).mean()


def expert_mesh(world):
    """(p) HSDP over the expert sub-mesh: shard over the hosts (one rank per host: ranks l,
    l + L, ...), replicate over a host's ranks (emulated hosts of LOCAL_WORLD_SIZE ranks)."""
    from torch.distributed.device_mesh import DeviceMesh

    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    ranks = torch.arange(world).view(world // local, local).t()  # rows: one rank per host
    return DeviceMesh(DEVICE.type, ranks, mesh_dim_names=("replicate", "shard"))


class ParityDecoder(Routed, Decoder):
    """tide.demo.model.Decoder with its blocks run by Routed (the same forward by default)."""

    def forward(self, tokens):
        return self.head(self.norm(self.run_blocks(self.embed(tokens))))


DEVICE = torch.device("cpu")


def mlp_input(step, micro, rank, seed):
    gen = torch.Generator().manual_seed(seed * 7919 + step * 101 + micro * 13 + rank)
    return torch.randn(6, 13, generator=gen).to(DEVICE)


DECODER = Config(vocab=97, dim=48, layers=3, heads=4, hidden=70, seq=12)


def decoder_input(step, micro, rank, seed):
    return batch(DECODER, 3, seed * 1000 + step * 10 + micro, rank, DEVICE)


def held(group) -> bool:
    """The group is unsharded or has an all-gather in flight (its unsharded memory is in use)."""
    return group.is_unsharded or group._all_gather_result is not None


# Diagnosis (TIDE_PARITY_REFERENCE=1): every unshard of both models is also checked against a
# third all-gather, of the shards' CPU copies on a CPU process group, at the same point, so
# that a mismatch says which side is wrong (a baseline can be wrong too).
REFERENCE_ALL_GATHER = os.environ.get("TIDE_PARITY_REFERENCE") == "1"
_reference_groups: dict = {}


def reference_unsharded(fp, like: torch.Tensor) -> torch.Tensor:
    """The unsharded parameter from a gloo all-gather of every rank's padded shard, on CPU
    (``like`` itself where the shard group is not the whole world: not checked there)."""
    pg = fp.mesh_info.shard_process_group
    ranks = tuple(dist.get_process_group_ranks(pg))
    if len(ranks) != dist.get_world_size():
        return like  # a shard group of a larger mesh (HSDP): new_group would need every rank
    if ranks not in _reference_groups:
        _reference_groups[ranks] = dist.new_group(list(ranks), backend="gloo")
    shard = fp._sharded_param_data.detach().to("cpu").contiguous()
    full = torch.empty(shard.numel() * len(ranks), dtype=shard.dtype)
    dist.all_gather_into_tensor(full, shard, group=_reference_groups[ranks])
    rows = int(fp.padded_sharded_param_size[0]) * len(ranks)
    full = full.view((rows,) + tuple(fp.padded_sharded_param_size[1:]))[: like.shape[0]]
    return full.to(like.dtype).reshape(like.shape).to(like.device)


class Capture:
    """Records every unshard's parameters (a wrapper on each group's wait_for_unshard), and
    the most groups held at once (sampled after every unshard and wait_for_unshard)."""

    def __init__(self, groups, on_tide):
        self.records: list[tuple[str, list[torch.Tensor]]] = []
        self.problems: list[str] = []
        self.versions: dict[int, int] = {}
        self.abs_grads: dict[object, torch.Tensor] = {}
        self.hooked: set[int] = set()
        self.groups = [group for _, group in groups]
        self.max_held = 0
        for name, group in groups:
            original, original_unshard = group.wait_for_unshard, group.unshard

            def wrapped(*a, _orig=original, _group=group, _name=name, **k):
                out = _orig(*a, **k)
                if _group.is_unsharded:
                    self._record(_name, _group, on_tide)
                self._count_held()
                return out

            def wrapped_unshard(*a, _orig=original_unshard, **k):
                out = _orig(*a, **k)
                self._count_held()
                return out

            group.wait_for_unshard = wrapped
            group.unshard = wrapped_unshard

    def _count_held(self):
        self.max_held = max(self.max_held, sum(held(g) for g in self.groups))

    def _record(self, name, group, on_tide):
        values = []
        # TIDE's own checks apply to the groups TIDE serves (in FALLBACK_CASES some may be stock).
        served = on_tide and tide._fsdp_group.group_of(group.fsdp_params) is not None
        for i, fp in enumerate(group.fsdp_params):
            param = fp.unsharded_param
            values.append(param.detach().clone())
            if REFERENCE_ALL_GATHER and not torch.equal(values[-1], reference_unsharded(fp, param)):
                side = "TIDE" if on_tide else "stock"
                self.problems.append(f"{name} param {i}: {side}'s unshard differs from a CPU all-gather of the shards")
            if served:
                if param.storage_offset() != 0:
                    self.problems.append(f"{name}: unsharded param storage_offset {param.storage_offset()}")
                landing = fp.all_gather_outputs[0]
                if param.untyped_storage().data_ptr() != landing.untyped_storage().data_ptr():
                    self.problems.append(f"{name}: unsharded param is not a view of the landing")
                key = id(param)
                if self.versions.setdefault(key, param._version) != param._version:
                    self.problems.append(f"{name}: version counter moved {self.versions[key]} -> {param._version}")
            elif not on_tide and id(param) not in self.hooked:
                self.hooked.add(id(param))
                param.register_hook(lambda g, _fp=fp: self._add_abs(_fp, g))
        self.records.append((name, values))

    def _add_abs(self, fp, grad):
        value = grad.detach().float().abs()
        if fp in self.abs_grads:
            self.abs_grads[fp] = self.abs_grads[fp] + value
        else:
            self.abs_grads[fp] = value
        return grad


def shard_of(fp, full: torch.Tensor) -> torch.Tensor:
    """This rank's Shard(0) rows of an unsharded tensor, as FSDP2 pads them."""
    rows = int(fp.padded_sharded_param_size[0])
    rank = fp.mesh_info.shard_mesh_rank
    size = fp.mesh_info.shard_mesh_size
    padded = torch.zeros((rows * size,) + tuple(full.shape[1:]), dtype=full.dtype, device=full.device)
    padded[: full.shape[0]] = full
    return padded[rank * rows : rank * rows + fp.sharded_size[0]]


# Per case: the model and its input; models not named here are the MLP.
DECODER_CASES = "beg"
TOWER_BLOCKS = {"i": 4, "m": 4, "n": 2}
# Partial forwards (m): the blocks each step runs (None: all four), by step modulo 4.
PARTIAL_ROUTES = (None, [0, 1], [0], [0, 1, 2])
# Shared modules (n): A -> B -> A on even steps, B -> A -> B on odd ones.
SHARED_ROUTES = ([0, 1, 0], [1, 0, 1])


def build(case):
    if case == "p":
        return MoE(), mlp_input
    if case in DECODER_CASES:
        return ParityDecoder(DECODER), decoder_input
    if case in TOWER_BLOCKS:
        return Tower(TOWER_BLOCKS[case]), mlp_input
    return MLP(), mlp_input


def reshard_after_forward(case, index, blocks, world):
    """fully_shard's reshard_after_forward for block ``index`` of ``blocks``."""
    if case == "e":
        return index != blocks - 1
    if case == "j":
        return index == blocks - 1
    if case == "k":
        return world // 2  # 2 at 4 ranks; 1 at 2 ranks, which FSDP2 turns into False
    return True


def check_setup(case, model, world) -> list[str]:
    """What the case is about, as FSDP2 set it up (so that the case tests what it says)."""
    problems = []
    for i, block in enumerate(model.blocks):
        info = tide.fsdp._fsdp_groups(block)[0][1].post_forward_mesh_info
        if case == "j" and (info is None) != (i < len(model.blocks) - 1):
            problems.append(f"setup: blocks.{i} post-forward mesh {info}")
        if case == "k" and world == 4 and (info is None or info.shard_mesh_size != 2):
            problems.append(f"setup: blocks.{i} does not reshard to 2 ranks after forward ({info})")
        if case == "k" and world == 2 and info is not None:
            problems.append(f"setup: blocks.{i} reshards after forward with reshard_after_forward=1")
    return problems


class Probe:
    """Counts each block's forwards (recomputations included) and, in case i, checks that the
    prefetching did run: at each block's forward (after FSDP2's pre-forward) the next
    ``model.ahead`` blocks are unsharded or being all-gathered (explicit unshard(): 1, prefetch
    lists: 2), and with lists of two, at each block's unshard in backward the block before it
    already is (FSDP2's default prefetch would come only after that unshard). On TIDE a
    prefetch into a landing slot that another group still holds is deferred to the group's
    own unshard (NOTE [landing slots]): there a missing prefetch must be one TIDE deferred."""

    def __init__(self, case, model, problems):
        self.calls = [0] * len(model.blocks)
        groups = [tide.fsdp._fsdp_groups(block)[0][1] for block in model.blocks]

        def held_or_deferred(group):
            on_tide = tide._fsdp_group.GROUP_OF_PARAM.get(group.fsdp_params[0])
            return held(group) or (on_tide is not None and on_tide.deferred_prefetches > 0)
        for i, group in enumerate(groups):
            original = group.wait_for_unshard

            def wait_for_unshard(*a, _orig=original, _i=i, **k):
                out = _orig(*a, **k)
                backward = groups[_i]._training_state.name == "PRE_BACKWARD"
                if case == "i" and model.ahead == 2 and backward and _i > 0 and not held_or_deferred(groups[_i - 1]):
                    problems.append(f"blocks.{_i - 1} not unsharded or in flight at blocks.{_i}'s backward")
                return out

            group.wait_for_unshard = wait_for_unshard
        for i, block in enumerate(model.blocks):

            def pre_forward(module, args, _i=i):
                self.calls[_i] += 1
                if case == "i" and torch.is_grad_enabled():
                    for j in range(_i + 1, min(_i + 1 + model.ahead, len(groups))):
                        if not held_or_deferred(groups[j]):
                            problems.append(f"blocks.{j} not unsharded or in flight at blocks.{_i}'s forward")

            block.register_forward_pre_hook(pre_forward)

    def expect(self, model, forwards) -> list[str]:
        """This step's counts against the route (each block's forwards per step), then resets."""
        route = list(range(len(model.blocks))) if model.route is None else model.route
        per_forward = 2 if model.checkpointed else 1  # the forward and its recomputation
        expected = [route.count(i) * forwards * per_forward for i in range(len(model.blocks))]
        calls, self.calls = self.calls, [0] * len(model.blocks)
        return [] if calls == expected else [f"block forwards {calls}, expected {expected}"]


def check_after_forward(case, model, world) -> list[str]:
    """k at 4 ranks: after forward, every block is resharded to the 2-rank mesh."""
    if case != "k" or world != 4:
        return []
    problems = []
    for i, block in enumerate(model.blocks):
        if not tide.fsdp._fsdp_groups(block)[0][1].is_sharded_post_forward:
            problems.append(f"blocks.{i} is not resharded to the post-forward mesh after forward")
    return problems


def configure_step(case, step, model) -> set[str] | None:
    """Sets this step's forward on one model; returns the groups it runs (None: all)."""
    blocks = list(model.blocks)
    if case == "g":
        model.checkpointed = True
    if case == "i":
        mode = step % 3  # 0: unshard(), 1: unshard(async_op=True) + wait(), 2: prefetch depth 2
        model.explicit_unshard = ("sync", "async", None)[mode]
        depth = 2 if mode == 2 else 0
        model.ahead = depth or 1
        model.set_modules_to_forward_prefetch(blocks[:depth])
        model.set_modules_to_backward_prefetch(blocks[::-1][:depth])
        for i, block in enumerate(blocks):
            block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 1 + depth])
            block.set_modules_to_backward_prefetch(blocks[max(i - depth, 0) : i][::-1])
    if case == "m":
        model.route = PARTIAL_ROUTES[step % len(PARTIAL_ROUTES)]
    if case == "n":
        model.route = SHARED_ROUTES[step % len(SHARED_ROUTES)]
    if model.route is None:
        return None
    return {"<root>"} | {f"blocks.{i}" for i in model.route}


def summed(losses):
    """The losses' sum (a single loss itself, not 0 + loss)."""
    out = losses[0]
    for loss in losses[1:]:
        out = out + loss
    return out


def resembles(got, want, records, previous_records) -> str:
    """What a wrongly all-gathered value holds instead, as a suffix for its failure line: stock's
    value of another unshard this step or last step (another group's slot contents, a stale
    landing), zeros, or the share of its elements that are right (a partly landed all-gather)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f" (dtype {got.dtype} shape {tuple(got.shape)} vs {want.dtype} {tuple(want.shape)})"
    for when, recs in (("this step", records), ("the previous step", previous_records)):
        for other, values in recs:
            for j, v in enumerate(values):
                if v.shape == got.shape and v.dtype == got.dtype and torch.equal(v, got):
                    return f" (it equals stock's {other} param {j} of {when})"
    if got.numel() and not torch.any(got != 0):
        return " (all zeros)"
    right = (got.view(-1) == want.view(-1)).float().mean().item() if got.numel() else 1.0
    return f" ({100 * right:.1f}% of its elements right)"


def run_case(case, world, rank, seed):
    started = time.perf_counter()
    torch.manual_seed(seed)
    micro_batches = 2 if case in "cl" else 1  # backwards per step
    forwards = 2 if case == "h" else 1  # forwards per backward, their losses summed
    # Terms per element and backward in the gradient bound: micro-batches, and a module used
    # twice or two forwards (FSDP2 may reduce such a gradient in two parts).
    terms_per_backward = 2 if case in "hn" else 1
    step_every = 2 if case == "l" else 1  # optimizer step (and zero_grad) every this many steps
    base, make_input = build(case)
    base = base.to(DEVICE)
    mesh = None
    if case == "d":
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(DEVICE.type, (2, world // 2), mesh_dim_names=("replicate", "shard"))
    bf16 = case in "bp"  # (p): bf16 gradients, as the expert-parallel lane's reduce-scatter takes
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    experts = expert_mesh(world) if case == "p" else None

    def own_mesh():
        """(o): a process group of its own over every rank, as DeviceMesh makes per mesh where
        the default backend is gloo and CUDA is present; else the case's mesh."""
        if case != "o":
            return mesh
        from torch.distributed.device_mesh import DeviceMesh

        return DeviceMesh.from_group(dist.new_group(list(range(world))), DEVICE.type)

    def shard(model):
        blocks = list(model.blocks)
        for i, block in enumerate(blocks):
            reshard = reshard_after_forward(case, i, len(blocks), world)
            policy = MixedPrecisionPolicy() if case == "p" and i == MoE.FP32_EXPERT else mp
            fully_shard(block, mesh=experts or own_mesh(), mp_policy=policy, reshard_after_forward=reshard)
        fully_shard(model, mesh=own_mesh(), mp_policy=mp)
        return model

    stock = shard(copy.deepcopy(base))
    tide_model = shard(copy.deepcopy(base))
    enabled = tide.fsdp.enable(tide_model, mode=os.environ.get("TIDE_PARITY_MODE", "in-place"))
    failures = check_setup(case, stock, world)
    fallbacks: dict[str, dict] = {}

    def check_backends(rows, when):
        for r in rows:
            if r["backend"] == "tide":
                continue
            if case in FALLBACK_CASES and r["reason"]:
                fallbacks.setdefault(r["group"], {"group": r["group"], "reason": r["reason"], "since": when})
            else:
                failures.append(f"{when}: group {r['group']} not on TIDE: {r['reason']!r}")

    check_backends(enabled, "enable()")
    stock_groups = tide.fsdp._fsdp_groups(stock)
    tide_groups = tide.fsdp._fsdp_groups(tide_model)
    cap_s, cap_t = Capture(stock_groups, False), Capture(tide_groups, True)
    probe_problems: list[str] = []
    probe_s, probe_t = Probe(case, stock, probe_problems), Probe(case, tide_model, probe_problems)
    opt_s = torch.optim.AdamW(stock.parameters(), lr=1e-2)
    opt_t = torch.optim.AdamW(tide_model.parameters(), lr=1e-2)
    alpha = 1.0 / world
    stats = {"max_loss_diff": 0.0, "max_grad_ratio": 0.0, "max_drift": 0.0, "losses": [], "steps": STEPS}
    # Every libnccl file this process has mapped: TIDE must use the one torch loaded.
    with open("/proc/self/maps") as maps:
        stats["nccl_libraries"] = sorted({line.split()[-1] for line in maps if "libnccl" in line})
    saved = None
    last_counts = None
    terms = 0  # terms per gradient element since the last zero_grad, per rank

    previous_records: list[tuple[str, list[torch.Tensor]]] = []
    for step in range(STEPS):
        if case == "f" and step == 3:
            saved = (copy.deepcopy(stock.state_dict()), copy.deepcopy(tide_model.state_dict()))
            buffer = io.BytesIO()
            torch.save(saved[1], buffer)
        if case == "f" and step == 6:
            buffer.seek(0)
            loaded = torch.load(buffer, weights_only=False)
            stock.load_state_dict(saved[0])
            tide_model.load_state_dict(loaded)
        executed = configure_step(case, step, stock)
        configure_step(case, step, tide_model)
        cap_s.records.clear(), cap_t.records.clear()
        if terms == 0:
            cap_s.abs_grads.clear()
        losses = []
        for micro in range(micro_batches):
            sync = not (case == "c" and step % 2 == 0 and micro == 0)
            stock.set_requires_gradient_sync(sync)
            tide_model.set_requires_gradient_sync(sync)
            xs = [make_input(step, micro * forwards + f, rank, seed) for f in range(forwards)]
            parts_s = [stock.loss(x) for x in xs]
            parts_t = [tide_model.loss(x) for x in xs]
            failures.extend(f"step {step}: stock: {p}" for p in check_after_forward(case, stock, world))
            failures.extend(f"step {step}: TIDE: {p}" for p in check_after_forward(case, tide_model, world))
            summed(parts_s).backward()
            summed(parts_t).backward()
            terms += terms_per_backward
            losses.extend((ls.item(), lt.item()) for ls, lt in zip(parts_s, parts_t))
            if case == "f" and step == 5 and micro == 0:
                # A deep copy of the (sharded) state dict mid-run, and of a landing view.
                sd = copy.deepcopy(tide_model.state_dict())
                for key, value in tide_model.state_dict().items():
                    if not torch.equal(sd[key].to_local(), value.to_local()):
                        failures.append(f"step {step}: deepcopy of state_dict differs at {key}")
                # The landing view is persistent only where TIDE's all-gather installed it: at
                # N = 1 FSDP2 runs no all-gather and frees its own output at reshard.
                fp = tide_groups[0][1].fsdp_params[0]
                group = tide._fsdp_group.GROUP_OF_PARAM.get(fp)
                if world > 1 and not (group is not None and group.views_installed):
                    failures.append(f"step {step}: no landing views installed at N = {world}")
                if group is not None and group.views_installed:
                    view = copy.deepcopy(fp.all_gather_outputs[0])
                    if not torch.equal(view, fp.all_gather_outputs[0]):
                        failures.append(f"step {step}: deepcopy of a landing view differs")
        runs = forwards * micro_batches
        failures.extend(f"step {step}: stock: {p}" for p in probe_s.expect(stock, runs))
        failures.extend(f"step {step}: TIDE: {p}" for p in probe_t.expect(tide_model, runs))
        failures.extend(f"step {step}: {p}" for p in probe_problems)
        probe_problems.clear()
        for ls, lt in losses:
            diff = abs(ls - lt)
            stats["max_loss_diff"] = max(stats["max_loss_diff"], diff)
            if diff > LOSS_BOUND_ULPS * U * abs(ls) + 1e-30:
                failures.append(f"step {step}: loss {lt!r} vs stock {ls!r}")
        stats["losses"].append(losses[-1])

        # All-gathered parameters: every unshard, in the same order, bitwise equal.
        if len(cap_s.records) != len(cap_t.records):
            failures.append(f"step {step}: {len(cap_t.records)} unshards vs stock {len(cap_s.records)}")
        for (name, vs), (name_t, vt) in zip(cap_s.records, cap_t.records):
            if name != name_t:
                failures.append(f"step {step}: unshard of {name_t} where stock unsharded {name}")
            for i, (a, b) in enumerate(zip(vs, vt)):
                if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a.view(-1).view(torch.uint8) if a.numel() else a, b.view(-1).view(torch.uint8) if b.numel() else b):
                    seen = resembles(b, a, cap_s.records, previous_records)
                    failures.append(f"step {step}: {name} param {i} all-gathered differently{seen}")
        previous_records = list(cap_s.records)
        failures.extend(f"step {step}: {p}" for p in cap_t.problems)
        cap_t.problems.clear()

        # Sharded fp32 gradients within the reassociation bound.
        n_terms = world * terms
        for (name, gs), (_, gt) in zip(stock_groups, tide_groups):
            for fs, ft in zip(gs.fsdp_params, gt.fsdp_params):
                grad_s, grad_t = fs.sharded_param.grad, ft.sharded_param.grad
                if (grad_s is None) != (grad_t is None):
                    failures.append(f"step {step}: {name}: gradient present in one run only")
                    continue
                if executed is not None and name not in executed and grad_t is not None:
                    failures.append(f"step {step}: {name} did not run but has a gradient")
                if grad_s is None:
                    continue
                local_s, local_t = grad_s.to_local(), grad_t.to_local()
                if local_t.dtype != torch.float32 or local_s.shape != local_t.shape:
                    failures.append(f"step {step}: {name}: gradient {local_t.dtype} {tuple(local_t.shape)}")
                    continue
                total = cap_s.abs_grads[fs].clone()
                dist.all_reduce(total)
                bound = (2 * n_terms + 4) * U * alpha * shard_of(fs, total) + 1e-30
                ratio = ((local_t - local_s).abs() / bound).max().item() if local_s.numel() else 0.0
                stats["max_grad_ratio"] = max(stats["max_grad_ratio"], ratio)
                if ratio > 1.0:
                    failures.append(f"step {step}: {name}: gradient off by {ratio:.2f} x the bound")

        # report(): every group on TIDE (or, in FALLBACK_CASES, on stock with a reason), the
        # counters of the groups on TIDE moving where the step ran them, and only there.
        rows = tide.fsdp.report(tide_model)
        check_backends(rows, f"step {step}")
        counts = {r["group"]: (r["backend"], r["all_gathers"], r["reduce_scatters"]) for r in rows}
        if last_counts is not None:
            for r in rows:
                backend, ag, rs = counts[r["group"]]
                backend0, ag0, rs0 = last_counts[r["group"]]
                if backend != "tide" or backend0 != "tide":
                    continue
                if executed is not None and r["group"] not in executed:
                    if (ag, rs) != (ag0, rs0):
                        failures.append(
                            f"step {step}: report: {r['group']} did not run, called TIDE ({ag0}->{ag}, {rs0}->{rs})"
                        )
                # At N = 1 FSDP2 skips its all-gather path (a local copy into the landing).
                elif (ag <= ag0 and world > 1) or rs <= rs0:
                    failures.append(f"step {step}: report: {r['group']} ran no TIDE call ({ag0}->{ag}, {rs0}->{rs})")
        last_counts = counts

        if (step + 1) % step_every:
            continue  # gradients accumulate into the next step (l)
        terms = 0
        opt_s.step(), opt_t.step()
        opt_s.zero_grad(), opt_t.zero_grad()
        with torch.no_grad():
            for ps, pt in zip(stock.parameters(), tide_model.parameters()):
                drift = (ps.to_local() - pt.to_local()).abs().max().item() if ps.to_local().numel() else 0.0
                stats["max_drift"] = max(stats["max_drift"], drift)
                pt.to_local().copy_(ps.to_local())
    final = tide.fsdp.report(tide_model)
    check_backends(final, "end")
    stats["report"] = final
    stats["memory"] = tide.fsdp.memory(tide_model)
    if case == "o":
        pgs = {id(fs._get_fsdp_state()._fsdp_param_group.mesh_info.shard_process_group)
               for fs in [tide_model, *tide_model.blocks]}
        served = len(stats["memory"]["communicators"])
        if len(pgs) != len(tide_model.blocks) + 1 or served != 1:
            failures.append(f"(o): {len(pgs)} process groups for {len(tide_model.blocks) + 1} "
                            f"groups, served by {served} communicators (expected one)")
    if case == "p":  # NOTE [runtime] 11: the experts on the lane, the dense part on TIDE-AG/RS
        for r in final:
            lanes = (r["all_gather_lane"], r["reduce_scatter_lane"])
            want = ("ep", "ep") if r["group"].startswith("blocks.") else ("tide-ag", "tide-rs")
            if r["group"] == f"blocks.{MoE.FP32_EXPERT}":  # fp32 gradients: TIDE-RS, with the reason
                want = ("ep", "tide-rs")
                if "bf16" not in r["lane_reason"]:
                    failures.append(f"(p): {r['group']}: no reason for TIDE-RS: {r['lane_reason']!r}")
            if r["backend"] == "tide" and lanes != want:
                failures.append(f"(p): {r['group']} ran on lanes {lanes}, expected {want}: {r['lane_reason']!r}")
    for r in final:  # how the rail messages travelled (GroupStats::message_path)
        if r["backend"] != "tide" or not r["rail_messages"]:
            continue
        parts = r["message_path"].split("/")
        allowed = {"ipc": {"ipc-rendezvous", "none"}, "nccl": {"one-sided", "two-sided", "none"},
                   "host": {""}}.get(r["runtime_backend"], set())
        if r["runtime_backend"] == "host":
            parts = [r["message_path"]]
        if not set(parts) <= allowed or parts == ["none", "none"]:
            failures.append(f"{r['group']}: {r['rail_messages']} rail messages on "
                            f"{r['runtime_backend']} by message path {r['message_path']!r}")
    stats["fallbacks"] = list(fallbacks.values())
    stats["failures"] = failures
    stats["max_groups_held"] = cap_s.max_held  # the most groups unsharded or in flight at once (stock)
    stats["seconds"] = time.perf_counter() - started
    return stats


def main():
    out = sys.argv[1]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    seed = tide_test_seed(1234)
    cases = os.environ.get("TIDE_PARITY_CASES", "abcdefghijklmno")
    global DEVICE
    device = os.environ.get("TIDE_PARITY_DEVICE", "cpu")
    if device == "cuda":
        DEVICE = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(DEVICE)
        dist.init_process_group("nccl", device_id=DEVICE)
    elif device == "cuda-shared":  # every rank on GPU 0, gloo with CUDA tensors (ipc backend)
        DEVICE = torch.device("cuda", 0)
        torch.cuda.set_device(DEVICE)
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo")
    results = {}
    for case in cases:
        if case == "d" and (world < 4 or world % 2):
            continue
        if case == "k" and world < 2:  # reshard_after_forward=<int> divides the shard world
            continue
        try:
            results[case] = run_case(case, world, rank, seed)
        except Exception:  # noqa: BLE001 - reported to the test with its traceback
            results[case] = {"failures": [f"rank {rank} raised:\n{traceback.format_exc()}"]}
        dist.barrier()
    everyone: list = [None] * world
    dist.all_gather_object(everyone, results)
    if rank == 0:
        merged = {}
        for case in results:
            merged[case] = dict(everyone[0][case])
            merged[case]["failures"] = [
                f"rank {r}: {f}" for r, res in enumerate(everyone) for f in res[case]["failures"]
            ]
        with open(out, "w") as f:
            json.dump({"seed": seed, "world": world, "cases": merged}, f, indent=1, default=str)
    end_distributed_run()  # NOTE [gloo teardown]


if __name__ == "__main__":
    main()
