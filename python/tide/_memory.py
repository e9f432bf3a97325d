"""Tensors over memory that TIDE owns, built from raw addresses.

The runtime hands out integer addresses (its landing zones live in TIDE's arena). Torch
tensors over them are made here without torch's C++ ABI: a CPU address becomes a buffer
through ctypes, a CUDA address through ``__cuda_array_interface__``. Each tensor gets its
own storage rooted at the address, so ``storage_offset() == 0`` and it has its own version
counter (see NOTE [zero-offset landing views] in ``_fsdp_group.py``).
"""

from __future__ import annotations

import ctypes

import torch

_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "u8": torch.uint8}
_NAMES = {v: k for k, v in _DTYPES.items()}
# The runtime's 1-byte all-gather item (DType::kU8): the least landing a registration can ask
# for where its all-gather never runs.
LANDING_ONLY = "u8"


def dtype_from_name(name: str) -> torch.dtype:
    return _DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str | None:
    """TIDE's name for a torch dtype, or None where TIDE does not carry it."""
    return _NAMES.get(dtype)


class _CudaBytes:
    """An object exposing a device address as a byte array (CUDA array interface v3)."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
            "strides": None,
        }


def tensor_at(address: int, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 1-D tensor of ``numel`` elements at ``address``; it does not own the memory."""
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if nbytes == 0:
        return torch.empty(0, dtype=dtype, device=device)
    if address == 0:
        raise ValueError("tensor_at: null address")
    if device.type == "cpu":
        raw = (ctypes.c_uint8 * nbytes).from_address(address)
        as_bytes = torch.frombuffer(raw, dtype=torch.uint8, count=nbytes)
    elif device.type == "cuda":
        with torch.cuda.device(device):
            as_bytes = torch.as_tensor(_CudaBytes(address, nbytes), device=device)
    else:
        raise ValueError(f"tensor_at: unsupported device {device}")
    return as_bytes.view(dtype)
