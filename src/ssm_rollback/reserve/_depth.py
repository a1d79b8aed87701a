"""The depth policy: how many snapshot slots each sequence gets from the memory left."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Final

import attrs

from .._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    check_non_negative_int,
    describe,
    shown,
)
from ._fields import check_positive
from ._spec import SsmStateSpec, number, oversized

__all__ = ["DEFAULT_MAX_SLOTS", "ENV_VAR", "DepthRule", "RingDepth", "decode_rollback_ring_slots"]

#: Slots per sequence when memory is plentiful.
DEFAULT_MAX_SLOTS: Final = 8
#: The environment variable that overrides the policy (the flag beats it).
ENV_VAR: Final = "SSM_ROLLBACK_RING_SLOTS"
#: More memory than any machine has (16 EiB, what ``--free-memory`` takes at most).
MAX_FREE_BYTES: Final = 2**64


class DepthRule(enum.Enum):
    """What decided the ring depth."""

    #: The ``override`` argument (the ``--ring-slots`` flag).
    OVERRIDE = "override"
    #: The ``SSM_ROLLBACK_RING_SLOTS`` environment variable.
    ENV = "env"
    #: Memory allows at least ``max_slots``: the maximum.
    MAXIMUM = "maximum"
    #: Memory allows fewer than ``max_slots``: as many as fit.
    MEMORY = "memory"


@attrs.frozen
class RingDepth:
    """The chosen ring depth and what it costs."""

    slots: int
    rule: DepthRule
    bytes_per_slot: int
    bytes_total: int
    #: How many slots per sequence fit in ``free_bytes`` after the speculative buffers and
    #: the shared prefix slots.
    fit: int
    #: The engine's speculative buffers for all sequences, taken from ``free_bytes`` first.
    speculative_bytes: int = 0
    #: Shared prefix slots (SPEC 13), a region apart from every ring, and what they cost
    #: (``prefix_slots * bytes_per_slot``), also taken from ``free_bytes`` before the rings.
    prefix_slots: int = 0
    prefix_bytes: int = 0


def _parse_override(value: object, source: str) -> int:
    if isinstance(value, bool):
        raise InvalidArgumentTypeError(f"{source} must be an integer >= 0, got {shown(value)}")
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgumentError(f"{source} must be an integer >= 0, got {shown(value)}")
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise InvalidArgumentError(f"{source} must be an integer >= 0, got an empty string")
        # isdecimal alone admits other scripts' digits ("\u0663"), which no shell user meant.
        if not (text.isascii() and text.isdecimal()):
            raise InvalidArgumentError(f"{source} must be an integer >= 0, got {shown(value)}")
        try:
            return int(text)
        except ValueError:  # past Python's digit limit for int()
            raise InvalidArgumentError(
                f"{source} must be an integer >= 0, got a {len(text)}-digit string"
            ) from None
    raise InvalidArgumentTypeError(
        f"{source} must be an integer >= 0, got {shown(value)} of type {type(value).__name__}"
    )


def decode_rollback_ring_slots(
    spec: SsmStateSpec,
    *,
    max_sequences: int,
    free_bytes: int,
    max_slots: int = DEFAULT_MAX_SLOTS,
    override: int | str | None = None,
    env: Mapping[str, str] | None = None,
    prefix_slots: int = 0,
) -> RingDepth:
    """Snapshot slots per sequence: the flag, else the environment, else what memory allows.

    The engine's speculative buffers (``spec.speculative_bytes_per_sequence``
    for each sequence) and ``prefix_slots`` shared prefix slots (SPEC 13:
    ``spec.bytes_per_snapshot`` each, for the whole engine) come out of
    ``free_bytes`` first. Without overrides ``slots = min(max_slots, fit)``
    with ``fit = (free_bytes - speculative - shared) // (max_sequences *
    spec.bytes_per_snapshot)`` (headroom is the caller's business). Shared
    slots that do not fit beside the speculative buffers raise
    ``InvalidArgumentError`` naming ``prefix_slots``. ``override`` (the CLI
    flag) beats ``SSM_ROLLBACK_RING_SLOTS`` in ``env`` (default
    ``os.environ``); either may exceed ``max_slots`` but must fit. A
    malformed or unaffordable override raises ``InvalidArgumentError``
    naming its source; so does any other argument of the wrong type or range
    (``env`` must be a mapping, ``max_sequences`` at least 1 and at most
    what one slot per sequence in 2**64 bytes allows, ``free_bytes`` at most
    2**64, a ``spec`` at most 2**50 bytes per sequence).
    """
    if not isinstance(spec, SsmStateSpec):
        raise InvalidArgumentTypeError(f"'spec' must be an SsmStateSpec, got {type(spec).__name__}")
    sequences = check_positive("max_sequences", max_sequences)
    free = check_non_negative_int("free_bytes", free_bytes)
    maximum = check_non_negative_int("max_slots", max_slots)
    shared_slots = check_non_negative_int("prefix_slots", prefix_slots)
    environment = os.environ if env is None else env
    if not isinstance(environment, Mapping):
        raise InvalidArgumentTypeError(
            f"'env' must be a mapping of environment variables such as os.environ, "
            f"got {describe(env)}"
        )
    if free > MAX_FREE_BYTES:
        raise InvalidArgumentError(
            f"'free_bytes' must be at most 2**64 (16 EiB, more than any machine holds), "
            f"got {number(free)}"
        )
    per_slot = spec.bytes_per_snapshot
    # The spec's validators already refuse this; a spec built around them must not divide by 0.
    if per_slot <= 0:
        raise InvalidArgumentError(
            f"'spec' must describe at least one byte per snapshot, got {per_slot} "
            f"({spec.model_type}, {len(spec.layers)} SSM layers)"
        )
    oversize = oversized(spec)  # state_spec_from_hf_config refuses these; a hand-built spec
    if oversize is not None:
        raise InvalidArgumentError(f"'spec' must fit a machine, got {oversize[1]}")
    per_sequence = max(per_slot, spec.speculative_bytes_per_sequence)
    if sequences * per_sequence > MAX_FREE_BYTES:  # one slot each (or the buffers): no machine
        raise InvalidArgumentError(
            f"'max_sequences' must be at most {number(MAX_FREE_BYTES // per_sequence)}: one "
            f"snapshot slot (and the speculative buffers) of each of {number(sequences)} "
            f"sequences ({number(per_sequence)} bytes each) is past 2**64 bytes, more than any "
            f"machine holds"
        )
    speculative = sequences * spec.speculative_bytes_per_sequence
    shared = shared_slots * per_slot
    if shared and speculative + shared > free:
        raise InvalidArgumentError(_shared_refusal(shared_slots, per_slot, free, speculative))
    fit = max(0, free - speculative - shared) // (sequences * per_slot)

    chosen: tuple[int, DepthRule, str] | None = None
    if override is not None:
        chosen = (
            _parse_override(override, "'override' (the --ring-slots flag)"),
            DepthRule.OVERRIDE,
            "--ring-slots",
        )
    elif ENV_VAR in environment:
        chosen = (_parse_override(environment[ENV_VAR], ENV_VAR), DepthRule.ENV, ENV_VAR)
    if chosen is not None:
        slots, rule, source = chosen
        if slots > fit:
            taken = [f"{speculative} bytes of speculative buffers"] if speculative else []
            taken += [f"{shared} bytes of {shared_slots} shared prefix slots"] if shared else []
            after = f" after {' and '.join(taken)}" if taken else ""
            raise InvalidArgumentError(
                f"{source} = {shown(slots)} does not fit: {shown(slots)} slots x {sequences} "
                f"sequences x {per_slot} bytes = {shown(slots * sequences * per_slot)} bytes, but "
                f"free_bytes is {free}{after} (at most {fit} slots fit)"
            )
    elif fit >= maximum:
        slots, rule = maximum, DepthRule.MAXIMUM
    else:
        slots, rule = fit, DepthRule.MEMORY
    total = slots * sequences * per_slot
    return RingDepth(slots, rule, per_slot, total, fit, speculative, shared_slots, shared)


def _shared_refusal(slots: int, per_slot: int, free: int, speculative: int) -> str:
    """Why ``slots`` shared prefix slots do not fit in ``free`` bytes beside speculative ones."""
    after = f" after {speculative} bytes of speculative buffers" if speculative else ""
    most = max(0, free - speculative) // per_slot
    return (
        f"'prefix_slots' must fit in free_bytes, got {shown(slots)} shared slots x {per_slot} "
        f"bytes = {shown(slots * per_slot)} bytes, but free_bytes is {free}{after} (at most "
        f"{most} shared slots fit)"
    )
