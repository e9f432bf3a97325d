import faulthandler, os, sys, torch, torch.distributed as dist, torch.nn as nn
import torch.multiprocessing as mp
faulthandler.enable(all_threads=True)
def pre(self, mesh): return (self.a, self.b), None
def post(self, outs, metadata, param_dtype, *, out=None):
    from torch.testing._internal.two_tensor import TwoTensor
    a, b = outs
    if out is not None:
        assert a.untyped_storage().data_ptr() == out.a.untyped_storage().data_ptr()
        return
    return TwoTensor(a, b).to(param_dtype), (a, b)
def main(rank, mode):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29612")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    import tide.fsdp
    from torch.distributed.fsdp import fully_shard
    from torch.testing._internal.two_tensor import TwoTensor
    TwoTensor.fsdp_pre_all_gather = pre; TwoTensor.fsdp_post_all_gather = post
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(8, 32, bias=False), nn.ReLU(), nn.Linear(32, 8, bias=False)) for _ in range(3)])
    for m in model:
        for lin in (m[0], m[2]):
            lin.weight = nn.Parameter(TwoTensor(lin.weight, lin.weight.clone()))
        fully_shard(m, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=True)
    if mode == "tide": tide.fsdp.enable(model)
    if mode == "tide-patch":
        tide.fsdp.enable(model)
        import tide._fsdp_calls as c
        orig = c._reduce_refusal
        def refusal(group, a):
            if any(type(g) is not torch.Tensor for g in a["unsharded_grads"]):
                return "a gradient is a tensor subclass"
            return orig(group, a)
        c._reduce_refusal = refusal
    inp = torch.randn(2, 8)
    for i in range(4):
        loss = model(inp).sum()
        print(rank, "iter", i, "fwd ok; grad types:", flush=True)
        loss.backward()
        print(rank, "iter", i, "bwd ok", {type(p.grad).__name__ for p in model.parameters()}, flush=True)
    if rank == 0:
        for row in tide.fsdp.report(model):
            print({k: row.get(k) for k in ("backend", "reason", "all_gathers", "reduce_scatters", "stock_reasons", "all_gather_dtypes", "all_gather_bytes")})
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(main, args=(sys.argv[1],), nprocs=2)
