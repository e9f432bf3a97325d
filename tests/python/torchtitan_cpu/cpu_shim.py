"""Makes torchtitan 0.3.0's unedited trainer run on CPU processes (gloo), for the stock and the
TIDE runs alike: apply() patches torchtitan's and torch's objects in this process, before the
trainer is built; torchtitan's files stay as the wheel installed them. Every patch says what it
replaces and why. Nothing here changes what FSDP2 or TIDE compute: stock and TIDE runs share
these patches identically.
"""

from __future__ import annotations

import sys
import types

import torch

_APPLIED = False


def _cpu_device_module() -> types.ModuleType:
    """What torchtitan calls on its ``device_module`` (torch.cuda on GPUs), answered for the CPU.
    torch.cpu lacks the memory statistics and device properties that torchtitan's
    DeviceMemoryMonitor reads at startup and after every logged step; it gets zeros."""
    mod = types.ModuleType("torchtitan_cpu_device")
    mod.is_available = lambda: True
    mod.device_count = lambda: 1
    mod.current_device = lambda: 0
    mod.set_device = lambda device: None
    mod.synchronize = lambda device=None: None
    mod.empty_cache = lambda: None
    mod.reset_peak_memory_stats = lambda device=None: None
    mod.memory_stats = lambda device=None: {}
    mod.get_device_name = lambda device=None: "cpu"
    mod.get_device_properties = lambda device=None: types.SimpleNamespace(name="cpu", total_memory=1 << 40)
    mod.manual_seed = torch.manual_seed
    mod.manual_seed_all = torch.manual_seed
    mod.get_rng_state = torch.get_rng_state
    mod.set_rng_state = torch.set_rng_state
    return mod


def _patch_device() -> None:
    # torchtitan.tools.utils picks its device at import: torch's available accelerator, else
    # "cuda" (get_device_info). On a machine without GPUs that is a CUDA device torch cannot
    # use. Replace device_type/device_module by the CPU's, both in tools.utils and in every
    # torchtitan module that already copied them with ``from ... import device_type``; modules
    # imported later copy the patched values. Trainer.__init__ then puts its model on
    # torch.device("cpu", 0), init_distributed picks gloo (torch's backend for "cpu"), and the
    # CUDA graph wrapper falls back to eager (it checks device_type == "cuda").
    import torchtitan.tools.utils as utils  # noqa: PLC0415

    module = _cpu_device_module()
    for name, mod in list(sys.modules.items()):
        if name.startswith("torchtitan") and mod is not None:
            if getattr(mod, "device_type", None) == "cuda":
                mod.device_type = "cpu"
            if getattr(mod, "device_module", None) is torch.cuda:
                mod.device_module = module
    utils.device_type, utils.device_module = "cpu", module
    utils.get_device_info = lambda: ("cpu", module)
    # get_peak_flops runs lspci to name a GPU for the MFU figure; there is none.
    utils.get_peak_flops = lambda device_name: 1e12


def _dense_flex_attention(q, k, v, *, score_mod=None, block_mask=None, scale=None,
                          enable_gqa=False, return_aux=None, kernel_options=None):
    """flex_attention's result computed densely: the block mask's mask_mod evaluated on every
    (query, key) pair, then softmax(q k^T * scale + mask) v. Returns (out, aux) as
    flex_attention(return_aux=...) does, aux.lse where asked."""
    from torch.nn.attention.flex_attention import AuxOutput, create_mask  # noqa: PLC0415

    if score_mod is not None:
        raise NotImplementedError("torchtitan CPU shim: dense attention has no score_mod")
    B, H, L, E = q.shape
    S = k.shape[-2]
    if enable_gqa and k.shape[1] != H:
        k = k.repeat_interleave(H // k.shape[1], dim=1)
        v = v.repeat_interleave(H // v.shape[1], dim=1)
    scale = E ** -0.5 if scale is None else scale
    mask = None
    if block_mask is not None:
        mask = create_mask(block_mask.mask_mod, B, 1, L, S, device=q.device)
    want_lse = return_aux is not None and getattr(return_aux, "lse", False)
    if not want_lse:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        return out, AuxOutput(lse=None, max_scores=None)
    scores = (q.float() @ k.float().transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype)
    return out, AuxOutput(lse=lse, max_scores=None)


def _patch_attention() -> None:
    # The llama3 flavors, debugmodel included, use FlexAttention (model_registry's default
    # attn_backend "flex"), which torch runs on CPU only without backward. FlexAttention calls
    # its class-level _compiled_flex_attn (torch.compile(flex_attention)); it becomes the same
    # masked attention computed densely. The BlockMask torchtitan builds stays the carrier of
    # the mask (its mask_mod: causal within each packed document).
    from torchtitan.models.common import attention  # noqa: PLC0415
    from torch.nn.attention.flex_attention import create_block_mask  # noqa: PLC0415

    attention.FlexAttention._compiled_flex_attn = staticmethod(_dense_flex_attention)
    # torchtitan builds that BlockMask with torch.compile(create_block_mask), an inductor
    # compile per process (tens of seconds on two cores) for a mask the dense path only reads
    # mask_mod from: the eager create_block_mask builds the same BlockMask.
    attention._compiled_create_block_mask = create_block_mask


def _patch_reduction() -> None:
    # torchtitan sets every FSDP module's gradient divide factor to 1.0 (it divides the loss by
    # the global token count itself); FSDP2 then reduce-scatters with ReduceOp.PREMUL_SUM(1.0),
    # which gloo refuses. set_force_sum_reduction_for_comms(True) makes FSDP2 reduce with SUM
    # and multiply by the factor 1.0 (skipped for 1.0): the same sums. Done inside
    # torchtitan.distributed.fsdp.disable_fsdp_gradient_division, which apply_fsdp_to_decoder
    # calls after fully_shard, so stock and TIDE runs get it identically (TIDE reads the same
    # setting from FSDP2).
    from torch.distributed.fsdp import FSDPModule  # noqa: PLC0415
    from torchtitan.distributed import fsdp  # noqa: PLC0415

    original = fsdp.disable_fsdp_gradient_division

    def disable_fsdp_gradient_division(model):
        original(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)

    fsdp.disable_fsdp_gradient_division = disable_fsdp_gradient_division


def apply() -> None:
    """Applies every patch once, before torchtitan.train.main() builds the trainer."""
    global _APPLIED
    if _APPLIED:
        return
    _patch_device()
    _patch_attention()
    _patch_reduction()
    _APPLIED = True
