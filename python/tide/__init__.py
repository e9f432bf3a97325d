"""TIDE: layout-aware, zero-copy FSDP collectives (``tide.fsdp.enable(model)``)."""

from __future__ import annotations

try:
    from ._version import __version__
except ImportError:  # a source tree that was not built
    from importlib.metadata import PackageNotFoundError, version

    try:
        __version__ = version("tide")
    except PackageNotFoundError:
        __version__ = "0+unknown"

__all__ = ["__version__"]
