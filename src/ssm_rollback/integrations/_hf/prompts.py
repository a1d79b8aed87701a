"""Prompts as the decoders take them: ``input_ids``, a left-padding ``attention_mask``, the output.

``model.generate`` pads a batch of prompts on the left for decoder-only
models and masks the padding; a row then decodes as its unpadded tokens
would. The decoders drop each row's padding, decode the rest as a batch-1
prompt, and put the row back as it came (padding included) in front of its
new tokens. Without a mask, a direct call masks the pad id's positions as
``generate`` does. A mask with a hole or padding on the right cannot be decoded
that way and is refused, as are token ids outside the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias, cast

import attrs
import torch

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError
from .arguments import shown

__all__ = ["InputIds", "Prompts", "read_prompts", "sequences"]

#: A prompt: a ``[batch, length]`` tensor or one row, or the same as lists of ints.
InputIds: TypeAlias = torch.Tensor | Sequence[int] | Sequence[Sequence[int]]

_MASK_HINT = (
    "model.generate derives a mask from pad_token_id when none is given: pass "
    "attention_mask=torch.ones_like(input_ids) if that id is a real token of the prompt"
)


@attrs.frozen(eq=False)
class Prompts:
    """The rows to decode (padding dropped) and the rows as given (padding kept)."""

    rows: list[list[int]]
    given: list[list[int]]
    device: torch.device

    @property
    def padded(self) -> int:
        """Padding positions over all rows."""
        return sum(len(g) - len(r) for r, g in zip(self.rows, self.given, strict=True))

    def mask(self) -> torch.Tensor:
        """The attention mask of the rows as given: 0 over each row's left padding, then 1."""
        pairs = zip(self.rows, self.given, strict=True)
        rows = [[0] * (len(g) - len(r)) + [1] * len(r) for r, g in pairs]
        return torch.tensor(rows, dtype=torch.long, device=self.device)


def read_prompts(
    input_ids: object,
    attention_mask: object,
    position_ids: object,
    vocab: int,
    name: str = "input_ids",
    *,
    pad: int | None = None,
) -> Prompts:
    """``input_ids`` (``[batch, length]`` or one row) with its mask and position ids, checked;
    errors name the ids ``name`` (the argument the caller passed them as). Without a mask,
    the positions holding ``pad`` are padding, as in the mask ``model.generate`` derives from
    its pad id (``GenerateArgs.prompts`` says when it derives one)."""
    ids = _ids(input_ids, name)
    derived = attention_mask is None and pad is not None and bool((ids == pad).any())
    if derived:
        attention_mask = ids.ne(cast(int, pad)).long()
    mask = _left_padding(attention_mask, ids, f" (none given: derived from pad id {pad})" * derived)
    _check_position_ids(position_ids, ids, mask)
    outside = ((ids < 0) | (ids >= vocab)).nonzero()
    if len(outside):
        row, col = outside[0].tolist()
        raise InvalidArgumentError(
            f"'{name}' must be token ids in [0, {vocab}), got {int(ids[row, col])} "
            f"at [{row}, {col}]"
        )
    given: list[list[int]] = ids.tolist()
    pads = [0] * len(given) if mask is None else (mask.shape[1] - mask.sum(1)).tolist()
    rows = [row[pad:] for row, pad in zip(given, pads, strict=True)]
    return Prompts(rows, given, ids.device)


def sequences(prompts: Prompts, outputs: list[list[int]], pad: int) -> torch.Tensor:
    """Each row as given and its new tokens, rows ending early padded on the right (as generate)."""
    rows = [given + new for given, new in zip(prompts.given, outputs, strict=True)]
    width = max(len(row) for row in rows)
    padded = [[*row, *([pad] * (width - len(row)))] for row in rows]
    return torch.tensor(padded, dtype=torch.long, device=prompts.device)


def _ids(input_ids: object, name: str) -> torch.Tensor:
    try:
        ids = torch.as_tensor(input_ids)
    except (TypeError, ValueError, RuntimeError):
        raise InvalidArgumentTypeError(
            f"'{name}' must be integer token ids shaped [batch, length], got {shown(input_ids)}"
        ) from None
    if ids.is_meta:  # shapes without values: every read of them raises
        raise InvalidArgumentTypeError(
            f"'{name}' must hold token ids, got a tensor on the meta device (no values)"
        )
    if ids.dim() == 1:
        ids = ids[None]
    if (
        ids.dim() != 2
        or 0 in ids.shape
        or ids.dtype == torch.bool
        or ids.dtype.is_floating_point
        or ids.dtype.is_complex
    ):
        raise InvalidArgumentError(
            f"'{name}' must be integer token ids shaped [batch, length] with batch and "
            f"length >= 1, got {shown(ids)}"
        )
    return ids.long()  # compared in int64: 128 is no int8, so `ids >= vocab` would wrap there


def _left_padding(
    attention_mask: object, ids: torch.Tensor, derived: str = ""
) -> torch.Tensor | None:
    """The mask as bools ``[batch, length]`` if it pads on the left only; ``None`` for no mask.
    (``derived``: how the mask came about, when the caller gave none.)"""
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.is_meta:
        raise InvalidArgumentTypeError(
            f"'attention_mask' must be a tensor of 0s and 1s or None, got {shown(attention_mask)}"
        )
    mask = attention_mask[None] if attention_mask.dim() == 1 else attention_mask
    if mask.shape != ids.shape or mask.dtype.is_floating_point or mask.dtype.is_complex:
        raise InvalidArgumentError(
            f"'attention_mask' must be 0s and 1s shaped like 'input_ids' {tuple(ids.shape)}, "
            f"got {shown(attention_mask)}"
        )
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise InvalidArgumentError("'attention_mask' must hold only 0s and 1s, got other values")
    mask = mask.bool().cpu()
    bad = ~mask[:, -1] | (mask[:, :-1] & ~mask[:, 1:]).any(1)  # a row ending in padding, or a hole
    if bool(bad.any()):
        row = int(bad.nonzero()[0])
        raise InvalidArgumentError(
            f"'attention_mask'{derived} must pad on the left only (0s, then at least one 1, in "
            f"every row), got {mask[row].int().tolist()} in row {row}; {_MASK_HINT}"
        )
    return mask


def _check_position_ids(position_ids: object, ids: torch.Tensor, mask: torch.Tensor | None) -> None:
    """Position ids are taken only as ``model.generate`` derives them: the decoders derive them."""
    if position_ids is None:
        return
    batch, length = ids.shape
    if mask is None:
        expected = torch.arange(length).expand(batch, length)
    else:
        expected = (mask.long().cumsum(-1) - 1).clamp(min=0)
    given = position_ids if isinstance(position_ids, torch.Tensor) else None
    if (
        given is None
        or given.dtype.is_floating_point
        or given.dtype.is_complex
        or given.shape not in {(1, length), (batch, length)}
        or not torch.equal(given.cpu().long().expand(batch, length), expected)
    ):
        raise InvalidArgumentError(
            f"'position_ids' must be None or those model.generate derives from the attention "
            f"mask (positions counted from each row's first unpadded token), got "
            f"{shown(position_ids)}"
        )
