"""The seed of the Python tests and their workers: TIDE_TEST_SEED, parsed in this one place."""

from __future__ import annotations

import os
import random

VARIABLE = "TIDE_TEST_SEED"


def tide_test_seed(default: int | None = None, *, required: bool = False) -> int:
    """TIDE_TEST_SEED as an integer. Where it is unset: an error when ``required`` (a worker,
    whose test sets it), else ``default``, else a fresh random seed (print it, so that a failure
    can be rerun with it)."""
    value = os.environ.get(VARIABLE)
    if value is not None:
        return int(value)
    if required:
        raise KeyError(f"{VARIABLE} is not set (the test that starts this worker sets it)")
    return default if default is not None else random.randrange(1, 1 << 30)
