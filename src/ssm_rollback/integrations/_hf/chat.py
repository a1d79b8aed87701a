"""``message_boundaries``: where each message of a chat-template rendering ends, in tokens;
``checked_positions``: such positions checked as ``publish_at``.

Those positions are where conversations diverge - a regenerate, an edited
message, the next turn - so they are the prefixes worth publishing
(``HybridPrefixCache.prepare(..., publish_at=...)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int
from .arguments import shown

__all__ = ["checked_positions", "message_boundaries"]

#: ``apply_chat_template`` keywords that would change what it returns: set here, not by a caller.
_RESERVED: Final = frozenset(
    {
        "conversation",
        "tokenize",
        "return_dict",
        "return_tensors",
        "padding",
        "truncation",
        "max_length",
        "return_assistant_tokens_mask",
    }
)


def message_boundaries(
    tokenizer: object, messages: Sequence[Mapping[str, object]], **template_kwargs: object
) -> tuple[int, ...]:
    """The token positions where each message ends in ``tokenizer``'s chat-template rendering.

    Positions index the token ids of ``tokenizer.apply_chat_template(messages,
    **template_kwargs)`` (with ``add_generation_prompt=True`` every one is
    below its length, as ``publish_at`` wants). Message ``i`` ends where the
    rendering of ``messages[:i + 1]`` alone ends, when that rendering is a
    prefix of the whole one; a template that renders an earlier message
    differently once more follow (one that drops old reasoning, say) gives
    no position for it, since no later prompt could share that prefix.
    """
    render = getattr(tokenizer, "apply_chat_template", None)
    if not callable(render):
        raise InvalidArgumentTypeError(
            f"'tokenizer' must be a transformers tokenizer with apply_chat_template, "
            f"got {type(tokenizer).__name__}"
        )
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise InvalidArgumentTypeError(
            f"'messages' must be a sequence of message dicts, got {shown(messages)}"
        )
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise InvalidArgumentTypeError(
                f"'messages' must hold message dicts, got {shown(message)} at index {i}"
            )
    reserved = sorted(_RESERVED & set(template_kwargs))
    if reserved:
        raise InvalidArgumentError(
            f"'template_kwargs' must not set {', '.join(map(repr, reserved))}: "
            f"message_boundaries tokenizes the rendering itself"
        )
    whole = _ids(render, list(messages), template_kwargs)
    ends: list[int] = []
    partial_kwargs = {**template_kwargs, "add_generation_prompt": False}
    partial_kwargs.pop("continue_final_message", None)
    for i in range(1, len(messages) + 1):
        part = _ids(render, list(messages[:i]), partial_kwargs)
        end = len(part)
        if whole[:end] == part and (not ends or end > ends[-1]):
            ends.append(end)
    return tuple(ends)


def _ids(render: object, messages: list[Mapping[str, object]], kw: dict[str, object]) -> list[int]:
    assert callable(render)  # checked by the caller
    ids = render(messages, tokenize=True, return_dict=False, **kw)
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise InvalidArgumentError(
            f"'tokenizer' apply_chat_template must give a list of token ids for one "
            f"conversation, got {shown(ids)}"
        )
    return ids


def checked_positions(publish_at: object, length: int) -> set[int]:
    """``publish_at`` checked: ints in ``[0, length)``; 0 (nothing to share) dropped."""
    if isinstance(publish_at, str | bytes) or not isinstance(publish_at, Sequence):
        raise InvalidArgumentTypeError(
            f"'publish_at' must be a sequence of token positions, got {shown(publish_at)}"
        )
    positions = set()
    for i, position in enumerate(publish_at):
        position = check_non_negative_int(f"publish_at[{i}]", position)
        if position >= length:
            raise InvalidArgumentError(
                f"'publish_at' must hold positions < len(input_ids) {length}, "
                f"got {shown(position)} at index {i}"
            )
        positions.add(position)
    positions.discard(0)
    return positions
