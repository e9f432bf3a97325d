"""One rank of a training-loop scenario (test_fsdp_training_loop.py launches every rank).

    python fsdp_loop_worker.py SCENARIO OUT_DIR      (RANK, WORLD_SIZE, MASTER_* set)

A stock FSDP2 decoder and a TIDE one of the same seeded weights train side by side on the same
per-rank batches (seed TIDE_TEST_SEED), on gloo with TIDE's host backend; after every optimizer
step TIDE's sharded parameters are set to stock's, so each step starts from the same point:
the losses are then bitwise equal, and the gradients equal within reassociation. Scenarios,
each a defect a user's loop met:
  accumulation  bf16 parameters, fp32 reduce, 2 micro-batches with no-sync on the first
  eval          the last block keeps its parameters after forward; an evaluation forward
                under no_grad every second step
  reshard       from the third step on, 2 micro-batches per step, the parameters kept
                unsharded after the first one's backward (set_reshard_after_backward(False))
  unshard       an explicit unshard() of the first block after an evaluation forward
  prefetched    every module unsharded (async) before enable(ring=False), then 3 micro-batches
                with no-sync on the first two
  frozen        every block's norm weights frozen
  custom        set_custom_all_gather on one block after the first TIDE step
  tools         a step under CommDebugMode and one under torch.profiler, both runs
  compiled      one step under compiled autograd (torch.compile), then eager again
  stages        4 ranks as two pipeline stages (ranks 0-1: three blocks; 2-3: one block)
  abort         rank 1 aborts TIDE's communicator in step 4's backward; afterwards a torch
                process group TIDE does not serve still runs a collective
Each rank writes OUT_DIR/rank<r>.json: losses, failures found on the rank, report() rows.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

import tide.fsdp
from tide.demo.model import Config, Decoder, batch
from tide.demo.teardown import end_distributed_run
from seed import tide_test_seed

CFG = Config(vocab=64, dim=32, layers=3, heads=2, hidden=52, seq=8)
STEPS = 6


def build(seed: int, *, mp: bool = False, last_keeps: bool = False, layers: int = 3, mesh=None):
    torch.manual_seed(seed)
    model = Decoder(Config(**{**CFG.__dict__, "layers": layers}))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mp else MixedPrecisionPolicy()
    for i, block in enumerate(model.blocks):
        keep = last_keeps and i == len(model.blocks) - 1
        fully_shard(block, mp_policy=policy, reshard_after_forward=not keep, mesh=mesh)
    fully_shard(model, mp_policy=policy, mesh=mesh)
    return model


def _sharded(opt) -> list:
    """The sharded parameters (DTensors): the optimizer's, whatever the module holds now."""
    return [p for group in opt.param_groups for p in group["params"]]


class Pair:
    """A stock model and a TIDE model, stepped alike."""

    def __init__(self, seed: int, rank: int, **kwargs) -> None:
        self.seed, self.rank = seed, rank
        self.stock, self.tide = build(seed, **kwargs), build(seed, **kwargs)
        self.opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (self.stock, self.tide)]
        self.failures: list[str] = []
        self.losses: list[list[float]] = []
        self.step_index = 0

    def tokens(self, micro: int = 0) -> torch.Tensor:
        return batch(CFG, 2, self.seed % 1000 + 7 * self.step_index + micro, self.rank, torch.device("cpu"))

    def step(self, micro_batches: int = 1, before=None, keep_unsharded: bool = False, wrap=None) -> None:
        """One optimizer step of both models; ``keep_unsharded``: FSDP2 keeps the parameters
        unsharded after every backward but the last (set_reshard_after_backward, as for
        gradient accumulation)."""
        losses, grads = [], []
        for model, opt in zip((self.stock, self.tide), self.opts):
            if before is not None:
                before(model)
            total = 0.0
            for micro in range(micro_batches):
                model.set_requires_gradient_sync(micro == micro_batches - 1)
                if keep_unsharded:
                    model.set_reshard_after_backward(micro == micro_batches - 1)
                loss = (wrap(model.loss) if wrap else model.loss)(self.tokens(micro))
                loss.backward()
                total += loss.item()
            losses.append(total)
            grads.append([p.grad.to_local().clone() if p.grad is not None else None for p in _sharded(opt)])
            opt.step()
            opt.zero_grad()
        if losses[0] != losses[1]:
            self.failures.append(f"step {self.step_index}: loss {losses[1]!r} != stock {losses[0]!r}")
        for p, (gs, gt) in enumerate(zip(*grads)):
            if (gs is None) != (gt is None):
                self.failures.append(f"step {self.step_index}: gradient {p} present in one run only")
            elif gs is not None and not torch.allclose(gs, gt, rtol=1e-4, atol=1e-6):
                worst = (gs - gt).abs().max().item()
                self.failures.append(f"step {self.step_index}: gradient {p} off stock's by {worst:.3g}")
        self.losses.append(losses)
        with torch.no_grad():
            for mine, theirs in zip(_sharded(self.opts[1]), _sharded(self.opts[0])):
                mine.copy_(theirs)
        self.step_index += 1

    def evaluate(self) -> None:
        with torch.no_grad():
            outs = [m.loss(self.tokens(99)).item() for m in (self.stock, self.tide)]
        if outs[0] != outs[1]:
            self.failures.append(f"step {self.step_index}: eval loss {outs[1]!r} != stock {outs[0]!r}")


def only_traced_stock_calls(rows, failures: list[str]) -> None:
    """Every call after the traced first iteration ran on TIDE (NOTE [stock calls are counted
    by reason]): no group is on stock, and no reason but the trace's was counted."""
    from tide._fsdp_group import TRACED  # noqa: PLC0415

    for row in rows:
        if row["backend"] != "tide":
            failures.append(f"{row['group']} on stock: {row['reason']}")
        others = {k: v for k, v in row["stock_reasons"].items() if k != TRACED}
        if others:
            failures.append(f"{row['group']} ran stock calls: {others}")
        if row["all_gathers"] == 0 or row["reduce_scatters"] == 0:
            failures.append(f"{row['group']}: TIDE served no all-gather or no reduce-scatter")


def scenario_accumulation(pair: Pair, out: dict) -> None:
    tide.fsdp.enable(pair.tide)
    for _ in range(STEPS):
        pair.step(micro_batches=2)
    rows = tide.fsdp.report(pair.tide)
    only_traced_stock_calls(rows, pair.failures)
    for row in rows:
        if not row["accumulation"].startswith("tide-rs"):
            pair.failures.append(f"{row['group']}: accumulation {row['accumulation']!r}")
        if row["reduce_scatters"] != STEPS - 1:
            pair.failures.append(f"{row['group']}: {row['reduce_scatters']} reduce-scatters on TIDE, want {STEPS - 1}")


def scenario_eval(pair: Pair, out: dict) -> None:
    tide.fsdp.enable(pair.tide)
    for step in range(STEPS):
        pair.step()
        if step % 2 == 0:
            pair.evaluate()
    rows = tide.fsdp.report(pair.tide)
    only_traced_stock_calls(rows, pair.failures)
    out["evictions"] = sum(r["evictions"] for r in rows)


def scenario_reshard(pair: Pair, out: dict) -> None:
    tide.fsdp.enable(pair.tide)
    for step in range(STEPS):
        pair.step(micro_batches=2, keep_unsharded=step >= 2)
    only_traced_stock_calls(tide.fsdp.report(pair.tide), pair.failures)


def scenario_unshard(pair: Pair, out: dict) -> None:
    tide.fsdp.enable(pair.tide)
    for _ in range(2):
        pair.step()
    pair.evaluate()  # the last block stays unsharded in its slot, shared with the first block's
    states = []
    for model in (pair.stock, pair.tide):
        handle = model.blocks[0].unshard(async_op=True)
        if handle is not None:
            handle.wait()
        states.append(model.blocks[0]._get_fsdp_state()._fsdp_param_group.is_unsharded)
        model.blocks[0].reshard()
    if states != [True, True]:
        pair.failures.append(f"after unshard(): unsharded (stock, tide) = {states}")
    for _ in range(2):
        pair.step()
    only_traced_stock_calls(tide.fsdp.report(pair.tide), pair.failures)


def scenario_prefetched(pair: Pair, out: dict) -> None:
    for model in (pair.stock, pair.tide):
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.unshard(async_op=True)
    tide.fsdp.enable(pair.tide, ring=False)  # after the unshards, before the first forward
    for _ in range(3):
        pair.step(micro_batches=3)
    # The first micro-batch's forward read stock's parameters: until that iteration ends, each
    # group's all-gathers are stock (its backward's, where it resharded after forward), counted.
    for row in tide.fsdp.report(pair.tide):
        stock = {k: v for k, v in row["stock_reasons"].items() if not k.startswith("unsharded by stock FSDP2 before")}
        if row["backend"] != "tide" or stock or sum(row["stock_reasons"].values()) > 1:
            pair.failures.append(f"{row['group']}: {row['backend']} {row['reason']!r}, stock calls {row['stock_reasons']}")
        if row["all_gathers"] < 3 or row["reduce_scatters"] != 3:
            pair.failures.append(f"{row['group']}: {row['all_gathers']} all-gathers and {row['reduce_scatters']} reduce-scatters on TIDE")


def scenario_frozen(pair: Pair, out: dict) -> None:
    for model in (pair.stock, pair.tide):
        for block in model.blocks:
            block.attn_norm.weight.requires_grad_(False)
            block.mlp_norm.weight.requires_grad_(False)
    tide.fsdp.enable(pair.tide)
    made = []
    for _ in range(STEPS):
        pair.step()
        made.append(sum(r["copies"].get("zero_gradients", {}).get("bytes", 0) for r in tide.fsdp.report(pair.tide)))
    out["zero_gradient_bytes"] = made
    if len(set(made[1:])) != 1:
        pair.failures.append(f"zero gradients made again every step: {made}")
    only_traced_stock_calls(tide.fsdp.report(pair.tide), pair.failures)


def scenario_custom(pair: Pair, out: dict) -> None:
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather  # noqa: PLC0415

    class CountingAllGather(DefaultAllGather):
        calls = 0

        def __call__(self, *args, **kwargs):
            CountingAllGather.calls += 1
            return super().__call__(*args, **kwargs)

    tide.fsdp.enable(pair.tide)
    for _ in range(2):
        pair.step()
    for model in (pair.stock, pair.tide):
        model.blocks[1].set_custom_all_gather(CountingAllGather())
    before = CountingAllGather.calls
    for _ in range(2):
        pair.step()
    out["custom_calls"] = CountingAllGather.calls - before
    rows = {r["group"]: r for r in tide.fsdp.report(pair.tide)}
    if CountingAllGather.calls - before < 4:  # stock's and TIDE's model, forward and backward
        pair.failures.append(f"the custom all-gather ran {CountingAllGather.calls - before} times")
    reasons = rows["blocks.1"]["stock_reasons"]
    if not any("custom all-gather" in r for r in reasons):
        pair.failures.append(f"blocks.1's stock calls do not name the custom all-gather: {reasons}")


def scenario_tools(pair: Pair, out: dict) -> None:
    from torch.distributed.tensor.debug import CommDebugMode  # noqa: PLC0415

    tide.fsdp.enable(pair.tide)
    # The traced iteration, the one whose first forward creates the arena (TIDE's agreement
    # collectives there must stay out of the count), and a served one.
    out["comm_counts"] = []
    for iteration in range(3):
        counts = []
        for model in (pair.stock, pair.tide):
            with CommDebugMode() as mode:
                model.loss(pair.tokens()).backward()
            counts.append({str(k): v for k, v in mode.get_comm_counts().items()})
            model.zero_grad()
        out["comm_counts"].append(counts)
        if counts[0] != counts[1]:
            pair.failures.append(f"iteration {iteration}: CommDebugMode counts stock {counts[0]} and TIDE {counts[1]}")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        pair.tide.loss(pair.tokens()).backward()
    pair.tide.zero_grad()
    names = sorted({e.name for e in prof.events() if e.name.startswith("tide::")})
    out["profiler_ranges"] = names
    for kind in ("tide::all_gather blocks.0 ", "tide::reduce_scatter blocks.0 "):
        if not any(n.startswith(kind) and n.endswith("B") for n in names):
            pair.failures.append(f"no profiler range {kind!r}...: {names}")


def scenario_compiled(pair: Pair, out: dict) -> None:
    """Compiled autograd traces FSDP2's reduce-scatters: those calls run stock, counted with
    the reason, and the losses still match; once it is off again, TIDE serves every call."""
    tide.fsdp.enable(pair.tide)
    for _ in range(2):
        pair.step()
    torch._dynamo.config.compiled_autograd = True
    try:
        pair.step(wrap=torch.compile)
    finally:
        torch._dynamo.config.compiled_autograd = False
    before = {r["group"]: r["reduce_scatters"] for r in tide.fsdp.report(pair.tide)}
    pair.step()
    rows = tide.fsdp.report(pair.tide)
    for row in rows:
        if not any("compiled autograd" in r for r in row["stock_reasons"]):
            pair.failures.append(f"{row['group']}: no call counted under compiled autograd: {row['stock_reasons']}")
        if row["reduce_scatters"] != before[row["group"]] + 1:
            pair.failures.append(f"{row['group']}: not back on TIDE after compiled autograd")


def scenario_stages(pair: Pair | None, out: dict) -> None:
    rank = dist.get_rank()
    from torch.distributed.device_mesh import init_device_mesh  # noqa: PLC0415

    meshes = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
    mesh = meshes["dp"]
    stage = rank // 2
    seed = tide_test_seed(required=True)
    pair = Pair(seed + stage, rank % 2, layers=3 if stage == 0 else 1, mesh=mesh)
    rows = tide.fsdp.enable(pair.tide)
    out["enable_rows"] = rows
    for _ in range(3):
        pair.step()
    only_traced_stock_calls(tide.fsdp.report(pair.tide), pair.failures)
    out["stage_pair"] = pair


def scenario_abort(pair: Pair, out: dict) -> None:
    other = dist.new_group(backend="gloo")  # e.g. the group a DCP save uses
    tide.fsdp.enable(pair.tide, timeout_s=20.0)
    for _ in range(3):
        pair.step()
    if pair.rank == 1:
        comm = getattr(pair.tide, tide.fsdp._ATTRIBUTE).communicators[0]
        pair.tide.blocks[1].register_full_backward_pre_hook(lambda *_: comm.abort("injected on rank 1"))
    try:
        pair.tide.loss(pair.tokens()).backward()
        dist.barrier()
        out["raised"] = ""
    except tide.fsdp.CommunicationError as e:
        out["raised"] = str(e)
    except Exception as e:  # noqa: BLE001
        out["raised"] = f"{type(e).__name__}: {e}"
    value = torch.ones(1)
    try:
        dist.all_reduce(value, group=other)
        out["other_group"] = float(value.item())
    except Exception as e:  # noqa: BLE001
        out["other_group"] = f"{type(e).__name__}: {e}"


def main() -> int:
    scenario, out_dir = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    seed = tide_test_seed(required=True)
    out: dict = {"failures": []}
    pair = None
    try:
        if scenario == "stages":
            scenario_stages(None, out)
            pair = out.pop("stage_pair")
        else:
            kwargs = {"mp": scenario in ("accumulation", "eval", "unshard", "tools"),
                      "last_keeps": scenario in ("eval", "unshard")}
            pair = Pair(seed, rank, **kwargs)
            globals()[f"scenario_{scenario}"](pair, out)
        if pair is not None:
            out["failures"] += pair.failures
            out["losses"] = pair.losses
            out["report"] = tide.fsdp.report(pair.tide)
    except Exception:  # noqa: BLE001
        out["failures"].append(traceback.format_exc())
    (out_dir / f"rank{rank}.json").write_text(json.dumps(out, default=str))
    if scenario == "abort":
        os._exit(0)  # the communicator and torch's groups it served are aborted
    end_distributed_run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
