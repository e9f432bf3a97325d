"""A process's peak memory on CPU with TIDE's shared-memory arena counted once.

NOTE [honest peak on CPU]
TIDE's host backend keeps its arena in POSIX shared memory that every local rank maps: a rank
pushes its gradients into its peers' staging and pulls their partials, so its resident set
(``ru_maxrss``, ``VmHWM``) holds its own arena's pages and every page of its peers' arenas it
touched (at N = 8 about 1.6 times its own arena). Summed over ranks, RSS counts a shared page
once per rank that touched it: it overstates TIDE, more so at larger N. The peak we report:
  peak = max(P_before, P_during + A)
  - P_during: the peak private resident memory (``RssAnon + RssFile`` of /proc/self/status:
    torch's tensors, the heap, the libraries; no shared memory) while the arena is mapped
    (``RssShmem > 0``), and A the rank's own arena in full, touched or not, as a GPU allocates
    it;
  - P_before: the peak private memory before (TIDE's first iteration runs stock FSDP2 while it
    traces the order, and its arena is made at the second: NOTE [landing slots from the first
    iteration]).
Summed over ranks it counts every byte the job holds once (untouched arena pages included);
for stock FSDP2 it is the RSS. Both runs load the same libraries, at the same point (after
``init_process_group``, before the model is built and the meter starts): ``load_libraries()``
imports ``tide.fsdp`` and its binding ``tide._C`` in the stock run too, without enabling
anything, so that the pages of TIDE's library and Python modules that loading alone touches
(code, relocated data, static initialisers: about 0.7 MiB at the demo's peak) count alike;
what TIDE's code touches beyond that, by running, counts as TIDE's (NOTE [where TIDE's peak
comes from] in bench/memory/run.py). Linux keeps a high-water mark of the whole RSS only, so
the private part is sampled: a thread reads /proc/self/status every ``interval_s`` (about 20 us a
read), and every ``sample()`` call (the benchmark's forward hooks) reads it too; a transient
shorter than the gap between two samples can be missed, alike for stock and TIDE. Beside it:
``peak_rss_bytes`` (ru_maxrss) and ``pss_bytes``, the proportional set size at the end
(/proc/self/smaps_rollup: each shared page, the libraries' too, divided among its mappers).
"""

from __future__ import annotations

import importlib
import resource
import threading
import time

_FIELDS = ("RssAnon:", "RssFile:", "RssShmem:")


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(_FIELDS):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0]) * 1024
    return out


def load_libraries() -> str:
    """Imports ``tide.fsdp`` and ``tide._C`` (NOTE [honest peak on CPU]: stock and TIDE runs
    load the same libraries); enables nothing. Returns '' or why the binding did not load
    (a source tree without a build: the TIDE run then stays on stock FSDP2 anyway)."""
    importlib.import_module("tide.fsdp")
    try:
        importlib.import_module("tide._C")
    except ImportError as e:
        return f"tide._C: {e}"
    return ""


def pss_bytes() -> int:
    """The proportional set size now (0 where /proc/self/smaps_rollup is absent)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakMeter:
    """Samples the private resident memory; ``stop()`` returns the figures (all in bytes)."""

    def __init__(self, interval_s: float = 0.001, timeline: bool = False) -> None:
        self._interval = interval_s
        # (seconds, label, anonymous, file-backed, shared bytes) per sample when asked for: where
        # the peak happens (labels are sample()'s; the thread's samples have none)
        self.timeline: list | None = [] if timeline else None
        self._t0 = time.monotonic()
        self._peak_private = 0
        self._peak_before = 0  # private, before any shared memory is mapped
        self._peak_during = 0  # private, while it is
        self._peak_shmem = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="tide-peak-meter", daemon=True)
        self._thread.start()

    def sample(self, label: str = "") -> None:
        s = _status()
        private = s.get("RssAnon", 0) + s.get("RssFile", 0)
        with self._lock:
            if self.timeline is not None:
                self.timeline.append((time.monotonic() - self._t0, label, s.get("RssAnon", 0),
                                      s.get("RssFile", 0), s.get("RssShmem", 0)))
            self._peak_private = max(self._peak_private, private)
            shmem = s.get("RssShmem", 0)
            if shmem > 0:
                self._peak_during = max(self._peak_during, private)
            else:
                self._peak_before = max(self._peak_before, private)
            self._peak_shmem = max(self._peak_shmem, shmem)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def stop(self) -> dict[str, int]:
        """The figures; ``peak_bytes(result, arena_bytes)`` combines them."""
        self._stop.set()
        self._thread.join()
        self.sample()
        return {
            "peak_private_bytes": self._peak_private,
            "peak_private_before_shared_bytes": self._peak_before,
            "peak_private_with_shared_bytes": self._peak_during,
            "peak_shmem_bytes": self._peak_shmem,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "pss_bytes": pss_bytes(),
        }


def peak_bytes(figures: dict, arena_bytes: int) -> int:
    """NOTE [honest peak on CPU]: max(P_before, P_during + A) from ``PeakMeter.stop()``'s figures."""
    during = figures["peak_private_with_shared_bytes"]
    return max(figures["peak_private_before_shared_bytes"], during + arena_bytes if during else 0)
