"""One rank of the memory benchmark (bench/memory/run.py): a decoder under FSDP2, stock or with
TIDE (In-Place or Slot-Reuse), a few training steps, then what this rank held.

Launched as WORLD_SIZE processes by run.py (gloo on CPU, TIDE's host backend; or NCCL / the
nccl backend where the process sees a GPU). Writes one JSON line per rank to OUT.rank<r>:
  model_bytes     the unsharded model (fp32 masters)
  layer_params    one decoder layer's parameters (NS = 2 x this bytes: the layer in bf16)
  shard_bytes     this rank's sharded parameters
  arena_bytes     TIDE's arena on this rank (tide.fsdp.memory), 0 for stock
  bound_bytes     the Sec. 5.4 bound of the same groups, from `tide memory --groups`
  tide_memory_arena_bytes  the arena `tide memory` lays out for those groups (must equal
                  arena_bytes: the runtime and the CLI share one layout function)
  peak_bytes      CPU: max(private peak before the arena, private peak with it + arena_bytes)
                  (NOTE [honest peak on CPU] in tide/demo/peak.py), with its parts
                  peak_private_before_shared_bytes, peak_private_with_shared_bytes and
                  peak_private_bytes (the private peak over the run)
  peak_rss_bytes  ru_maxrss at the end (CPU; the arena's shared pages this rank touched, its
                  peers' included, are in it), peak_shmem_bytes, pss_bytes (at the end)
  cuda_max_allocated_bytes, cuda_reserved_bytes  (GPU)
  losses, slots (per group), copies_made (per group, by kind)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from tide.demo.model import Config, Decoder, batch
from tide.demo.peak import PeakMeter, load_libraries, peak_bytes
from tide.demo.teardown import end_distributed_run


def tide_memory(model, world: int, mode: str, cast: bool) -> dict:
    """`tide memory --groups` for the model's groups as TIDE placed them."""
    import tide.fsdp  # noqa: PLC0415
    from tide._fsdp_group import TideGroup  # noqa: PLC0415

    rows = {r["group"]: r for r in tide.fsdp.report(model)}
    shapes, slots = [], []
    for name, group in tide.fsdp._fsdp_groups(model):
        if rows[name]["backend"] != "tide":
            continue
        shapes.append(",".join(f"{d}x{k}" for d, k in TideGroup(group, name).shapes()))
        slots.append(str(rows[name]["slot"]))
    cli = shutil.which("tide") or "tide"
    args = [cli, "memory", "-M", "1", "-L", str(world), "--groups", ";".join(shapes), "--slots",
            ",".join(slots), "--mode", mode, "--ag-dtype", "bf16" if cast else "fp32",
            "--grad-dtype", "bf16" if cast else "fp32", "--json"] + (["--cast"] if cast else [])
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)["arena"]


def main() -> None:
    out, system, layers, dim, hidden, heads, steps, mp = sys.argv[1:9]
    kv_heads = int(sys.argv[9]) if len(sys.argv) > 9 else 0
    layers, dim, hidden, heads, steps = int(layers), int(dim), int(hidden), int(heads), int(steps)
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    # NCCL refuses two ranks on one GPU: where ranks share one, stock FSDP2 runs on gloo with the
    # same CUDA tensors, and TIDE picks its ipc backend (docs/runtime.md).
    shared_gpu = use_cuda and int(os.environ["WORLD_SIZE"]) > torch.cuda.device_count()
    dist.init_process_group("gloo" if device.type == "cpu" or shared_gpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    load_libraries()  # stock too, before the model (NOTE [honest peak on CPU])
    cfg = Config(vocab=512, dim=dim, layers=layers, heads=heads, hidden=hidden, seq=32,
                 kv_heads=kv_heads)
    torch.manual_seed(0)
    model = Decoder(cfg).to(device)
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    layer_params = sum(p.numel() for p in model.blocks[0].parameters())  # NS = 2 x this
    cast = mp == "bf16"
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if cast else MixedPrecisionPolicy()
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    shard_bytes = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    tide_on = system != "stock"
    if tide_on:
        import tide.fsdp  # noqa: PLC0415

        tide.fsdp.enable(model, mode=system)
    # MEMORY_OPTIMIZER: AdamW's implementation, "default" (torch's choice: foreach on CUDA,
    # for-loop on CPU), "foreach" or "fused" (torchtitan's default). NOTE [optimizer temporaries]
    # in ns_scale.py says why it matters to the comparison.
    impl = os.environ.get("MEMORY_OPTIMIZER", "default")
    kwargs = {} if impl == "default" else {impl: True}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **kwargs)
    if use_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    timeline = os.environ.get("TIDE_MEMORY_TIMELINE")  # a path: this rank's samples, for reading
    meter = PeakMeter(timeline=bool(timeline))
    for name, module in model.named_modules():  # samples at forward boundaries, besides the thread
        module.register_forward_pre_hook(lambda *_, n=name: meter.sample(f"fwd> {n}"))
        module.register_forward_hook(lambda *_, n=name: meter.sample(f"fwd< {n}"))
    losses = []
    for step in range(steps):
        loss = model.loss(batch(cfg, 2, step, rank, device))
        meter.sample(f"step {step} backward")
        loss.backward()
        meter.sample(f"step {step} optimizer")
        optimizer.step()
        meter.sample(f"step {step} zero_grad")
        optimizer.zero_grad()
        losses.append(loss.item())
    if use_cuda:
        torch.cuda.synchronize(device)
    peak = meter.stop()
    if timeline:
        with open(f"{timeline}.rank{rank}", "w") as f:
            json.dump(meter.timeline, f)
    result = {
        "rank": rank,
        "world": world,
        "device": torch.cuda.get_device_name(device) if use_cuda else "cpu",
        "system": system,
        "layers": layers,
        "dim": dim,
        "hidden": hidden,
        "precision": mp,
        "model_bytes": model_bytes,
        "layer_params": layer_params,
        "shard_bytes": shard_bytes,
        **peak,
        "peak_bytes": peak_bytes(peak, 0),
        "losses": losses,
        "arena_bytes": 0,
    }
    if use_cuda:
        result["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
        result["cuda_reserved_bytes"] = int(torch.cuda.memory_reserved(device))
    if tide_on:
        import tide.fsdp  # noqa: PLC0415

        memory = tide.fsdp.memory(model)
        rows = tide.fsdp.report(model)
        result["arena_bytes"] = memory["arena_bytes"]
        result["peak_bytes"] = peak_bytes(peak, memory["arena_bytes"])
        result["arena_in_torch_allocator"] = all(c.get("in_torch_allocator") for c in memory["communicators"])
        result["arena"] = memory["communicators"]
        result["slots"] = {r["group"]: r["slot"] for r in rows}
        result["groups_on_stock"] = {r["group"]: r["reason"] for r in rows if r["backend"] != "tide"}
        result["copies_made"] = {r["group"]: r["copies"] for r in rows if r["copies"]}
        laid_out = tide_memory(model, world, system, cast)
        result["bound_bytes"] = laid_out["bound_bytes"]
        result["tide_memory_arena_bytes"] = laid_out["arena_bytes"]
    with open(f"{out}.rank{rank}", "w") as f:
        f.write(json.dumps(result) + "\n")
    end_distributed_run()  # NOTE [gloo teardown]


if __name__ == "__main__":
    main()
