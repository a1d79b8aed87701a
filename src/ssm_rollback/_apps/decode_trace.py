"""Decode traces for the depth simulation: synthetic ones, and JSONL files parsed.

A trace is a list of events per sequence: a generated token (maybe a
boundary, maybe inside a thinking span), a rollback that wants to go back
``back`` boundaries, or the sequence finishing (its row is reused). A
speculative trace (SPEC 9) also has ``verify`` events: the tokens since the
sequence's previous one were committed by one verify step that fed
``drafts`` drafts and accepted ``accepted`` of them (plus the bonus token).
A rollback is noticed only when its step ends, so the boundaries the step
committed after the token that triggered it hold ring slots too:
``synthetic_trace`` counts them into the rollback's ``back``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from typing import Final, Literal

import attrs

from .._errors import InvalidArgumentError, shown

__all__ = ["MAX_SPEC_TOKENS", "EventKind", "TraceEvent", "parse_trace", "synthetic_trace"]

EventKind = Literal["token", "rollback", "finish", "verify"]

#: The most drafts a synthetic verify step feeds (engines use a handful).
MAX_SPEC_TOKENS: Final = 64


@attrs.frozen
class TraceEvent:
    """One event of a decode trace.

    ``verify`` events (speculative traces only) commit the sequence's token
    events since its previous ``verify``: ``accepted + 1`` of them, out of
    ``drafts`` drafts fed.
    """

    seq: int
    kind: EventKind
    boundary: bool = False
    thinking: bool = False
    back: int = 1
    drafts: int = 0
    accepted: int = 0


def synthetic_trace(
    *,
    sequences: int,
    tokens: int,
    boundary_rate: float,
    rollback_rate: float,
    back: int,
    thinking_rate: float = 0.0,
    seed: int = 0,
    spec_tokens: int = 0,
    accept_rate: float = 0.7,
) -> list[TraceEvent]:
    """A random trace: each token is a boundary with ``boundary_rate``; a rollback follows a
    token with ``rollback_rate`` and wants 1 to ``back`` boundaries back.

    With ``spec_tokens`` (``K``) the tokens come in verify steps: each step
    commits ``1 + n`` tokens, ``n`` the drafts accepted of ``K``, each
    accepted with ``accept_rate`` until the first rejection. A rollback that
    a token of a step triggers happens after the step and also goes back
    over the boundaries the step committed after that token."""
    for name, rate in (
        ("boundary_rate", boundary_rate),
        ("rollback_rate", rollback_rate),
        ("thinking_rate", thinking_rate),
        ("accept_rate", accept_rate),
    ):
        if not 0.0 <= rate <= 1.0:
            raise InvalidArgumentError(f"'{name}' must be in [0, 1], got {rate}")
    if back < 1:
        raise InvalidArgumentError(f"'back' must be an int >= 1, got {back}")
    if not 0 <= spec_tokens <= MAX_SPEC_TOKENS:
        raise InvalidArgumentError(
            f"'spec_tokens' must be an int from 0 (no speculation) to {MAX_SPEC_TOKENS}, "
            f"got {spec_tokens}"
        )
    rng = random.Random(seed)
    events: list[TraceEvent] = []
    for seq in range(sequences):
        thinking_left = 0

        def token(seq: int = seq) -> TraceEvent:
            nonlocal thinking_left
            if thinking_left == 0 and rng.random() < thinking_rate:
                thinking_left = rng.randint(5, 50)
            thinking = thinking_left > 0
            thinking_left = max(0, thinking_left - 1)
            return TraceEvent(seq, "token", rng.random() < boundary_rate, thinking)

        if spec_tokens:
            _verify_steps(
                events, seq, token, rng, tokens, rollback_rate, back, spec_tokens, accept_rate
            )
        else:
            for _ in range(tokens):
                events.append(token())
                if rng.random() < rollback_rate:
                    events.append(TraceEvent(seq, "rollback", back=rng.randint(1, back)))
        events.append(TraceEvent(seq, "finish"))
    return events


def _verify_steps(
    events: list[TraceEvent],
    seq: int,
    token: Callable[[], TraceEvent],
    rng: random.Random,
    tokens: int,
    rollback_rate: float,
    back: int,
    spec_tokens: int,
    accept_rate: float,
) -> None:
    """One sequence's ``tokens`` tokens as verify steps, each followed by its rollback if any."""
    left, sampled = tokens, False
    while left > 0:
        if not sampled:  # the first token, or the first after a rollback: sampled alone
            step = [token()]
        else:
            accepted = 0
            while accepted < spec_tokens and rng.random() < accept_rate:
                accepted += 1
            step = [token() for _ in range(1 + min(accepted, left - 1))]
        events.extend(step)
        if sampled:
            events.append(TraceEvent(seq, "verify", drafts=spec_tokens, accepted=len(step) - 1))
        left -= len(step)
        sampled = True
        trigger = next((i for i in range(len(step)) if rng.random() < rollback_rate), None)
        if trigger is not None:
            overrun = sum(event.boundary for event in step[trigger + 1 :])
            events.append(TraceEvent(seq, "rollback", back=rng.randint(1, back) + overrun))
            sampled = False


def parse_trace(data: bytes, source: str) -> list[TraceEvent]:
    """A JSONL trace's events: one object per line with ``seq`` and ``event`` (see docs).

    ``data`` is the file's content, read by the caller (the CLI reads regular
    files only, up to a limit); errors start with ``source`` (and the line).
    """
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise InvalidArgumentError(
            f"{source}: not UTF-8 text (byte {error.start}: {error.reason})"
        ) from None
    events = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        events.append(_event(line, f"{source}:{number}"))
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
        raise InvalidArgumentError(
            f"{where}: a trace line must be a JSON object, got {shown(line)}"
        )
    given: object = data.get("event")
    kind = next((known for known in _KEYS if known == given), None)
    if kind is None:
        raise InvalidArgumentError(
            f"{where}: 'event' must be 'token', 'rollback' or 'finish', got {shown(given)}"
        )
    unknown = sorted(set(data) - _KEYS[kind])
    if unknown:
        raise InvalidArgumentError(
            f"{where}: a {shown(kind)} event has only the keys {', '.join(sorted(_KEYS[kind]))}; "
            f"got {', '.join(map(repr, unknown))}"
        )
    if "seq" not in data:
        raise InvalidArgumentError(f"{where}: a trace event needs a 'seq' key, got {shown(line)}")
    seq = data["seq"]
    back = data.get("back", 1)
    for name, value, least in (("seq", seq, 0), ("back", back, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidArgumentError(
                f"{where}: '{name}' must be an int >= {least}, got {shown(value)}"
            )
    flags = {name: data.get(name, False) for name in ("boundary", "thinking")}
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise InvalidArgumentError(
                f"{where}: '{name}' must be true or false, got {shown(flag)}"
            )
    return TraceEvent(seq, kind, flags["boundary"], flags["thinking"], back)
