"""What ``ssm-rollback demo --grammar`` runs, checked; importable without torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import attrs

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError, describe, shown
from ...testing import DEMO_MODEL_TYPES

__all__ = [
    "DEFAULT_CALLS",
    "DEFAULT_MAX_TOKENS",
    "ENGINES",
    "MAX_CALLS",
    "MAX_TOKENS",
    "GrammarDemoOptions",
]

#: Grammar engines the demo can constrain decoding with.
ENGINES: Final = ("xgrammar", "llguidance")
#: Every call re-decodes its kept prefix after each rollback to check it: a demo stays a demo.
MAX_CALLS: Final = 200
#: The most new tokens a call may take; a complete tool call needs about 70.
MAX_TOKENS: Final = 256
DEFAULT_CALLS: Final = 20
DEFAULT_MAX_TOKENS: Final = 96


def _int_in(least: int, most: int) -> Callable[[object, attrs.Attribute[int], int], None]:
    def check(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgumentTypeError(
                f"'{attribute.name}' must be an int from {least} to {most}, got {describe(value)}"
            )
        if not least <= value <= most:
            raise InvalidArgumentError(
                f"'{attribute.name}' must be an int from {least} to {most}, got {shown(value)}"
            )

    return check


def _one_of(choices: tuple[str, ...]) -> Callable[[object, attrs.Attribute[str], str], None]:
    def check(_instance: object, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in choices:
            raise InvalidArgumentError(
                f"'{attribute.name}' must be one of {', '.join(choices)}, got {shown(value)}"
            )

    return check


@attrs.frozen
class GrammarDemoOptions:
    """One run: the tiny model, its ring, how many tool calls, and the grammar engine.

    ``max_tokens`` bounds each call (a call cut short is counted, not hidden);
    ``retries`` bounds the rejections of one value, after which the value is
    kept and the call counts as refused by the validator.
    """

    model_type: str = attrs.field(default="nemotron_h", validator=_one_of(DEMO_MODEL_TYPES))
    capacity: int = attrs.field(default=4, validator=_int_in(0, 1024))
    calls: int = attrs.field(default=DEFAULT_CALLS, validator=_int_in(1, MAX_CALLS))
    max_tokens: int = attrs.field(default=DEFAULT_MAX_TOKENS, validator=_int_in(1, MAX_TOKENS))
    seed: int = attrs.field(default=0, validator=_int_in(0, 2**32 - 1))
    engine: str = attrs.field(default="xgrammar", validator=_one_of(ENGINES))
    retries: int = attrs.field(default=8, validator=_int_in(0, 64))
