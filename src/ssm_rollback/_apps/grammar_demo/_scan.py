"""Where each value of a partly generated JSON object starts and ends, in bytes.

A grammar engine guarantees that the bytes so far are a prefix of a valid
document; the validator still has to know which value just ended and where
it began, to judge it and to roll back to the boundary in front of it. This
is a small push-down scanner over that prefix: objects, strings with escapes,
and scalars (numbers, ``true``, ``false``, ``null``). Arrays are not part of
the tool call and are refused.
"""

from __future__ import annotations

import json

import attrs

__all__ = ["Leaf", "leaves"]

_SCALAR_END = frozenset(b",}] \t\r\n")
_BLANK = frozenset(b" \t\r\n")


@attrs.frozen
class Leaf:
    """One string or scalar value: its key path and byte span.

    ``start`` is the offset of its first byte (for a string, the byte after
    the opening quote: the boundary in front of the value is the quote);
    ``end`` the offset just past its last byte (a string's closing quote
    included), or None while the value is still open.
    """

    path: tuple[str, ...]
    start: int
    end: int | None
    raw: bytes

    def value(self) -> object:
        """The parsed value (a complete leaf only)."""
        return json.loads(self.raw)


@attrs.define
class _Object:
    key: str | None = None
    expect_key: bool = True


def leaves(text: bytes) -> list[Leaf]:
    """Every leaf value that ``text`` (a JSON prefix) has started, in order."""
    stack: list[_Object] = []
    found: list[Leaf] = []
    start: int | None = None  # of the string or scalar being read
    in_string = escaped = is_key = False
    path: tuple[str, ...] = ()

    def current_path() -> tuple[str, ...]:
        return tuple(frame.key or "" for frame in stack)

    for offset, byte in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # the closing quote
                assert start is not None
                in_string = False
                if is_key:
                    stack[-1].key = json.loads(text[start - 1 : offset + 1])
                else:
                    found.append(Leaf(path, start, offset + 1, text[start - 1 : offset + 1]))
                start = None
            continue
        if start is not None:  # a scalar
            if byte not in _SCALAR_END:
                continue
            found.append(Leaf(path, start, offset, text[start:offset]))
            start = None
        if byte in _BLANK:
            continue
        if byte == 0x7B:  # {
            stack.append(_Object())
        elif byte == 0x7D:  # }
            stack.pop()
        elif byte == 0x3A:  # :
            stack[-1].expect_key = False
        elif byte == 0x2C:  # ,
            stack[-1].expect_key = True
        elif byte == 0x22:  # an opening quote
            in_string, start = True, offset + 1
            is_key = bool(stack) and stack[-1].expect_key
            path = current_path()
        elif byte == 0x5B:  # [
            raise ValueError(f"arrays are not scanned, got one at byte {offset}")
        else:
            start, path = offset, current_path()
    if start is not None:
        raw = text[start - 1 :] if in_string else text[start:]
        if not (in_string and is_key):
            found.append(Leaf(path, start, None, raw))
    return found
