"""Verify steps of speculative decoding: publish snapshots only after acceptance (SPEC 9).

A row whose last committed token is at output length ``L`` feeds that token
and ``k`` drafts through the model in one forward pass; the target accepts
``n`` of the drafts. Intermediate index ``j`` (``0..k``) is the state after
``L + j`` tokens. The rules, which ``commit_verified`` enforces:

1. **Publish after acceptance.** Only positions ``L..L+n`` can reach the
   ring; a rejected draft never does.
2. **Own state.** A boundary among them (outside thinking) gets a save whose
   ``source`` is its own intermediate index, never the step's end.
3. **Live state.** The plan's ``SsmStateAccept(seq, n)`` makes the state
   after ``L + n`` tokens live.

Engines without intermediate buffers use the plan's replay form instead:
restore the state after ``L - 1`` tokens (their checkpoint from before the
verify forward) and feed the accepted tokens again, segment by segment,
saving the live state at the end of each segment that ends on a boundary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import attrs

from .._errors import InvalidArgumentError, OutOfOrderError, shown
from .columns import as_list, flag_column, int_value, one_length, rings_for
from .effects import SsmSnapshotSave, SsmStateAccept, trusted_save
from .ring import SsmDecodeRing, newest_position, record_rows, tickets
from .rollback import check_ring
from .save_batch import LIVE, SaveBatch

__all__ = ["ReplaySegment", "VerifyBatch", "VerifyPlan", "commit_verified", "commit_verified_batch"]


@attrs.frozen
class ReplaySegment:
    """Feed the accepted tokens up to output length ``through``, then apply ``save`` (if any)."""

    through: int
    save: SsmSnapshotSave | None


@attrs.frozen
class VerifyPlan:
    """What one row's verify step commits, in both engine styles.

    Intermediate buffers: apply ``effects`` (the accept, then the saves, each
    reading its own intermediate index). Replay: restore the state after
    ``checkpoint_position`` tokens and feed ``replay`` segment by segment;
    when ``replay_needed`` is false the live state is already right and the
    segments' saves (all at the last position) can be applied as they are.
    """

    seq: int
    first_position: int
    fed: int
    accepted: int
    effects: tuple[SsmStateAccept | SsmSnapshotSave, ...]
    replay: tuple[ReplaySegment, ...]

    @property
    def checkpoint_position(self) -> int:
        """The state a replay starts from: after ``first_position - 1`` tokens."""
        return self.first_position - 1

    @property
    def saves(self) -> tuple[SsmSnapshotSave, ...]:
        """The intermediate-sourced saves of ``effects``."""
        return tuple(e for e in self.effects if isinstance(e, SsmSnapshotSave))

    @property
    def end_position(self) -> int:
        """The output length the live state stands at after the step: ``L + n``."""
        return self.first_position + self.accepted

    @property
    def replay_needed(self) -> bool:
        """Whether a replay engine must restore and re-feed (drafts rejected, or a mid-run save)."""
        if self.accepted < self.fed - 1:
            return True
        return any(s.token_position < self.end_position for s in self.saves)


@attrs.frozen
class VerifyBatch:
    """A verify step for many rows: ``saves`` (one ``SaveBatch``), ``accepts``, and each plan."""

    saves: SaveBatch
    accepts: tuple[SsmStateAccept, ...]
    plans: tuple[VerifyPlan, ...]

    @property
    def effects(self) -> tuple[SaveBatch | SsmStateAccept, ...]:
        """Everything to hand ``apply_effects`` for the intermediate-buffer style."""
        return (self.saves, *self.accepts)


@attrs.frozen
class _Checked:
    """One row's verify step, checked and ready to record."""

    ring: SsmDecodeRing
    seq: int
    first: int
    accepted: int
    fed: int
    boundaries: list[int]  # intermediate indices 0..accepted that record


def _check_row(
    ring: object,
    index: str | None,
    seq: object,
    first_position: object,
    accepted: object,
    is_boundary: object,
    in_thinking: object,
    earlier: tuple[int, int] | None = None,
) -> _Checked:
    """One row checked; ``earlier``: the newest position the batch's earlier rows record on
    its ring, and the last of those rows (``None``: none do)."""

    def name(single: str, column: str) -> str:
        return single if index is None else f"{column}{index}"

    ring = check_ring(ring)  # a batch's rings were checked by rings_for
    row = int_value(name("seq", "rows"), seq, 0)
    first = int_value(name("first_position", "first_positions"), first_position, 1)
    boundary = _flags(name("is_boundary", "is_boundary"), is_boundary, None)
    thinking = _flags(name("in_thinking", "in_thinking"), in_thinking, len(boundary))
    n = int_value(name("accepted", "accepted"), accepted, 0)
    if n > len(boundary) - 1:
        raise InvalidArgumentError(
            f"'{name('accepted', 'accepted')}' must be at most the {len(boundary) - 1} drafts "
            f"fed, got {shown(n)}"
        )
    newest, whose = newest_position(ring), ""
    if earlier is not None:
        newest, whose = earlier[0], f" (row {earlier[1]}'s, on the same ring earlier in this step)"
    if first < newest and ring.is_enabled:
        raise OutOfOrderError(
            f"'{name('first_position', 'first_positions')}' must not lie behind the ring's newest "
            f"live snapshot position {newest}{whose}, got {first}: the step would recompute state "
            f"the ring already holds; truncate_after() the ring after a rollback"
        )
    chosen = [j for j in range(n + 1) if boundary[j] and not thinking[j]]
    return _Checked(ring, row, first, n, len(boundary), chosen)


def _flags(name: str, values: object, count: int | None) -> list[object]:
    """One flag per fed token (at least one); ``count`` when the length is known already."""
    flags = flag_column(name, values)
    if count is None and not flags:
        raise InvalidArgumentError(
            f"'{name}' must have one flag per fed token (at least one), got {shown(values)}"
        )
    if count is not None and len(flags) != count:
        raise InvalidArgumentError(
            f"'{name}' must have one flag per fed token ({count}), got {len(flags)}"
        )
    return flags


def _commit(checked: list[_Checked], single: bool) -> list[VerifyPlan]:
    """Record every checked row's accepted boundaries, all or nothing, and build the plans.

    The rows' boundaries go to the ring's batched ``record_rows`` as one
    batch, so rows that share a ring are checked against each other and a
    refusal changes no ring (rules 1-3).
    """
    rings = [c.ring for c in checked for _ in c.boundaries]
    positions = [c.first + j for c in checked for j in c.boundaries]
    owners = [(r, j) for r, c in enumerate(checked) for j in c.boundaries]

    def describe(k: int) -> tuple[str, str]:
        r, j = owners[k]
        column = "'first_position'" if single else f"'first_positions[{r}]'"
        who = "the ring" if single else f"row {checked[r].seq}"
        first = checked[r].first
        return f"the boundary at {first + j} ({column} {first} + {j})", who

    kept, slots, tickets = record_rows(rings, positions, describe)
    recorded: list[list[tuple[int, int, int, int]]] = [[] for _ in checked]
    recorded_rows = range(len(rings)) if kept is None else kept
    for k, slot, ticket in zip(recorded_rows, slots, tickets, strict=True):
        r, j = owners[k]
        recorded[r].append((positions[k], slot, ticket, j))
    return [_plan(c, rows) for c, rows in zip(checked, recorded, strict=True)]


def _plan(checked: _Checked, recorded: list[tuple[int, int, int, int]]) -> VerifyPlan:
    """One row's plan from what its ring recorded: ``(position, slot, ticket, index)``."""
    ring, seq = checked.ring, checked.seq
    # A step that accepts more boundaries than the ring has slots evicts its own
    # early ones: only the entries still live get a save (one per slot).
    live = {
        (position, ticket)
        for position, _, ticket, _ in recorded
        if (entry := ring.entry_for(position)) is not None and entry.ticket == ticket
    }
    saves: list[SsmSnapshotSave] = []
    replay: list[ReplaySegment] = []
    for position, slot, ticket, j in recorded:
        if (position, ticket) in live:
            saves.append(trusted_save(seq, slot, position, ticket, j))
            replay.append(ReplaySegment(position, trusted_save(seq, slot, position, ticket)))
    end = checked.first + checked.accepted
    if not replay or replay[-1].through < end:
        replay.append(ReplaySegment(end, None))
    accept = SsmStateAccept(checked.seq, checked.accepted, tickets.mint_ticket())
    return VerifyPlan(
        checked.seq,
        checked.first,
        checked.fed,
        checked.accepted,
        (accept, *saves),
        tuple(replay),
    )


def commit_verified(
    ring: SsmDecodeRing,
    *,
    seq: int,
    first_position: int,
    accepted: int,
    is_boundary: Sequence[bool],
    in_thinking: Sequence[bool],
) -> VerifyPlan:
    """Commit one row's verify step: record its accepted boundaries, plan the copies.

    ``first_position`` is ``L``, the output length of the last committed
    token (fed first); ``is_boundary[j]`` and ``in_thinking[j]`` describe the
    token at position ``L + j`` for every fed token (``k + 1`` of them);
    ``accepted`` is ``n``, the drafts the target accepted. Everything is
    checked before the ring changes.
    """
    checked = _check_row(ring, None, seq, first_position, accepted, is_boundary, in_thinking)
    return _commit([checked], single=True)[0]


def commit_verified_batch(
    rings: Sequence[SsmDecodeRing] | Mapping[int, SsmDecodeRing],
    *,
    first_positions: Sequence[int],
    accepted: Sequence[int],
    is_boundary: Sequence[Sequence[bool]],
    in_thinking: Sequence[Sequence[bool]],
    rows: Sequence[int] | None = None,
) -> VerifyBatch:
    """``commit_verified`` for every row of a verify step; rows may feed different draft counts.

    Element ``r`` of each argument belongs to row ``rows[r]`` (default
    ``0..n-1``), whose ring is ``rings[rows[r]]``. Every row is checked
    before any ring changes; a bad one raises naming its index.
    """
    columns = {
        "first_positions": as_list("first_positions", first_positions, "ints, one per row")[0],
        "accepted": as_list("accepted", accepted, "ints, one per row")[0],
        "is_boundary": as_list("is_boundary", is_boundary, "flag sequences, one per row")[0],
        "in_thinking": as_list("in_thinking", in_thinking, "flag sequences, one per row")[0],
    }
    count = len(columns["first_positions"])
    row_list = (
        list(range(count))
        if rows is None
        else [int_value(f"rows[{r}]", v, 0) for r, v in enumerate(as_list("rows", rows)[0])]
    )
    one_length({**{name: len(values) for name, values in columns.items()}, "rows": len(row_list)})
    if len(set(row_list)) != count:
        raise InvalidArgumentError(f"'rows' must name each row once, got {shown(row_list)}")
    ring_list = rings_for(rings, row_list, in_order=rows is None)
    checked = []
    # Rows sharing a ring: each is checked against what the earlier ones record there, as
    # the per-row calls in this order would be (SPEC 15).
    newest: dict[int, tuple[int, int]] = {}
    for r in range(count):
        row = _check_row(
            ring_list[r],
            f"[{r}]",
            row_list[r],
            columns["first_positions"][r],
            columns["accepted"][r],
            columns["is_boundary"][r],
            columns["in_thinking"][r],
            newest.get(id(ring_list[r])),
        )
        if row.boundaries:
            newest[id(row.ring)] = (row.first + row.boundaries[-1], row.seq)
        checked.append(row)
    plans = tuple(_commit(checked, single=False))
    saves = [save for plan in plans for save in plan.saves]
    batch = SaveBatch._trusted(
        [s.seq for s in saves],
        [s.slot for s in saves],
        [s.token_position for s in saves],
        [s.ticket for s in saves],
        [LIVE if s.source is None else s.source for s in saves],
        # Rows are distinct; a row's saves read distinct intermediate states into the
        # distinct slots of its ring's live entries.
        distinct=True,
    )
    accepts = tuple(cast(SsmStateAccept, plan.effects[0]) for plan in plans)
    return VerifyBatch(batch, accepts, plans)
