"""The scheduler side's bookkeeping: the prefix index and each request's blocks; no vLLM.

vLLM's state of a hybrid model exists only at scheduler-step ends, so this
publishes at the two such ends every request has: its prompt end (saved
right after the step that computes the last prompt token) and, when it
finishes, the state after ``prompt + output - 1`` tokens (the last sampled
token is never fed), which is exactly the prefix the conversation's next
turn extends. A hit pins its entry until the step that loads it has been
handed to the worker, so no publish can evict a slot between match and load.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ...prefix import PrefillPlan, PrefixEntry, PrefixSnapshotIndex
from ._ops import SlotCopy, StepOps

__all__ = ["PrefixBook", "RequestOptions"]

#: The index's row number: vLLM's requests have no rows of ours, and the effects only echo it.
_ROW = 0


@attrs.frozen
class RequestOptions:
    """What one request asks of the connector (``kv_transfer_params["ssm_rollback"]``)."""

    load: bool = True
    publish: bool = True


@attrs.define
class _Request:
    prompt: tuple[int, ...]
    options: RequestOptions
    blocks: list[list[int]] = attrs.field(factory=list)
    plan: PrefillPlan | None = None
    hit: int = 0


def _frozen(block_ids: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(group) for group in block_ids)


class PrefixBook:
    """The index, the requests it knows and the copies of the step being built."""

    def __init__(self, index: PrefixSnapshotIndex) -> None:
        self.index = index
        self._requests: dict[str, _Request] = {}
        self._finished: list[SlotCopy] = []
        self._loads: list[SlotCopy] = []
        self._prompt_saves: list[SlotCopy] = []
        self._loaded: list[PrefillPlan] = []
        self._loading: dict[str, PrefixEntry] = {}

    def match(self, req_id: str, prompt: Sequence[int], options: RequestOptions) -> int:
        """Plan a new request: the number of prompt tokens a shared slot supplies (0: none)."""
        old = self._requests.pop(req_id, None)
        if old is not None and old.plan is not None:  # asked again: it was not scheduled
            self.index.release(old.plan)
        request = _Request(tuple(prompt), options)
        self._requests[req_id] = request
        if not options.load:
            return 0
        plan = self.index.plan_prefill(_ROW, request.prompt)
        if plan.hit is None:
            self.index.release(plan)
            return 0
        request.plan, request.hit = plan, plan.start
        return plan.start

    def allocated(self, req_id: str, block_ids: Sequence[Sequence[int]], external: int) -> None:
        """vLLM allocated the request's blocks; a hit it accepted is loaded this step."""
        request = self._requests.get(req_id)
        if request is None:
            return
        request.blocks = [list(group) for group in block_ids]
        plan = request.plan
        if plan is None:
            return
        request.plan = None
        if external and plan.hit is not None and external == plan.start:
            entry = plan.hit.entry
            self._loads.append(
                SlotCopy(req_id, entry.slot, entry.ticket, entry.length, _frozen(request.blocks))
            )
            self._loaded.append(plan)  # pinned until this step is handed over
            self._loading[req_id] = entry
        else:
            self.index.release(plan)

    def scheduled(
        self,
        req_id: str,
        new_blocks: Sequence[Sequence[int]] | None,
        computed: int,
        scheduled: int,
        *,
        replace: bool = False,
    ) -> None:
        """A request runs ``scheduled`` tokens after ``computed``; publish its prompt end."""
        request = self._requests.get(req_id)
        if request is None:
            return
        if new_blocks is not None:
            if replace or not request.blocks:
                request.blocks = [list(group) for group in new_blocks]
            else:
                for group, more in zip(request.blocks, new_blocks, strict=True):
                    group.extend(more)
        end = len(request.prompt)
        # Only a step that ends at the prompt's end leaves the state after it: one that runs
        # past it (a preempted request recomputing its prompt and output at once) does not.
        if not request.options.publish or not computed < end == computed + scheduled:
            return
        save = self.index.publish(_ROW, request.prompt, end)
        if save is not None:
            blocks = _frozen(request.blocks)
            self._prompt_saves.append(SlotCopy(req_id, save.slot, save.ticket, end, blocks))

    def finished(
        self, req_id: str, tokens: Sequence[int], computed: int, block_ids: Sequence[Sequence[int]]
    ) -> bool:
        """A request finished after ``computed`` tokens; ``True``: keep its blocks for a save."""
        request = self._requests.pop(req_id, None)
        if request is None:
            return False
        if request.plan is not None:
            self.index.release(request.plan)
        if not request.options.publish or computed <= len(request.prompt):
            return False
        save = self.index.publish(_ROW, tokens[:computed], computed)
        if save is None:
            return False
        copy = SlotCopy(req_id, save.slot, save.ticket, computed, _frozen(block_ids))
        self._finished.append(copy)
        return True

    def load_done(self, req_id: str, *, failed: bool) -> None:
        """The worker reported a load; a failed one's entry is discarded, never tried again."""
        entry = self._loading.pop(req_id, None)
        if failed and entry is not None and entry in self.index.entries():
            self.index.discard(entry)

    def take_step(self) -> StepOps:
        """The copies of the step just scheduled; unpins the hits it loads."""
        ops = StepOps(tuple(self._finished), tuple(self._loads), tuple(self._prompt_saves))
        self._finished.clear()
        self._loads.clear()
        self._prompt_saves.clear()
        for plan in self._loaded:
            self.index.release(plan)
        self._loaded.clear()
        return ops
