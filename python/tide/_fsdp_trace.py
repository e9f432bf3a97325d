"""The landing slots of a model's groups, from the order in which FSDP2 really unshards them.

NOTE [landing slots from the first iteration]
Which groups may share a landing slot is a property of the execution, not of the module tree:
FSDP2 keeps the root unsharded from its forward to its backward, a module used twice stays
unsharded across the other groups' backward, two forwards before a backward interleave the
layers' lifetimes, prefetching holds the next group early. So ``enable()`` registers the
groups but does not lay out the arena: the first iteration runs on stock FSDP2 (the same
memory and results as without TIDE), and this tracer records, per group, when FSDP2
all-gathers it and when it reshards it. Two groups conflict when one is all-gathered while
the other is unsharded. At the first forward after a backward that reduced gradients (a
forward pre-hook on the module given to ``enable()``, reached by every rank at the same
point), each group gets the smallest slot id that no conflicting group has, taken in order of
first all-gather (a greedy coloring: with FSDP2's prefetch depth of 1 and a root, the blocks
alternate two slots and the root gets a third). Then every communicator creates its arena
(collective) and TIDE serves every later call. A group never all-gathered during the trace
gets a slot of its own. Later iterations that differ (a partial forward, another prefetch
pattern) are met by the safety rules of NOTE [landing slots] in _fsdp_group.py.
"""

from __future__ import annotations

import torch


class SlotTracer:
    """Conflicts between groups during the traced iteration(s), and the slots they imply."""

    def __init__(self, groups: list) -> None:
        self.groups = list(groups)
        self.unsharded: list = []  # groups all-gathered and not resharded since, in order
        self.conflicts: dict[int, set[int]] = {id(g): set() for g in self.groups}
        self.first_unshard: list = []
        self.reduces = 0
        self.done = False
        self.fp32_grads: set[int] = set()  # groups reduced with fp32 gradients (NOTE [no-sync accumulation])

    def all_gathered(self, group) -> None:
        if id(group) not in self.conflicts:
            return
        for other in self.unsharded:
            if other is not group:
                self.conflicts[id(group)].add(id(other))
                self.conflicts[id(other)].add(id(group))
        if group not in self.unsharded:
            self.unsharded.append(group)
        if group not in self.first_unshard:
            self.first_unshard.append(group)

    def resharded(self, group) -> None:
        if group in self.unsharded:
            self.unsharded.remove(group)

    def reduced(self, group, grads=()) -> None:
        if id(group) in self.conflicts:
            self.reduces += 1
            if any(g.dtype == torch.float32 for g in grads):
                self.fp32_grads.add(id(group))

    def ready(self) -> bool:
        """A backward reduced gradients: the trace holds a whole iteration; and no group holds
        an unsharded gradient accumulated without sync on stock FSDP2 (a reduce-scatter of
        one group completes the trace while another, e.g. a root that skips sync for its own
        parameters, is still accumulating: taking that group over mid-window lost what it had
        accumulated; PyTorch's test_gradient_accumulation, mode "root_only")."""
        if self.done or self.reduces == 0:
            return False
        return not any(_accumulating(g) for g in self.groups)

    def forget(self) -> None:
        """Drops the recorded order once the slots are taken from it (``_activate``): later
        calls record nothing; ``groups`` stays."""
        self.unsharded, self.first_unshard = [], []
        self.conflicts = {}
        self.done = True

    def slots(self) -> dict[int, int]:
        """Slot id by id(group): greedy over the first all-gathers; -1 for untraced groups."""
        slot: dict[int, int] = {}
        for group in self.first_unshard:
            taken = {slot[n] for n in self.conflicts[id(group)] if n in slot}
            slot[id(group)] = next(s for s in range(len(self.groups) + 1) if s not in taken)
        for group in self.groups:
            slot.setdefault(id(group), -1)
        return slot


def _accumulating(group) -> bool:
    """Whether FSDP2 holds an unsharded gradient of the group that no reduce-scatter has taken
    yet (no-sync accumulation: set_requires_gradient_sync(False))."""
    for fsdp_param in group.fsdp_group.fsdp_params:
        unsharded = getattr(fsdp_param, "_unsharded_param", None)
        if unsharded is not None and unsharded.grad is not None:
            return True
        # torch before 2.15 keeps the fp32 accumulation (reduce_dtype) in an attribute
        if vars(fsdp_param).get("unsharded_accumulated_grad") is not None:
            return True
    return False
