"""The arena's idle bytes lent to the optimizer step (GPUs).

NOTE [arena lending]
Between the last reduce-scatter of an iteration and the next all-gather no TIDE call reads or
writes the arena, yet it stays allocated. That is the optimizer step, the peak of training at
small world sizes with torch's foreach optimizers, whose temporaries are as large as the rank's
fp32 shard (bench/results/memory/ns-scale-h200-ipc/). Stock FSDP2 holds no buffer there. So TIDE
lends the arena's data bytes to the step, through torch's own allocator:

1. Setup, once per communicator (``Loan.split``): the arena is one tensor at the start of a
   segment of its own MemPool, ``LOAN_PAD`` bytes longer than the window so that the segment
   splits (``_runtime.allocate_arena``). It is allocated again as two tensors at the same
   addresses: ``head``, the data bytes [0, ArenaInfo::arena_bytes) rounded down to torch's
   512-byte blocks, and ``tail``, the signal words and message area, allocated for good.
2. Lend (an optimizer step's pre-hook): ``comm.fence(stream)`` on the current stream (once it
   completes no rank's call touches any arena), then ``head`` is freed and the step's
   allocations on this thread go to the MemPool, where torch's allocator carves them from the
   freed head first. Its statistics stay exact: the head is not counted while it is lent.
3. Take back (the post-hook): allocations leave the pool, ``head`` is allocated again and must
   start at the arena's first byte (the step freed what it allocated there), then
   ``comm.fence(stream)``: every rank's next call starts after every rank's step.

A step borrows only where that is safe, and alike on every rank: the communicator serves, none
of its groups holds its landing slot (FSDP2 resharded them after the backward), the stream is
not being captured, and the optimizer's state exists for each of its parameters (a first step
creates state that outlives it). One communicator lends per step (the largest arena on the
device: one MemPool routes a thread's allocations at a time). TIDE_LEND_ARENA=0 turns lending
off. A step that leaves a tensor in the head raises before any rank's next call, naming the fix.
"""

from __future__ import annotations

import os

import torch

LOAN_PAD = 2 << 20  # beyond the window: the segment's rest splits (torch: above 1 MiB)
_BLOCK = 512  # torch's caching allocator rounds block sizes to this
_MIN_HEAD = 4 << 20  # smaller arenas are not worth a fence pair


def lending_refusal() -> str:
    """'' when TIDE lends arenas to optimizer steps, else why not."""
    value = os.environ.get("TIDE_LEND_ARENA", "1")
    if value not in ("0", "1"):
        raise ValueError(f"TIDE_LEND_ARENA must be 0 or 1, got {value!r}")
    return "" if value == "1" else "TIDE_LEND_ARENA=0"


class Loan:
    """One communicator's arena in its MemPool, whole or as ``head`` (lendable) and ``tail``."""

    def __init__(self, comm, groups: list, pool, whole: torch.Tensor) -> None:
        self.comm = comm
        self.groups = groups  # the communicator's TideGroups (their slots)
        self.pool = pool
        self.device = whole.device
        self.base = whole.data_ptr()
        self.total = whole.numel()
        self.parts = [whole]  # what keeps the arena allocated
        self.head_bytes = 0
        self.loans = 0  # optimizer steps that borrowed the head
        self.reason = ""  # why this communicator does not lend ('' while it may)
        self._routing = None  # the open use_mem_pool context while lent

    def split(self, data_bytes: int) -> None:
        """Re-allocates the arena as head + tail at the same addresses, or leaves it whole
        with the reason."""
        head_bytes = data_bytes // _BLOCK * _BLOCK
        if head_bytes < _MIN_HEAD:
            self.reason = f"the arena's data bytes ({data_bytes}) are under {_MIN_HEAD >> 20} MiB"
            return
        self.parts.clear()  # the whole arena's block is free in its pool (its segment stays)
        with torch.cuda.use_mem_pool(self.pool, device=self.device):
            head = self._empty(head_bytes)
            tail = self._empty(self.total - head_bytes)
        if head.data_ptr() == self.base and tail.data_ptr() == self.base + head_bytes:
            self.parts = [head, tail]
            self.head_bytes = head_bytes
            return
        del head, tail
        with torch.cuda.use_mem_pool(self.pool, device=self.device):
            whole = self._empty(self.total)
        if whole.data_ptr() != self.base:
            raise RuntimeError(
                "tide.fsdp: the arena could not be allocated again at its address after a failed "
                "split (NOTE [arena lending]); set TIDE_LEND_ARENA=0"
            )
        self.parts = [whole]
        self.reason = "torch's allocator did not split the arena's segment at its data bytes"

    def ready(self) -> bool:
        """Whether this communicator may lend now (the same answer on every rank)."""
        if self.reason or not self.head_bytes or not self.comm.serving:
            return False
        return not any(
            g.registered_id >= 0 and self.comm.holds_slot(g.registered_id) for g in self.groups
        )

    def lend(self, stream) -> None:
        self.comm.fence(stream.cuda_stream)
        self.parts = self.parts[1:]  # the head's block is free in the pool
        self._routing = torch.cuda.use_mem_pool(self.pool, device=self.device)
        self._routing.__enter__()

    def take_back(self, stream) -> None:
        routing, self._routing = self._routing, None
        routing.__exit__(None, None, None)
        head, wrong = None, []
        with torch.cuda.use_mem_pool(self.pool, device=self.device):
            for _ in range(8):  # best fit may first offer another free block of the same size
                candidate = self._empty(self.head_bytes)
                if candidate.data_ptr() == self.base:
                    head = candidate
                    break
                wrong.append(candidate)
        del wrong
        if head is None:
            self.reason = "an optimizer step left a tensor in the lent arena"
            raise RuntimeError(
                "tide.fsdp: a tensor allocated during the optimizer step is still alive inside "
                "TIDE's arena, which the next all-gather overwrites (NOTE [arena lending]). Set "
                "TIDE_LEND_ARENA=0 on every rank to train with this optimizer"
            )
        self.parts = [head] + self.parts
        self.loans += 1
        self.comm.fence(stream.cuda_stream)

    @property
    def lent(self) -> bool:
        return self._routing is not None

    def _empty(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)


# Every loan of the process, and the optimizer hooks that serve them (installed with the first).
_LOANS: list = []
_HOOKS: list = []


def add(loan: Loan) -> None:
    _LOANS.append(loan)
    if not _HOOKS:
        from torch.optim.optimizer import (  # noqa: PLC0415
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        _HOOKS.append(register_optimizer_step_pre_hook(_before_step))
        _HOOKS.append(register_optimizer_step_post_hook(_after_step))


def remove(comm) -> None:
    """Forgets the communicator's loan (taken back first if lent); the hooks go with the last."""
    for loan in [x for x in _LOANS if x.comm is comm]:
        if loan.lent:
            loan.take_back(torch.cuda.current_stream(loan.device))
        _LOANS.remove(loan)
    if not _LOANS:
        for handle in _HOOKS:
            handle.remove()
        _HOOKS.clear()


def forget_all() -> None:
    """At interpreter exit: no loan, no hook."""
    _LOANS.clear()
    for handle in _HOOKS:
        handle.remove()
    _HOOKS.clear()


def settle() -> None:
    """Takes back every lent arena (a step that raised skipped its post-hook): before any call."""
    for loan in _LOANS:
        if loan.lent:
            loan.take_back(torch.cuda.current_stream(loan.device))


def optimizer_state_complete(optimizer) -> bool:
    """Whether every parameter of ``optimizer`` has its state (a stateless optimizer's step
    keeps nothing: SGD without momentum)."""
    if isinstance(optimizer, torch.optim.SGD) and not any(
        g.get("momentum", 0) for g in optimizer.param_groups
    ):
        return True
    params = [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]
    return all(optimizer.state.get(p) for p in params)


def _borrower():
    """The loan a step may borrow now: the largest ready arena on the current device."""
    if not torch.cuda.is_available():
        return None
    device = torch.cuda.current_device()
    ready = [x for x in _LOANS if x.device.index == device and x.ready()]
    return max(ready, key=lambda x: x.head_bytes, default=None)


def _before_step(optimizer, args, kwargs) -> None:
    loan = _borrower()
    if loan is None or torch.cuda.is_current_stream_capturing():
        return
    if not optimizer_state_complete(optimizer):
        return
    loan.lend(torch.cuda.current_stream(loan.device))


def _after_step(optimizer, args, kwargs) -> None:
    settle()
