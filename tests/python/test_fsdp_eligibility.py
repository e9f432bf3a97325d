"""enable()'s decisions in one process (gloo, world 1): which groups fall back and why, the
version checks refusing an FSDP2 whose internals differ, and report() before enable()."""

from __future__ import annotations


import pytest
import torch
import torch.nn as nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Shard

import tide.fsdp
from tide import _fsdp_compat


pytestmark = pytest.mark.usefixtures("world_of_one")


def _model(blocks: int = 2, width: int = 9) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(blocks)])


def _by_group(report):
    return {row["group"]: row for row in report}


def test_report_before_enable_says_stock():
    model = _model()
    fully_shard(model)
    rows = tide.fsdp.report(model)
    assert [r["backend"] for r in rows] == ["stock"]
    assert "not called" in rows[0]["reason"]


def test_eligible_groups_go_on_tide():
    model = _model()
    for block in model:
        fully_shard(block)
    fully_shard(model)
    rows = _by_group(tide.fsdp.enable(model))
    assert set(rows) == {"0", "1"}  # the root holds no parameters of its own
    assert all(r["backend"] == "tide" and r["reason"] == "" for r in rows.values()), rows
    assert all(r["landing_bytes"] == 9 * 9 * 4 + 9 * 4 for r in rows.values())
    # NOTE [landing slots from the first iteration]: stock FSDP2 while TIDE traces the order,
    # no arena yet; from the second iteration on TIDE serves every group.
    assert not any(r["active"] for r in rows.values())
    assert tide.fsdp.memory(model)["arena_bytes"] == 0
    model(torch.randn(3, 9)).sum().backward()
    assert all(r["reduce_scatters"] == 0 for r in tide.fsdp.report(model))
    model(torch.randn(3, 9)).sum().backward()
    after = _by_group(tide.fsdp.report(model))
    assert all(r["active"] and r["reduce_scatters"] == 1 for r in after.values()), after
    # At N = 1 FSDP2 all-gathers nothing: no conflicts traced, both blocks share slot 0.
    assert [after[g]["slot"] for g in ("0", "1")] == [0, 0], after
    arena = tide.fsdp.memory(model)
    assert arena["arena_bytes"] > 0 and len(arena["communicators"]) == 1
    assert arena["arena_bytes"] == arena["communicators"][0]["arena_bytes"], after
    # The host backend runs every call on the calling thread: no CUDA graph launches, no
    # rail messages (one host), so no message path.
    assert all(r["all_gather_replays"] == 0 == r["reduce_scatter_replays"] for r in after.values())
    assert all(r["all_gather_graph_captures"] == 0 == r["reduce_scatter_graph_captures"]
               for r in after.values())
    assert all(r["message_path"] == "" and r["rail_messages"] == 0 for r in after.values())


def test_report_rows_on_tide_and_on_stock_have_the_same_fields():
    model = _model()
    for block in model:
        fully_shard(block)
    fully_shard(model)
    stock = tide.fsdp.report(model)  # before enable(): every row from the stock branch
    tide.fsdp.enable(model)
    for _ in range(2):
        model(torch.randn(3, 9)).sum().backward()
    on_tide = tide.fsdp.report(model)
    assert [r["backend"] for r in on_tide] == ["tide", "tide"], on_tide
    assert all(set(r) == set(stock[0]) for r in on_tide), (sorted(stock[0]), sorted(on_tide[0]))


def test_more_than_256_parameters_stay_stock():
    model = nn.Sequential(_model(blocks=129, width=2), nn.Linear(2, 2))
    fully_shard(model[0])
    fully_shard(model)
    rows = _by_group(tide.fsdp.enable(model))
    assert rows["0"]["backend"] == "stock"
    assert "258 parameters > 256" in rows["0"]["reason"]
    assert rows["<root>"]["backend"] == "tide"


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"offload_policy": CPUOffloadPolicy(pin_memory=False)}, "CPU offload"),
        ({"shard_placement_fn": lambda p: Shard(1) if p.ndim == 2 else Shard(0)}, "Shard(1)"),
        ({"mp_policy": MixedPrecisionPolicy(param_dtype=torch.float16)}, "param_dtype"),
    ],
)
def test_outside_the_contract_stays_stock(kwargs, reason):
    model = _model()
    fully_shard(model, **kwargs)
    rows = tide.fsdp.enable(model)
    assert rows[0]["backend"] == "stock" and reason in rows[0]["reason"], rows
    with pytest.raises(RuntimeError, match="strict"):
        other = _model()
        fully_shard(other, **kwargs)
        tide.fsdp.enable(other, strict=True)


def test_refusal_names_the_parameter_by_its_path():
    """Before the first forward FSDP2 has not named its parameters yet (``_param_fqn`` is set
    at the root's lazy init): the reason names the parameter by its path in the model."""
    model = nn.Sequential(_model(), nn.Linear(9, 9))
    fully_shard(model[0], shard_placement_fn=lambda p: Shard(1) if p.ndim == 2 else Shard(0))
    fully_shard(model)
    rows = _by_group(tide.fsdp.enable(model))
    assert rows["0"]["reason"] == "0.0.weight is sharded as Shard(1), not Shard(0)", rows["0"]
    assert rows["<root>"]["backend"] == "tide", rows["<root>"]


def test_subclass_without_extension_stays_stock():
    """A tensor-subclass parameter without fsdp_pre_all_gather: its shard has no address of its
    own (data_ptr() 0 for a wrapper subclass), so the group stays stock, naming the parameter."""
    from torch.testing._internal.two_tensor import TwoTensor

    model = _model(blocks=1)
    weight = model[0].weight.detach()
    model[0].weight = nn.Parameter(TwoTensor(weight, weight.clone()))
    fully_shard(model)
    rows = tide.fsdp.enable(model)
    assert rows[0]["backend"] == "stock", rows
    assert "0.weight is a TwoTensor without fsdp_pre_all_gather" in rows[0]["reason"], rows


def test_custom_hook_stays_stock():
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultAllGather

    class Custom(DefaultAllGather):
        pass

    model = _model()
    fully_shard(model)
    model._get_fsdp_state()._fsdp_param_group._all_gather_comm = Custom()
    rows = tide.fsdp.enable(model)
    assert rows[0]["backend"] == "stock" and "custom all-gather" in rows[0]["reason"]


def test_bad_arguments():
    model = _model()
    fully_shard(model)
    with pytest.raises(ValueError, match="mode"):
        tide.fsdp.enable(model, mode="sideways")
    with pytest.raises(ValueError, match="call fully_shard first"):
        tide.fsdp.enable(_model())
    tide.fsdp.enable(model)
    with pytest.raises(RuntimeError, match="already enabled.*close"):
        tide.fsdp.enable(model)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda m: tide.fsdp.enable(None), "module"),
        (lambda m: tide.fsdp.enable("model"), "module"),
        (lambda m: tide.fsdp.enable(m, mode=1), "mode"),
        (lambda m: tide.fsdp.enable(m, timeout_s="10"), "timeout_s"),
        (lambda m: tide.fsdp.enable(m, strict="yes"), "strict"),
        (lambda m: tide.fsdp.enable(m, ring=None), "ring"),
        (lambda m: tide.fsdp.report(None), "module"),
        (lambda m: tide.fsdp.memory(3), "module"),
        (lambda m: tide.fsdp.close([]), "module"),
    ],
)
def test_wrong_types_name_the_argument(call, argument):
    model = _model()
    fully_shard(model)
    with pytest.raises(TypeError, match=rf"\b{argument} must be"):
        call(model)
    assert tide.fsdp.report(model)[0]["reason"] == "tide.fsdp.enable was not called"  # untouched


def test_parameter_free_model_gets_an_empty_report():
    model = nn.Sequential(nn.ReLU(), nn.Identity())
    fully_shard(model)
    assert tide.fsdp.enable(model) == []
    assert tide.fsdp.report(model) == []
    model(torch.randn(2, 3)).sum()  # and it runs


def test_version_check_refuses_other_internals(monkeypatch):
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as param_group

    def foreach_reduce(fsdp_params, unsharded_grads, something_new):  # a future signature
        raise AssertionError("not called")

    # Earlier tests replaced the stock functions: the checks read the stock ones.
    if "foreach_reduce" in tide._fsdp_patches.stock_calls():
        monkeypatch.setitem(tide._fsdp_patches._STOCK_CALLS, "foreach_reduce", foreach_reduce)
    else:
        monkeypatch.setattr(param_group, "foreach_reduce", foreach_reduce)
    with pytest.raises(_fsdp_compat.UnsupportedTorch, match="foreach_reduce"):
        _fsdp_compat.check(tide._fsdp_patches.stock_calls())
    model = _model()
    fully_shard(model)
    with pytest.raises(tide.fsdp.UnsupportedTorch):
        tide.fsdp.enable(model, strict=True)
    assert tide.fsdp.report(model)[0]["reason"] == "tide.fsdp.enable was not called"  # untouched
    # Without strict, the job still trains: every group on stock FSDP2, saying why.
    rows = tide.fsdp.enable(model)
    assert rows[0]["backend"] == "stock" and "foreach_reduce" in rows[0]["reason"], rows
    assert "internals" in rows[0]["reason"], rows


def test_version_check_accepts_this_torch():
    layout = _fsdp_compat.check(tide._fsdp_patches.stock_calls())
    assert layout.name in {"torch 2.11", "torch 2.12+"}
