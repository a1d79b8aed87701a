"""Tensor-parallel workers: a step's effects over ``torch.distributed``, and an agreement check.

The scheduler decides on one rank; every tensor-parallel rank holds its own
shard of the SSM state in its own pool. Per step:

1. ``broadcast_effects(effects, src=scheduler, rings=rings,
   prefix_index=index)`` on every rank (the rings and the index on the
   scheduler only): the scheduler's effects, checked against what only it
   holds and with the shared saves its index superseded left out
   (``pool.scheduler_step``), travel as int64 words in one message of a
   buffer each group keeps (``_wire_channel``: tagged sends on gloo, an
   ``all_reduce`` on NCCL), no pickling, and every rank - the scheduler
   included - gets the same decoded tuple back. Bad input raises
   ``SsmRollbackError`` on every rank: each rank makes the same calls in the
   same order and decodes the same words, so an error cannot leave a peer
   waiting, and no rank applies a step the scheduler's checks refuse.
2. The scheduler applies them with ``apply_effects(pool, effects, rings,
   prefix_index=index)``; a worker, which has no rings and no prefix index,
   with ``apply_on_worker(pool, effects)``. Prefix snapshots (SPEC 13)
   travel like every effect: each rank copies its shard of the state into
   and out of its own shard of the shared slots.
3. ``check_agreement(pool)`` on every rank: one small ``all_gather`` of a
   digest of each rank's slot tags, shared slots included. A rank whose save
   failed (its slot holds nothing where its peers hold the ticket) raises
   ``AgreementError`` on every rank, naming that rank and the slots; the
   scheduler then retires those snapshots from its rings and its prefix
   index with ``retire_disputed(rings, error, prefix_index=index)``.

``shard_live_states``, ``shard_of`` and ``shard_pool`` size and build each
rank's pool from ``ssm_rollback.reserve``'s per-rank shapes, split the way
vLLM splits them.

Without an initialised process group everything runs as a single rank: no
collective, the same checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Final, final

import torch.distributed as dist

from ._core.effect_dict import Effect
from ._core.prefix import PrefixSnapshotIndex
from ._core.ring import SsmDecodeRing
from ._errors import InvalidArgumentError
from ._tp import channel as _wire_channel
from ._tp import wire as _wire
from ._tp.agreement import check_agreement
from ._tp.disputes import AgreementError, RowDispute, SharedSlotDispute, SlotDispute
from ._tp.failures import DistributedError, src_word
from ._tp.groups import group_active
from ._tp.retire import retire_disputed
from ._tp.shard import shard_live_states, shard_of, shard_pool
from .pool import Rings, SaveOutcome, SnapshotPool, apply_effects, scheduler_step

__all__ = [
    "AgreementError",
    "DistributedError",
    "RowDispute",
    "SharedSlotDispute",
    "SlotDispute",
    "WireError",
    "apply_on_worker",
    "broadcast_effects",
    "check_agreement",
    "retire_disputed",
    "shard_live_states",
    "shard_of",
    "shard_pool",
]

WireError = _wire.WireError


# -- effects --------------------------------------------------------------------------------


def broadcast_effects(
    effects: Iterable[Effect] | None,
    *,
    src: int,
    group: dist.ProcessGroup | None = None,
    rings: Rings | None = None,
    prefix_index: PrefixSnapshotIndex | None = None,
) -> tuple[Effect, ...]:
    """The scheduler's step effects on every rank, as int64 words; call it on every rank.

    ``src`` is the scheduler's global rank (as in ``torch.distributed.broadcast``);
    only it passes ``effects`` (the others pass ``None``, or anything: it is
    ignored), and with them its ``rings`` and ``prefix_index``: the step is
    first checked against them as ``apply_effects`` on the scheduler checks
    it (a ring for every saved row; shared saves its index placed, at their
    lengths), and the shared saves whose entry has left the index since are
    left out (``pool.scheduler_step``), so every rank applies the same step,
    or all refuse it. Without them a step that the scheduler's
    ``apply_effects`` would refuse, or leave a save out of, reaches the
    workers as it is. One message per step, of a buffer the group keeps from step to
    step: on gloo a send from ``src`` to each rank (tagged ``b"SSMR"``, apart
    from the engine's own messages), on NCCL an ``all_reduce`` that also
    carries every rank's ``src``. The group's first step first checks every
    rank's wire format version and ``src`` (two one-word ``all_reduce``), and
    a step too big for the buffer grows it with a second message. Every rank
    decodes the same words, so all return equal tuples or all raise:
    ``InvalidArgumentError`` when the scheduler's input was bad (with its
    message) or the ranks' ``src`` differ (naming each), ``WireError`` when
    the ranks speak different format versions or the words do not decode.

    A peer that died, or did not take the step within the group's timeout,
    is ``DistributedError`` (naming the group and, on gloo, the peer) on the
    ranks that waited on it. On gloo that is also how a ``src`` that differs
    after the group's first step shows: ranks compare ``src`` only in the
    handshake, since a check every step would take a message from every rank.
    """
    word, error = src_word(src)
    if rings is not None or prefix_index is not None:
        effects = _scheduled(effects, rings, prefix_index)
    if not group_active(group):
        if error is not None:
            raise error
        if word != 0:
            raise InvalidArgumentError(
                f"'src' must be 0 without an initialised process group (one rank), got {src}"
            )
        return _wire.decode(_wire.encode_given(effects))
    return _wire_channel.step(effects, src=word, error=error, group=group)


def _scheduled(
    effects: Iterable[Effect] | None, rings: Rings | None, index: PrefixSnapshotIndex | None
) -> Iterator[Effect]:
    """``effects`` as ``scheduler_step`` decides them, when the sender reads them: a refusal
    raised here travels to every rank as the step's (receivers never read their effects)."""
    yield from scheduler_step(() if effects is None else effects, rings, index)


@final
class _NoRings(Mapping[int, SsmDecodeRing]):
    """A worker's stand-in for the scheduler's rings: a disabled ring for every row.

    ``apply_effects`` then checks and batches exactly as on the scheduler,
    and its discard of a failed save finds no entry: a worker reports failed
    saves, the scheduler's rings (through ``check_agreement``) act on them.
    """

    _ring: Final = SsmDecodeRing(0)

    def __getitem__(self, seq: int) -> SsmDecodeRing:
        return self._ring

    def __contains__(self, seq: object) -> bool:
        return True

    def __iter__(self) -> _EmptyIterator:
        return _EmptyIterator()

    def __len__(self) -> int:
        return 0


@final
class _EmptyIterator:
    def __iter__(self) -> _EmptyIterator:
        return self

    def __next__(self) -> int:
        raise StopIteration


_NO_RINGS: Final = _NoRings()


def apply_on_worker(pool: SnapshotPool, effects: Iterable[Effect]) -> SaveOutcome:
    """A worker's ``apply_effects``: the same checks, batching and order, without rings.

    Shared-slot saves and restores (SPEC 13) are applied as on the scheduler
    (``pool`` must then be a ``SharedSnapshotPool``); the prefix index lives
    on the scheduler only. Returns the saves and shared saves that failed on
    this rank; ``check_agreement`` is how the scheduler hears of them.
    """
    return apply_effects(pool, effects, _NO_RINGS)
