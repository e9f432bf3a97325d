"""The installed package: its version, its native module and the `tide` CLI on the PATH."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tide

ROOT = Path(__file__).resolve().parents[2]


def test_version_matches_cmake_project():
    project = re.search(r"project\(tide VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert project, "no project() version in CMakeLists.txt"
    assert tide.__version__ == project.group(1)
    out = subprocess.run([sys.executable, "-c", "import tide; print(tide.__version__)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == project.group(1)


def test_native_module_loads():
    from tide import _C

    assert _C.__version__ == tide.__version__


def test_cli_on_path():
    cli = shutil.which("tide", path=str(Path(sys.executable).parent)) or shutil.which("tide")
    assert cli, "the tide CLI is not on the PATH after pip install"
    result = subprocess.run([cli, "plan", "--model", "llama3.1-70b", "--nodes", "2",
                             "--gpus-per-node", "4", "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["topology"] == {"nodes": 2, "gpus_per_node": 4, "world": 8}
    assert plan["layout"]["params"][0]["rows_per_rank"] == 8192 // 8


def test_cli_rejects_bad_input():
    cli = shutil.which("tide", path=str(Path(sys.executable).parent)) or shutil.which("tide")
    result = subprocess.run([cli, "plan", "--nodes", "zero"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode != 0


def test_host_backend_has_no_cuda_graphs():
    """NOTE [runtime] 6: CUDA graphs are the nccl backend's; the host backend says so."""
    import torch.distributed as dist

    from tide import _C

    comm = _C.Communicator(0, 1, 1, "host", dist.HashStore(), 10.0, -1)
    gid, reason = comm.register_group("g", [(7, 3)])
    assert gid >= 0, reason
    with pytest.raises(Exception, match="host backend"):
        comm.take_graph_calls()
    comm.close()
