# Local experiment only (not in the repo): the proposed fix for the TIDE-mode segfault of
# test_all_gather_extensions_train_parity, applied from outside python/tide: a gradient that
# is a tensor subclass (TwoTensor: data_ptr() == 0) makes the reduce-scatter run stock FSDP2.
import os
if os.environ.get("TIDE_UPSTREAM_MODE", "").startswith("tide") and os.environ.get("TIDE_EXT_FIX") == "1":
    import torch
    import tide._fsdp_calls as _c
    _orig = _c._reduce_refusal
    def _refusal(group, a):
        if any(type(g) is not torch.Tensor for g in a["unsharded_grads"]):
            return "a gradient is a tensor subclass (TIDE-RS reads dense storage)"
        return _orig(group, a)
    _c._reduce_refusal = _refusal
# Keep the report's all_gather_dtypes / all_gather_bytes in records.jsonl (the harness's
# sitecustomize keeps a fixed list of keys; read at each dump, so extending it here works).
try:
    import sitecustomize as _sc
    if hasattr(_sc, "_KEEP"):
        _sc._KEEP = tuple(_sc._KEEP) + ("all_gather_dtypes", "all_gather_bytes", "all_gather_lane")
except Exception:
    pass
