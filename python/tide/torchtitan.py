"""TIDE for torchtitan, as one flag: an ``--override.imports`` entry puts every FSDP2 parameter
group of the model that torchtitan's trainer builds on TIDE. torchtitan's files stay as they are.

    torchrun --nproc_per_node 8 -m torchtitan.train --module llama3 --config llama3_8b \\
        --override.imports tide.torchtitan.enable

    # with tide.fsdp.enable's keyword arguments (a JSON object after '=', one shell token):
    ... --override.imports 'tide.torchtitan.enable={"mode": "slot-reuse"}'

Accepted keyword arguments: ``mode`` ("in-place", the default, or "slot-reuse"), ``strict``
(raise where a group would stay on stock FSDP2) and ``timeout_s``, as tide.fsdp.enable takes
them. torchtitan >= 0.3 (its ``torchtitan.config.override`` mechanism); torchtitan is not needed
to import this module: without it, ``enable`` is a plain function that says so.

How it reaches the model. torchtitan's overrides swap a ``Configurable.Config`` in the trainer's
config tree before anything is built; they cannot wrap the model's parallelize function (a
plain callable of the ModelSpec, not a Configurable), and the model's own Config builds it on
the meta device, before fully_shard. The first component the Trainer builds from the parallel
model is the optimizer: ``config.optimizer.build(model_parts=...)``, after parallelize_fn (TP,
activation checkpointing, compile, fully_shard), to_empty and init_weights, and before the
checkpoint load and the first forward, which is where tide.fsdp.enable must run. So ``enable``
claims the trainer's ``OptimizersContainer.Config`` (and subclasses) and returns a subclass of
that same Config, with the same fields, whose build() calls ``tide.fsdp.enable(part)`` on each
model part (every rank, each pipeline stage's part) and then builds the optimizers unchanged.
Another override of the optimizer config conflicts with this one (torchtitan refuses two
overrides claiming one node).

Logged at INFO on the ``tide.fsdp`` logger, on rank 0: after enable, how many groups are on
TIDE of how many, with the reasons of those on stock FSDP2; after the second optimizer step
(the first served by TIDE: the first iteration runs on stock FSDP2 while TIDE records the
order of unshards), the same with the collectives TIDE made and the stock calls by reason.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("tide.fsdp")

__all__ = ["enable", "summary"]

_ENABLE_KWARGS = ("mode", "strict", "timeout_s")
_CLASSES: dict[type, type] = {}


def summary(rows: list[dict]) -> str:
    """One line from tide.fsdp.report rows: groups on TIDE of all, the reasons of the others,
    the collectives TIDE made and the stock calls by reason."""
    on = sum(r["backend"] == "tide" for r in rows)
    text = f"{on} of {len(rows)} FSDP groups on TIDE"
    reasons = Counter(r["reason"] for r in rows if r["backend"] != "tide")
    if reasons:
        text += "; on stock FSDP2: " + "; ".join(f"{n} x {why}" for why, n in reasons.items())
    gathers = sum(r.get("all_gathers", 0) for r in rows)
    scatters = sum(r.get("reduce_scatters", 0) for r in rows)
    if gathers or scatters:
        text += f"; TIDE all-gathers {gathers}, reduce-scatters {scatters}"
    stock = Counter()
    for r in rows:
        stock.update(r.get("stock_reasons") or {})
    if stock:
        text += "; stock calls: " + "; ".join(f"{n} x {why}" for why, n in stock.items())
    return text


def _log(message: str) -> None:
    import torch.distributed as dist  # noqa: PLC0415

    if not dist.is_initialized() or dist.get_rank() == 0:
        log.info(message)


def _enable_parts(model_parts, options: dict[str, Any]) -> dict:
    """tide.fsdp.enable on every part, logged; returns the state of the after-step log."""
    import tide.fsdp  # noqa: PLC0415

    rows = []
    for part in model_parts:
        rows += tide.fsdp.enable(part, **options)
    _log(f"tide.torchtitan: enabled ({options.get('mode', 'in-place')}): {summary(rows)}")
    parts = list(model_parts)
    state = {"steps": 0, "handles": []}

    def after_step(*_args, **_kwargs) -> None:
        state["steps"] += 1
        if state["steps"] == 2:
            rows = [row for part in parts for row in tide.fsdp.report(part)]
            _log(f"tide.torchtitan: after the second optimizer step: {summary(rows)}")
            for handle in state["handles"]:
                handle.remove()

    state["after_step"] = after_step
    return state


def _watch_steps(container, state) -> None:
    """Logs the report after the second step: a post-step hook on the container's first
    optimizer (every optimizer of it steps once per training step)."""
    optimizers = getattr(container, "optimizers", None) or []
    if optimizers and hasattr(optimizers[0], "register_step_post_hook"):
        state["handles"].append(optimizers[0].register_step_post_hook(state["after_step"]))


def _tide_config_class(base: type) -> type:
    """A subclass of the optimizer container's Config ``base``, with tide_options, whose build()
    enables TIDE on the model parts first. Made once per base class."""
    cls = _CLASSES.get(base)
    if cls is not None:
        return cls

    def build(self, **kwargs):
        model_parts = kwargs.get("model_parts")
        state = None
        if model_parts is not None:
            state = _enable_parts(model_parts, dict(self.tide_options))
        else:
            log.warning("tide.torchtitan: the optimizer was built without model_parts; TIDE not enabled")
        container = base.build(self, **kwargs)  # explicit base: slots dataclasses break super()
        if state is not None:
            _watch_steps(container, state)
        return container

    namespace = {
        "__module__": __name__,
        "__qualname__": f"Tide{base.__qualname__.replace('.', '')}",
        "__annotations__": {"tide_options": dict},
        "tide_options": field(default_factory=dict),
        "build": build,
        "__doc__": f"{base.__qualname__} that puts the model parts on TIDE before it builds.",
    }
    cls = dataclass(kw_only=True, slots=True)(type(namespace["__qualname__"], (base,), namespace))
    _CLASSES[base] = cls
    return cls


def _factory(cfg, **options):
    unknown = set(options) - set(_ENABLE_KWARGS)
    if unknown:
        raise TypeError(f"tide.torchtitan.enable: unknown arguments {sorted(unknown)}; "
                        f"accepted: {list(_ENABLE_KWARGS)}")
    from torchtitan.config.override import derive  # noqa: PLC0415

    return derive(cfg, _tide_config_class(type(cfg)), tide_options=dict(options))


try:
    from torchtitan.components.optimizer import OptimizersContainer as _Optimizers
    from torchtitan.config.override import override as _override
except ImportError:  # torchtitan is optional: the flag needs it, importing tide.torchtitan does not
    _Optimizers = None


if _Optimizers is not None:

    @_override(target=_Optimizers.Config,
               description="TIDE: tide.fsdp.enable on every model part before the optimizer is built")
    def enable(cfg, **options):
        """torchtitan override factory (``--override.imports tide.torchtitan.enable``): the
        optimizer container's Config ``cfg`` as a subclass that calls tide.fsdp.enable(part,
        **options) on every model part before it builds."""
        return _factory(cfg, **options)

else:

    def enable(cfg, **options):
        """torchtitan override factory; torchtitan is not installed here."""
        raise ImportError("tide.torchtitan.enable is a torchtitan override: install torchtitan>=0.3")
