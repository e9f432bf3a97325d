"""One rank of the FSDP2 parity run: stock FSDP2 against FSDP2 with TIDE, side by side.

Launched by test_fsdp_parity.py as WORLD_SIZE processes (gloo, CPU). Every case trains two
copies of one seeded model for STEPS steps, stock and TIDE, on the same inputs, and checks
at every step:
  - every all-gathered parameter (every unshard, forward and backward) bitwise equal;
  - the loss within LOSS_BOUND (it is bitwise equal when the parameters are);
  - every sharded fp32 gradient within the reassociation bound below;
  - report(): every group on TIDE, its call counters moving.

NOTE [reassociation bound]
A sum of n fp32 terms in any order has an error of at
most (n - 1) u sum|x_i| (u = 2^-24), so two orders differ by at most 2(n - 1) u sum|x_i|; the
scaling by alpha and an accumulation add a few roundings of the result. Per element:
    |g_tide - g_stock| <= (2 n + 4) u alpha S,   S = sum over ranks and micro-batches of |g|,
with n the number of terms summed (ranks x micro-batches). S is measured by a hook on the
stock model's unsharded parameters. After each optimizer step, TIDE's sharded parameters are
set to stock's so that every step starts from the same point.
"""

from __future__ import annotations

import copy
import io
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import tide.fsdp
from tide.demo.model import Config, Decoder, batch

U = 2.0**-24
LOSS_BOUND_ULPS = 8
STEPS = 10


class MLP(nn.Module):
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
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def loss(self, x):
        return (self(x) - x[:, :3].sin()).pow(2).mean()


DEVICE = torch.device("cpu")


def mlp_input(step, micro, rank, seed):
    gen = torch.Generator().manual_seed(seed * 7919 + step * 101 + micro * 13 + rank)
    return torch.randn(6, 13, generator=gen).to(DEVICE)


DECODER = Config(vocab=97, dim=48, layers=3, heads=4, hidden=70, seq=12)


def decoder_input(step, micro, rank, seed):
    return batch(DECODER, 3, seed * 1000 + step * 10 + micro, rank, DEVICE)


class Capture:
    """Records every unshard's parameters (a wrapper on each group's wait_for_unshard)."""

    def __init__(self, groups, on_tide):
        self.records: list[tuple[str, list[torch.Tensor]]] = []
        self.problems: list[str] = []
        self.versions: dict[int, int] = {}
        self.abs_grads: dict[object, torch.Tensor] = {}
        self.hooked: set[int] = set()
        for name, group in groups:
            original = group.wait_for_unshard

            def wrapped(*a, _orig=original, _group=group, _name=name, **k):
                out = _orig(*a, **k)
                if _group.is_unsharded:
                    self._record(_name, _group, on_tide)
                return out

            group.wait_for_unshard = wrapped

    def _record(self, name, group, on_tide):
        values = []
        for fp in group.fsdp_params:
            param = fp.unsharded_param
            values.append(param.detach().clone())
            if on_tide:
                if param.storage_offset() != 0:
                    self.problems.append(f"{name}: unsharded param storage_offset {param.storage_offset()}")
                landing = fp.all_gather_outputs[0]
                if param.untyped_storage().data_ptr() != landing.untyped_storage().data_ptr():
                    self.problems.append(f"{name}: unsharded param is not a view of the landing")
                key = id(param)
                if self.versions.setdefault(key, param._version) != param._version:
                    self.problems.append(f"{name}: version counter moved {self.versions[key]} -> {param._version}")
            elif id(param) not in self.hooked:
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


def run_case(case, world, rank, seed):
    torch.manual_seed(seed)
    micro_batches = 2 if case == "c" else 1
    uses_decoder = case in ("b", "e")
    base = (Decoder(DECODER) if uses_decoder else MLP()).to(DEVICE)
    make_input = decoder_input if uses_decoder else mlp_input
    mesh = None
    if case == "d":
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(DEVICE.type, (2, world // 2), mesh_dim_names=("replicate", "shard"))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if case == "b" else MixedPrecisionPolicy()

    def shard(model):
        blocks = list(model.blocks)
        for i, block in enumerate(blocks):
            last = i == len(blocks) - 1
            fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=not (case == "e" and last))
        fully_shard(model, mesh=mesh, mp_policy=mp)
        return model

    stock = shard(copy.deepcopy(base))
    tide_model = shard(copy.deepcopy(base))
    enabled = tide.fsdp.enable(tide_model)
    failures = [f"group {r['group']} not on TIDE: {r['reason']}" for r in enabled if r["backend"] != "tide"]
    stock_groups = tide.fsdp._fsdp_groups(stock)
    tide_groups = tide.fsdp._fsdp_groups(tide_model)
    cap_s, cap_t = Capture(stock_groups, False), Capture(tide_groups, True)
    opt_s = torch.optim.AdamW(stock.parameters(), lr=1e-2)
    opt_t = torch.optim.AdamW(tide_model.parameters(), lr=1e-2)
    n_terms = world * micro_batches
    alpha = 1.0 / world
    stats = {"max_loss_diff": 0.0, "max_grad_ratio": 0.0, "max_drift": 0.0, "losses": []}
    # Every libnccl file this process has mapped: TIDE must use the one torch loaded.
    with open("/proc/self/maps") as maps:
        stats["nccl_libraries"] = sorted({line.split()[-1] for line in maps if "libnccl" in line})
    saved = None
    last_counts = None

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
        cap_s.records.clear(), cap_t.records.clear(), cap_s.abs_grads.clear()
        losses = []
        for micro in range(micro_batches):
            sync = not (case == "c" and step % 2 == 0 and micro == 0)
            stock.set_requires_gradient_sync(sync)
            tide_model.set_requires_gradient_sync(sync)
            x = make_input(step, micro, rank, seed)
            loss_s = stock.loss(x)
            loss_t = tide_model.loss(x)
            loss_s.backward()
            loss_t.backward()
            losses.append((loss_s.item(), loss_t.item()))
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
        for ls, lt in losses:
            diff = abs(ls - lt)
            stats["max_loss_diff"] = max(stats["max_loss_diff"], diff)
            if diff > LOSS_BOUND_ULPS * U * abs(ls) + 1e-30:
                failures.append(f"step {step}: loss {lt!r} vs stock {ls!r}")
        stats["losses"].append(losses[-1])

        # All-gathered parameters: every unshard, in the same order, bitwise equal.
        if len(cap_s.records) != len(cap_t.records):
            failures.append(f"step {step}: {len(cap_t.records)} unshards vs stock {len(cap_s.records)}")
        for (name, vs), (_, vt) in zip(cap_s.records, cap_t.records):
            for i, (a, b) in enumerate(zip(vs, vt)):
                if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a.view(-1).view(torch.uint8) if a.numel() else a, b.view(-1).view(torch.uint8) if b.numel() else b):
                    failures.append(f"step {step}: {name} param {i} all-gathered differently")
        failures.extend(f"step {step}: {p}" for p in cap_t.problems)
        cap_t.problems.clear()

        # Sharded fp32 gradients within the reassociation bound.
        for (name, gs), (_, gt) in zip(stock_groups, tide_groups):
            for fs, ft in zip(gs.fsdp_params, gt.fsdp_params):
                grad_s, grad_t = fs.sharded_param.grad, ft.sharded_param.grad
                if (grad_s is None) != (grad_t is None):
                    failures.append(f"step {step}: {name}: gradient present in one run only")
                    continue
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

        # report(): every group on TIDE and its counters moving.
        rows = tide.fsdp.report(tide_model)
        counts = [(r["all_gathers"], r["reduce_scatters"]) for r in rows]
        for r in rows:
            if r["backend"] != "tide":
                failures.append(f"step {step}: report: {r['group']} on {r['backend']}")
        if last_counts is not None:
            for r, (ag, rs), (ag0, rs0) in zip(rows, counts, last_counts):
                # At N = 1 FSDP2 skips its all-gather path (a local copy into the landing).
                if (ag <= ag0 and world > 1) or rs <= rs0:
                    failures.append(f"step {step}: report: {r['group']} ran no TIDE call ({ag0}->{ag}, {rs0}->{rs})")
        last_counts = counts

        opt_s.step(), opt_t.step()
        opt_s.zero_grad(), opt_t.zero_grad()
        with torch.no_grad():
            for ps, pt in zip(stock.parameters(), tide_model.parameters()):
                drift = (ps.to_local() - pt.to_local()).abs().max().item() if ps.to_local().numel() else 0.0
                stats["max_drift"] = max(stats["max_drift"], drift)
                pt.to_local().copy_(ps.to_local())
    final = tide.fsdp.report(tide_model)
    stats["report"] = final
    stats["failures"] = failures
    return stats


def main():
    out = sys.argv[1]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    seed = int(os.environ.get("TIDE_TEST_SEED", "1234"))
    cases = os.environ.get("TIDE_PARITY_CASES", "abcdef")
    global DEVICE
    if os.environ.get("TIDE_PARITY_DEVICE", "cpu") == "cuda":
        DEVICE = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(DEVICE)
        dist.init_process_group("nccl", device_id=DEVICE)
    else:
        dist.init_process_group("gloo")
    results = {}
    for case in cases:
        if case == "d" and (world < 4 or world % 2):
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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
