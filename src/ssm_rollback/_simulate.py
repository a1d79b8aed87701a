"""Replay a decode trace through the real ring and rollback code at several ring depths.

A trace is a list of events per sequence: a generated token (maybe a
boundary, maybe inside a thinking span), a rollback that wants to go back
``back`` boundaries, or the sequence finishing (its row is reused). At each
depth the same trace runs through ``SsmDecodeRing``,
``snapshot_boundary_if_ssm`` and ``rollback_to_boundary``; a rollback is
*served* when a snapshot exists for it, and otherwise the scheduler
recomputes the kept prefix from the prompt (its tokens are counted).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, Literal

import attrs

from ._errors import InvalidArgumentError
from ._ring import SsmDecodeRing
from .rollback import RollbackPlan, rollback_to_boundary, snapshot_boundary_if_ssm

__all__ = ["DepthResult", "TraceEvent", "read_trace", "replay", "synthetic_trace"]

EventKind = Literal["token", "rollback", "finish"]


@attrs.frozen
class TraceEvent:
    """One event of a decode trace."""

    seq: int
    kind: EventKind
    boundary: bool = False
    thinking: bool = False
    back: int = 1


@attrs.define
class DepthResult:
    """What one ring depth did with the trace."""

    depth: int
    rollbacks: int = 0
    served: int = 0
    declined: int = 0
    tokens_regenerated: int = 0
    tokens_recomputed: int = 0

    @property
    def served_fraction(self) -> float:
        """Served rollbacks over all rollbacks that had a boundary to go to (1.0 if none)."""
        return self.served / self.rollbacks if self.rollbacks else 1.0


def synthetic_trace(
    *,
    sequences: int,
    tokens: int,
    boundary_rate: float,
    rollback_rate: float,
    back: int,
    thinking_rate: float = 0.0,
    seed: int = 0,
) -> list[TraceEvent]:
    """A random trace: each token is a boundary with ``boundary_rate``; a rollback follows a
    token with ``rollback_rate`` and wants 1 to ``back`` boundaries back."""
    for name, rate in (
        ("boundary_rate", boundary_rate),
        ("rollback_rate", rollback_rate),
        ("thinking_rate", thinking_rate),
    ):
        if not 0.0 <= rate <= 1.0:
            raise InvalidArgumentError(f"'{name}' must be in [0, 1], got {rate}")
    if back < 1:
        raise InvalidArgumentError(f"'back' must be an int >= 1, got {back}")
    rng = random.Random(seed)
    events: list[TraceEvent] = []
    for seq in range(sequences):
        thinking_left = 0
        for _ in range(tokens):
            if thinking_left == 0 and rng.random() < thinking_rate:
                thinking_left = rng.randint(5, 50)
            thinking = thinking_left > 0
            thinking_left = max(0, thinking_left - 1)
            events.append(TraceEvent(seq, "token", rng.random() < boundary_rate, thinking))
            if rng.random() < rollback_rate:
                events.append(TraceEvent(seq, "rollback", back=rng.randint(1, back)))
        events.append(TraceEvent(seq, "finish"))
    return events


def read_trace(path: str | Path) -> list[TraceEvent]:
    """Read a JSONL trace: one object per line with ``seq`` and ``event`` (see docs).

    Errors start with the file (and line): the caller knows which flag named it.
    """
    try:
        data = Path(path).read_bytes()
    except (OSError, ValueError) as error:  # ValueError: a NUL in the path
        reason = error.strerror if isinstance(error, OSError) else error
        raise InvalidArgumentError(f"{path}: not a readable file: {reason}") from None
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise InvalidArgumentError(
            f"{path}: not UTF-8 text (byte {error.start}: {error.reason})"
        ) from None
    events = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        events.append(_event(line, f"{path}:{number}"))
    return events


# The keys each kind of event may have; anything else is a typo that would otherwise be
# read as the default (a misspelt "boundary" silently makes every token a non-boundary).
_KEYS: Final[Mapping[EventKind, frozenset[str]]] = {
    "token": frozenset({"seq", "event", "boundary", "thinking"}),
    "rollback": frozenset({"seq", "event", "back"}),
    "finish": frozenset({"seq", "event"}),
}


def _event(line: str, where: str) -> TraceEvent:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as error:  # ValueError: also too many digits
        raise InvalidArgumentError(f"{where}: a trace line must be JSON: {error}") from None
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"{where}: a trace line must be a JSON object, got {line!r}")
    given: object = data.get("event")
    kind = next((known for known in _KEYS if known == given), None)
    if kind is None:
        raise InvalidArgumentError(
            f"{where}: 'event' must be 'token', 'rollback' or 'finish', got {given!r}"
        )
    unknown = sorted(set(data) - _KEYS[kind])
    if unknown:
        raise InvalidArgumentError(
            f"{where}: a {kind!r} event has only the keys {', '.join(sorted(_KEYS[kind]))}; "
            f"got {', '.join(map(repr, unknown))}"
        )
    if "seq" not in data:
        raise InvalidArgumentError(f"{where}: a trace event needs a 'seq' key, got {line!r}")
    seq = data["seq"]
    back = data.get("back", 1)
    for name, value, least in (("seq", seq, 0), ("back", back, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidArgumentError(
                f"{where}: '{name}' must be an int >= {least}, got {value!r}"
            )
    flags = {name: data.get(name, False) for name in ("boundary", "thinking")}
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise InvalidArgumentError(f"{where}: '{name}' must be true or false, got {flag!r}")
    return TraceEvent(seq, kind, flags["boundary"], flags["thinking"], back)


@attrs.define
class _Sequence:
    ring: SsmDecodeRing
    length: int = 0
    boundaries: list[int] = attrs.field(factory=list)


def replay(
    events: Sequence[TraceEvent], depth: int, progress: Callable[[int], None] | None = None
) -> DepthResult:
    """Run ``events`` through rings of ``depth`` slots; ``progress(events_done)`` now and then."""
    result = DepthResult(depth)
    sequences: dict[int, _Sequence] = {}
    for done, event in enumerate(events, start=1):
        state = sequences.get(event.seq)
        if state is None:
            state = sequences[event.seq] = _Sequence(SsmDecodeRing(depth))
        if event.kind == "token":
            state.length += 1
            if event.boundary:
                state.boundaries.append(state.length)
            snapshot_boundary_if_ssm(
                state.ring,
                seq=event.seq,
                token_position=state.length,
                is_boundary=event.boundary,
                in_thinking=event.thinking,
            )
        elif event.kind == "rollback":
            _roll_back(state, event, result)
        else:
            sequences[event.seq] = _Sequence(SsmDecodeRing(depth))
        if progress is not None and done % 4096 == 0:
            progress(done)
    if progress is not None:
        progress(len(events))
    return result


def _roll_back(state: _Sequence, event: TraceEvent, result: DepthResult) -> None:
    if not state.boundaries:
        return  # nowhere to go back to, at any depth
    target = state.boundaries[-min(event.back, len(state.boundaries))]
    result.rollbacks += 1
    plan = rollback_to_boundary(
        state.ring, state.boundaries, seq=event.seq, current_len=state.length, at_most=target
    )
    if isinstance(plan, RollbackPlan):
        result.served += 1
        keep = plan.keep_len
    else:  # recompute the prefix from the prompt, then carry on from the target
        result.declined += 1
        keep = target
        result.tokens_recomputed += keep
        state.ring.truncate_after(keep)
    result.tokens_regenerated += state.length - keep
    state.length = keep
    while state.boundaries and state.boundaries[-1] > keep:
        state.boundaries.pop()
