"""Injects ``tide.fsdp.enable()`` into PyTorch's own FSDP2 tests, run unmodified.

Loaded by every Python process of a run (pytest and the ranks that torch's
MultiProcessTestCase spawns) because bench/fsdp2_upstream/run.py puts this folder first on
PYTHONPATH. It does nothing unless TIDE_UPSTREAM_MODE is set:

- ``stock``: records, per test and rank, the FSDP roots and their parameter groups
  (``tide.fsdp.report`` of a root that was never enabled: backend "stock").
- ``tide-noring``: as ``tide`` with ``enable(root, ring=False)``: every group has a landing
  slot of its own and TIDE serves from the first call (the default ring=True runs the first
  iteration on stock FSDP2 while TIDE traces the order, so a test of one iteration never
  reaches TIDE).
- ``tide``: also calls ``tide.fsdp.enable(root)`` on every root FSDP module, at its first
  lazy init (FSDPState._lazy_init on a state that is about to become the root, i.e. before
  FSDP2's own lazy init, whatever triggered it: the first forward, unshard(), state_dict...),
  unless the root is already enabled.

At the end of each test (MultiProcessTestCase.run_test in a rank process, or the threaded
test body for FSDPTestMultiThread) it writes one JSON line per rank to
``$TIDE_UPSTREAM_OUT/records.jsonl``: the test id, the rank, every root with its report rows
taken then, and any error enable() raised (the error is re-raised: the test then fails).

Nothing is imported at interpreter start: the patches are applied when torch imports the
modules they patch (a meta-path hook), so processes that never import torch pay nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
import threading
import traceback

_MODE = os.environ.get("TIDE_UPSTREAM_MODE", "")
_OUT = os.environ.get("TIDE_UPSTREAM_OUT", "")
_CPU_SHIM = os.environ.get("TIDE_UPSTREAM_CPU_SHIM", "") == "1"
_FORCE_CPU = int(os.environ.get("TIDE_UPSTREAM_FORCE_CPU", "0") or 0)
_TARGETS = (
    "torch.distributed.fsdp._fully_shard._fsdp_state",
    "torch.testing._internal.common_distributed",
    "torch.testing._internal.common_fsdp",
    "torch.testing._internal.common_utils",
    "torch.testing._internal.common_device_type",
)
_lock = threading.Lock()
_local = threading.local()  # per thread (FSDPTestMultiThread runs one rank per thread)
_roots: dict = {}  # thread id -> list of (root module, enable error or "")


def _on_import(name: str, module) -> None:
    if name == _TARGETS[0]:
        _patch_lazy_init(module)
    elif name == _TARGETS[1]:
        _patch_test_runners(module)
        if _FORCE_CPU:
            _force_cpu_skips(module)
    elif name == _TARGETS[2]:
        if _CPU_SHIM or _FORCE_CPU:
            _patch_fsdp_test_device_check(module)
        if _FORCE_CPU:
            _force_cpu_devices(module)
            _force_cpu_world_size(module)
    elif name == _TARGETS[3]:
        _patch_plain_test_case(module)
    elif name == _TARGETS[4]:
        if _FORCE_CPU:
            _force_cpu_device_type_tests(module)


def _force_cpu_skips(common_distributed) -> None:
    """TIDE_UPSTREAM_FORCE_CPU=N (no accelerator): skip_if_lt_x_gpu(x) with x <= N runs the test
    on CPU as skip_if_lt_x_gpu(x, allow_cpu=True) would. Patched before a test file imports
    it (its decorators run at import)."""
    original = common_distributed.skip_if_lt_x_gpu

    def skip_if_lt_x_gpu(x, *, allow_cpu=False):
        return original(x, allow_cpu=allow_cpu or x <= _FORCE_CPU)

    common_distributed.skip_if_lt_x_gpu = skip_if_lt_x_gpu


def _force_cpu_devices(common_fsdp) -> None:
    """TIDE_UPSTREAM_FORCE_CPU=N: N CPU "devices" for the files' world sizes
    (torch.get_device_module("cpu").device_count(), common_fsdp.DEVICE_COUNT)."""
    import torch  # noqa: PLC0415

    if torch.accelerator.is_available():
        return
    torch.cpu.device_count = lambda: _FORCE_CPU
    common_fsdp.DEVICE_COUNT = _FORCE_CPU


def _force_cpu_world_size(common_fsdp) -> None:
    """TIDE_UPSTREAM_FORCE_CPU=N: an FSDPTest class whose world_size is 0 without an
    accelerator (``min(4, torch.accelerator.device_count())``, or an explicit 0) gets N, as
    it would on a machine with N accelerators. A world size of 0 never runs a test, so no
    world size the class chose is changed."""

    def __init_subclass__(cls, **kwargs):
        super(common_fsdp.FSDPTest, cls).__init_subclass__(**kwargs)
        prop = cls.__dict__.get("world_size")
        if isinstance(prop, property) and not getattr(prop.fget, "_tide_upstream", False):
            fget = prop.fget

            def world_size(self, _fget=fget):
                return _fget(self) or _FORCE_CPU

            world_size._tide_upstream = True
            cls.world_size = property(world_size)

    common_fsdp.FSDPTest.__init_subclass__ = classmethod(__init_subclass__)


def _force_cpu_device_type_tests(common_device_type) -> None:
    """TIDE_UPSTREAM_FORCE_CPU=N: instantiate_device_type_tests(..., except_for=["cpu"])
    also instantiates the CPU variant (files that mark a whole class for accelerators; the
    tests' own skips still apply). Patched before a test file imports it."""
    original = common_device_type.instantiate_device_type_tests

    def instantiate_device_type_tests(generic_test_class, scope, except_for=None, **kwargs):
        if except_for:
            except_for = [d for d in except_for if d != "cpu"] or None
        return original(generic_test_class, scope, except_for=except_for, **kwargs)

    common_device_type.instantiate_device_type_tests = instantiate_device_type_tests


def _patch_plain_test_case(common_utils) -> None:
    """Records for single-process tests (a plain common_utils.TestCase, e.g. on a fake process
    group): at the end of TestCase.run, the roots this thread found and no rank runner
    recorded are written with rank dist.get_rank() (0 when no process group is left)."""
    cls = common_utils.TestCase
    if getattr(cls.run, "_tide_upstream", False):
        return
    run = cls.run

    def run_and_record(self, result=None):
        try:
            return run(self, result)
        finally:
            if _roots.get(threading.get_ident()):
                rank = 0
                try:
                    import torch.distributed as dist  # noqa: PLC0415

                    if dist.is_available() and dist.is_initialized():
                        rank = dist.get_rank()
                except Exception:  # noqa: BLE001
                    pass
                _dump(_test_id(self, self._testMethodName), rank, "single-process", "")

    run_and_record._tide_upstream = True
    cls.run = run_and_record


def _patch_fsdp_test_device_check(common_fsdp) -> None:
    """TIDE_UPSTREAM_CPU_SHIM=1, on a machine without an accelerator only: FSDPTest._run (torch
    2.15) exits with the "Need at least N accelerator devices" skip whenever
    torch.accelerator.device_count() < world_size, i.e. for every multi-process test on CPU,
    although the test files mark the tests that run on CPU (skip_if_lt_x_gpu(n,
    allow_cpu=True), world sizes for CPU). The shim answers that one call (the first
    device_count() call of the rank's _run) with the world size; the call after it, and every
    other check (skip_if_lt_x_gpu, the files' own skips), are torch's."""
    import torch  # noqa: PLC0415

    cls = common_fsdp.FSDPTest
    original = cls.__dict__["_run"].__func__

    def _run(klass, rank, test_name, file_name, pipe, **kwargs):
        if not torch.accelerator.is_available():
            real = torch.accelerator.device_count

            def once():
                torch.accelerator.device_count = real
                return 1 << 16

            torch.accelerator.device_count = once
        return original(klass, rank, test_name, file_name, pipe, **kwargs)

    cls._run = classmethod(_run)


def _patch_lazy_init(state_module) -> None:
    cls = state_module.FSDPState
    original = cls._lazy_init
    if getattr(original, "_tide_upstream", False):
        return

    def _lazy_init(self, *args, **kwargs):
        if self._is_root is None:  # this state becomes the root now
            _root_found(self)
        return original(self, *args, **kwargs)

    _lazy_init._tide_upstream = True
    cls._lazy_init = _lazy_init


def _root_found(state) -> None:
    modules = [m for m in getattr(state, "_modules", ()) if m is not None]
    if not modules:
        return
    root = modules[0]
    error = ""
    if _MODE.startswith("tide") and getattr(root, "_tide_groups", None) is None:
        import tide.fsdp  # noqa: PLC0415

        # A user calls enable() before the first forward, outside any dispatch mode: its
        # agreement collectives must not land in a test's CommDebugMode around that forward.
        from torch.utils._python_dispatch import _disable_current_modes  # noqa: PLC0415

        try:
            with _disable_current_modes():
                tide.fsdp.enable(root, ring=_MODE != "tide-noring")
        except BaseException as e:  # recorded, then the test sees it
            error = f"{type(e).__name__}: {e}"
            _remember(root, error)
            raise
    _remember(root, error)


def _remember(root, error: str) -> None:
    with _lock:
        entries = _roots.setdefault(threading.get_ident(), [])
        if not any(r is root for r, _ in entries):
            entries.append((root, error))
        elif error:
            for i, (r, _) in enumerate(entries):
                if r is root:
                    entries[i] = (root, error)


def _rows(root) -> list:
    import tide.fsdp  # noqa: PLC0415

    try:
        return tide.fsdp.report(root)
    except BaseException as e:  # a report that fails is itself a finding
        return [{"group": "<report failed>", "backend": "error", "reason": repr(e)}]


_KEEP = ("group", "backend", "reason", "all_gathers", "reduce_scatters", "stock_calls",
         "stock_calls_by_reason", "stock_reasons", "params", "active", "slot",
         "all_gather_dtypes", "all_gather_bytes")


def _dump(test_id: str, rank, outcome: str, detail: str = "") -> None:
    with _lock:
        entries = _roots.pop(threading.get_ident(), [])
    if not _OUT:
        return
    roots = []
    for root, error in entries:
        rows = [{k: v for k, v in row.items() if k in _KEEP or k.startswith("stock_")}
                for row in _rows(root)]
        roots.append({"root": type(root).__name__, "enable_error": error, "groups": rows})
    record = {"mode": _MODE, "test": test_id, "rank": rank, "pid": os.getpid(),
              "outcome": outcome, "detail": detail[-2000:], "roots": roots}
    os.makedirs(_OUT, exist_ok=True)
    line = json.dumps(record, default=str) + "\n"
    with _lock, open(os.path.join(_OUT, "records.jsonl"), "a") as f:
        f.write(line)  # one write per line: lines of concurrent ranks do not interleave


def _test_id(case, test_name: str) -> str:
    cls = type(case)
    return f"{cls.__module__}.{cls.__name__}.{test_name}"


def _patch_test_runners(cd) -> None:
    mp = cd.MultiProcessTestCase
    if getattr(mp.run_test, "_tide_upstream", False):
        return
    run_test = mp.run_test

    def mp_run_test(self, test_name, parent_pipe):
        outcome, detail = "error", ""
        try:
            run_test(self, test_name, parent_pipe)
            outcome = "passed"
        except SystemExit as e:  # run_test exits on a skip or an error
            skip_codes = {v.exit_code for v in cd.TEST_SKIPS.values()}
            outcome = "skipped" if e.code in skip_codes else "failed"
            detail = f"exit {e.code}"
            raise
        except BaseException:
            detail = traceback.format_exc()
            raise
        finally:
            _dump(_test_id(self, test_name), getattr(self, "rank", -1), outcome, detail)

    mp_run_test._tide_upstream = True
    mp.run_test = mp_run_test

    mt = getattr(cd, "MultiThreadedTestCase", None)
    if mt is not None and hasattr(mt, "run_test_with_threaded_pg"):
        threaded = mt.run_test_with_threaded_pg

        def mt_run_test(self, test_name, rank, world_size):
            try:
                return threaded(self, test_name, rank, world_size)
            finally:
                _dump(_test_id(self, test_name), rank, "threaded", "")

        mt_run_test._tide_upstream = True
        mt.run_test_with_threaded_pg = mt_run_test


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of a target module so that the patch runs
    right after the module executes."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _TARGETS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                exec_module(module)
                _on_import(fullname, module)

        spec.loader = _Loader()
        return spec


if _MODE in ("stock", "tide", "tide-noring"):
    sys.meta_path.insert(0, _Finder())
