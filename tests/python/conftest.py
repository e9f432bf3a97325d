"""Which runtime the Python tests run against, shown in pytest's header."""

from __future__ import annotations

import os


def runtime_is_bound() -> bool:
    try:
        from tide import _C
    except ImportError:
        return False
    return hasattr(_C, "Communicator")


def pytest_configure(config):
    if not runtime_is_bound():
        # TEST SUPPORT ONLY: without the runtime's binding the adapter runs on the stand-in.
        os.environ.setdefault("TIDE_TEST_STANDIN", "1")


def pytest_report_header(config):
    if os.environ.get("TIDE_TEST_STANDIN") == "1":
        return "tide runtime: TEST-SUPPORT STAND-IN (tide._C has no Communicator binding)"
    return "tide runtime: tide._C.Communicator"
