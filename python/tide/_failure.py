"""Fail-stop for FSDP2 with TIDE (paper Sec. 7.5): a failed communicator stops the job.

NOTE [job stop]
The runtime is fail-stop (NOTE [runtime] 5): a timeout, a dead peer or an abort raises
tide._C.CommunicationError on the rank that finds it and aborts the communicator on every
rank, whose next call or check() raises. The adapter turns that into a stop of the whole job,
as torch's NCCL watchdog does:
  1. Every communicator call that TIDE serves goes through ``GuardedCommunicator``. Once the
     communicator serves calls (its arena exists), a CommunicationError from it aborts the
     communicator here too (the peers' next waits raise), aborts the torch process groups
     whose collectives TIDE served (a peer blocked in FSDP2's remaining collectives over them,
     HSDP's all-reduce or the agreement, is not left waiting on a rank that stopped taking
     part; every torch process group of the process only with
     ``enable(abort_all_process_groups=True)``: torch's other groups, such as one a DCP save
     uses, are torch's to time out), and raises
     ``tide.fsdp.CommunicationError`` on the calling thread, naming the failure. Nothing
     ends the process from inside the library: the exception reaches the training loop
     (uncaught, it ends the process; torch's collectives can no longer run in it).
  2. The calls of the nccl and ipc backends complete on the GPU after they return, so a
     failure the watchdog finds (NOTE [runtime] 5) shows at the next call or check().
     ``check_health`` runs check() on every communicator at the root's post-backward (after
     the last reduce-scatter was issued, before an optimizer step can read its output) and
     before every forward of the module given to enable(): at least once per step.
  3. Before the arena exists nothing TIDE computed has been consumed, so an error there (a
     failed arena allocation, a peer that does not answer) is not a job stop: the groups fall
     back to stock FSDP2 with the reason (fsdp.py, _activate).
"""

from __future__ import annotations

import torch.distributed as dist


class CommunicationError(RuntimeError):
    """A TIDE communicator failed (a timeout, a dead or stalled peer, an abort: NOTE [job
    stop]). The communicator is aborted on every rank and this process's torch process groups
    are aborted: the job must stop (restart it, from a checkpoint)."""


_native: tuple | None = None


def native_errors() -> tuple:
    """The binding's CommunicationError (tide._C), where the binding loads."""
    global _native
    if _native is None:
        try:
            from . import _C  # noqa: PLC0415
        except ImportError:
            return ()
        error = getattr(_C, "CommunicationError", None)
        _native = (error,) if error is not None else ()
    return _native


def abort_torch_process_groups(groups=None) -> str:
    """Aborts ``groups`` (torch process groups), or every torch process group of this process
    where None; returns what happened, for the error's message."""
    if not dist.is_initialized():
        return "torch.distributed was not initialized"
    abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
    what = "torch's process groups" if groups is None else "the torch process groups TIDE served"
    try:
        if groups is None:
            abort() if abort is not None else dist.destroy_process_group()
        else:
            for group in groups:
                abort(group) if abort is not None else dist.destroy_process_group(group)
    except Exception as e:  # noqa: BLE001 (the job stops whatever the backend says)
        return f"aborting {what} failed: {type(e).__name__}: {e}"
    return f"{what} were aborted"


class GuardedCommunicator:
    """The binding's Communicator, whose failures stop the job once it serves calls (NOTE
    [job stop] 1). Every other attribute is the communicator's own."""

    def __init__(self, comm, backend: str, choice_reason: str = "") -> None:
        self._comm = comm
        self.backend = backend
        self.choice_reason = choice_reason  # why this backend and not the first choice
        self.serving = False  # the arena exists: TIDE's outputs may be consumed from now on
        self.failure = ""  # the failure that stopped the job, once one did
        # NOTE [job stop] 1: what a failure aborts of torch's: these groups, or all where None.
        self.torch_groups: list | None = []

    def __getattr__(self, name: str):
        attr = getattr(self._comm, name)
        if not callable(attr):
            return attr
        guarded = self._guard(attr)
        self.__dict__[name] = guarded  # the next lookups skip __getattr__
        return guarded

    def _guard(self, method):
        def call(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except native_errors() as e:
                if not self.serving:
                    raise
                raise self.stop(str(e)) from e

        call.__name__ = getattr(method, "__name__", "call")
        return call

    def stop(self, failure: str) -> CommunicationError:
        """NOTE [job stop] 1: aborts the communicator (every rank) and torch's process groups;
        returns the error to raise."""
        first = not self.failure
        if first:
            self.failure = failure
            try:
                self._comm.abort(failure)
            except Exception:  # noqa: BLE001 (aborted already, or closed)
                pass
            torch_state = abort_torch_process_groups(self.torch_groups)
        else:
            torch_state = "torch's process groups were handled at the first failure"
        return CommunicationError(
            f"tide.fsdp: the TIDE communicator ({self.backend} backend) failed: {self.failure}. "
            f"The job must stop: the communicator is aborted on every rank and {torch_state}"
        )

    def close(self) -> None:
        self.serving = False
        if self._comm is not None:
            self._comm.close()

    def close_at_exit(self) -> None:
        """Closes the communicator and drops the binding's object (at interpreter exit, so
        that nanobind finds no live instance)."""
        self.close()
        self.__dict__.clear()
        self._comm = None


def check_health(communicators) -> None:
    """NOTE [job stop] 2: raises CommunicationError when a serving communicator has failed."""
    for comm in communicators:
        if comm.serving:
            comm.check()
