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


def test_landing_slots_refuse_bad_use():
    """NOTE [runtime] 7-8, host backend, one rank: groups of one slot share its memory; an
    all-gather into a slot another group holds, a release of a slot not held, slots assigned
    after the arena exists, and Slot-Reuse staging in another dtype are refused with a reason."""
    import torch
    import torch.distributed as dist

    from tide import _C

    comm = _C.Communicator(0, 1, 1, "host", dist.HashStore(), 10.0, -1)
    a, _ = comm.register_group("a", [(7, 3)], "fp32", "fp32", staged_shards=True, landing_slot=0)
    b, _ = comm.register_group("b", [(5, 2)], "fp32", "fp32", staged_shards=True, landing_slot=0)
    c, _ = comm.register_group("c", [(5, 2)], "bf16", "fp32", staged_shards=True)
    assert min(a, b, c) >= 0
    with pytest.raises(ValueError, match="holds no landing slot"):
        comm.release(a, 0)
    arena = comm.arena()
    assert [s["groups"] for s in arena["slots"]] == [[a, b], [c]], arena
    assert comm.group_info(a)["landing_ptr"] == comm.group_info(b)["landing_ptr"]  # they alias
    with pytest.raises(ValueError, match="exists already"):
        comm.assign_landing_slots([-1, -1, -1])
    late, reason = comm.register_group("late", [(3, 3)])  # the store is gone: no agreement
    assert late == -1 and "before the first all-gather" in reason, reason
    shard_a = torch.randn(7 * 3, dtype=torch.float32)
    comm.all_gather(a, 0, [shard_a.data_ptr()])
    assert comm.holds_slot(a)
    with pytest.raises(ValueError, match="still holds the parameters of group 'a'"):
        comm.all_gather(b, 0, [torch.randn(5 * 2).data_ptr()])
    comm.release(a, 0)
    shard_b = torch.randn(5 * 2, dtype=torch.float32)
    comm.all_gather(b, 0, [shard_b.data_ptr()])
    from tide._memory import tensor_at

    view = tensor_at(comm.group_info(b)["landing_ptr"], 5 * 2, torch.float32, torch.device("cpu"))
    assert torch.equal(view, shard_b), "group b's parameters are in the shared slot"
    with pytest.raises(ValueError, match="geometry"):
        comm.stage_gradients(c, 0, [torch.randn(5 * 2, dtype=torch.bfloat16).data_ptr()])
    comm.close()


def test_null_pointers_are_refused():
    """Null pointers of parameters with bytes (a tensor subclass reports address 0) are refused
    with the parameter named, never read."""
    import torch
    import torch.distributed as dist

    from tide import _C

    comm = _C.Communicator(0, 1, 1, "host", dist.HashStore(), 10.0, -1)
    gid, reason = comm.register_group("g", [(8, 4)], "fp32", "fp32", staged_shards=True)
    assert gid >= 0, reason
    with pytest.raises(ValueError, match="shard pointer of parameter 0 is null"):
        comm.all_gather(gid, 0, [0])
    out = torch.empty(32, dtype=torch.float32)
    with pytest.raises(ValueError, match="gradient pointer of parameter 0 is null"):
        comm.reduce_scatter(gid, 0, [0], out.data_ptr())
    grad = torch.randn(32, dtype=torch.float32)
    comm.reduce_scatter(gid, 0, [grad.data_ptr()], out.data_ptr())
    assert torch.equal(out, grad), "one rank: the reduce-scatter is a copy"
    comm.close()
