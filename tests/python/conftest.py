"""The Python tests run against the installed package (pip install .; scripts/test.sh does)."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture(scope="module")
def world_of_one():
    """torch.distributed with one gloo process, for a test module's FSDP2 models."""
    import torch.distributed as dist  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def pytest_report_header(config):
    import tide

    return f"tide {tide.__version__} from {tide.__file__}"
