"""The end of a distributed run of the demo, the memory bench and the test workers.

NOTE [gloo teardown]
With torch 2.15's gloo, two aborts ("terminate called without an active
exception") were seen at the end of runs whose work had all completed:
- a rank destroyed its process group while a peer was still in a collective (the demo, 2 of 4
  runs on a loaded 2-core machine);
- a rank that had returned from ``destroy_process_group`` aborted during interpreter
  finalization (the failure tests' "arena" scenario, once in CI; 0 of 80 runs reproduced it).
Both are torch's teardown, after every result was written. So a run ends in three steps: a
barrier (every rank past its last collective, where the peers are known to be alive),
``destroy_process_group``, then ``os._exit`` once the output is flushed: the interpreter's
finalization, where torch objects are destroyed in no set order, is skipped. TIDE's own
resources are released before that, by ``tide.fsdp.close`` or by the process's exit (the
driver and the kernel reclaim device memory, ipc handles and shared memory).
"""

from __future__ import annotations

import os
import sys

import torch.distributed as dist


def end_distributed_run(*, barrier: bool = True, code: int = 0) -> None:
    """Ends the process: barrier (when ``barrier`` and the default group is up), destroy the
    process groups, flush, ``os._exit(code)``. Never returns."""
    if dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
