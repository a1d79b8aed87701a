"""What the scheduler side tells the worker side each step: plain values, no vLLM, no torch.

vLLM may run its scheduler and its workers in different processes; these
values travel inside the connector's metadata (pickled), so they hold only
ints and strings. Block ids are per KV cache group, in vLLM's group order.
"""

from __future__ import annotations

import attrs

__all__ = ["SlotCopy", "StepOps"]


@attrs.frozen
class SlotCopy:
    """Copy a prefix between a request's blocks and a shared slot.

    ``length`` tokens of attention KV (the blocks that cover them) and the SSM
    state standing after exactly ``length`` tokens. A load copies only when
    the slot holds ``ticket``; a save leaves the slot holding it.
    """

    req_id: str
    slot: int
    ticket: int
    length: int
    block_ids: tuple[tuple[int, ...], ...]


@attrs.frozen
class StepOps:
    """One step's copies, in the order the worker runs them.

    ``finished_saves`` (finished requests, whose blocks vLLM keeps until the
    worker reports them sent) and then ``loads`` run before the forward pass;
    ``prompt_saves`` run after it, once the prompt's state stands.
    """

    finished_saves: tuple[SlotCopy, ...] = ()
    loads: tuple[SlotCopy, ...] = ()
    prompt_saves: tuple[SlotCopy, ...] = ()
