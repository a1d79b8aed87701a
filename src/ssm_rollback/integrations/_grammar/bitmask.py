"""The token bitmask both grammar engines fill, and masking logits with it (torch).

Int32, one row per sequence, ``ceil(vocab_size / 32)`` words per row; bit
``t % 32`` of word ``t // 32`` is set when token ``t`` is allowed - the
layout of xgrammar's and llguidance's own bitmasks, so either engine fills a
row in place.
"""

from __future__ import annotations

from typing import Final

import torch

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int, shown

__all__ = [
    "allocate_token_bitmask",
    "apply_token_bitmask",
    "bitmask_width",
    "check_row",
    "clear_padding",
    "describe",
]

_BITS: Final = 32


def bitmask_width(vocab_size: int) -> int:
    """Int32 words per bitmask row for ``vocab_size`` token ids."""
    return -(-check_non_negative_int("vocab_size", vocab_size) // _BITS)


def allocate_token_bitmask(batch_size: int, vocab_size: int) -> torch.Tensor:
    """A CPU int32 bitmask of ``batch_size`` rows for ``vocab_size`` ids, every token allowed."""
    batch_size = check_non_negative_int("batch_size", batch_size)
    width = bitmask_width(vocab_size)
    try:
        return torch.full((batch_size, width), -1, dtype=torch.int32)
    except (RuntimeError, TypeError, MemoryError, OverflowError) as error:  # past memory or int64
        raise InvalidArgumentError(
            f"'batch_size' x 'vocab_size' must be a bitmask this process can hold, got "
            f"{shown(batch_size)} rows of {shown(width)} words: {type(error).__name__}"
        ) from None


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set to ``-inf``, in place, every logit whose token the bitmask does not allow.

    ``logits`` is ``[vocab]`` or ``[batch, vocab]`` on any device; ``bitmask``
    is one row per logits row (``[words]`` or ``[batch, words]``). Ids beyond
    the bitmask's ``32 * words`` (a model head wider than the grammar's
    vocabulary) are masked too.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise InvalidArgumentTypeError(
            f"'logits' must be a floating-point tensor, got {describe(logits)}"
        )
    _check_bitmask_type(bitmask)
    rows = logits if logits.dim() == 2 else logits.unsqueeze(0)
    masks = bitmask if bitmask.dim() == 2 else bitmask.unsqueeze(0)
    if rows.dim() != 2 or masks.dim() != 2 or rows.shape[0] != masks.shape[0]:
        raise InvalidArgumentError(
            f"'bitmask' must have one row per logits row, got logits {tuple(logits.shape)} "
            f"and bitmask {tuple(bitmask.shape)}"
        )
    vocab = rows.shape[1]
    shifts = torch.arange(_BITS, dtype=torch.int32, device=rows.device)
    try:
        on_device = masks.to(rows.device)
    except (RuntimeError, NotImplementedError) as error:  # a meta bitmask, a device it leaves not
        raise InvalidArgumentError(
            f"'bitmask' must be readable on the logits' device {rows.device}, got one on "
            f"{masks.device}: {type(error).__name__}"
        ) from None
    bits = (on_device.unsqueeze(-1) >> shifts) & 1
    allowed = bits.flatten(1)[:, :vocab].bool()
    if allowed.shape[1] < vocab:
        pad = torch.zeros(masks.shape[0], vocab - allowed.shape[1], dtype=torch.bool)
        allowed = torch.cat([allowed, pad.to(rows.device)], dim=1)
    try:
        rows.masked_fill_(~allowed, float("-inf"))
    except RuntimeError as error:  # autograd refuses before it writes: nothing changed
        raise InvalidArgumentError(
            f"'logits' must be maskable in place, got {describe(logits)}: {error}"
        ) from None


def clear_padding(row: torch.Tensor, vocab_size: int) -> None:
    """Clear, in place, the bits of a bitmask row past ``vocab_size`` (ids no matcher takes).

    xgrammar sets them when most tokens are allowed; a model head wider than
    the vocabulary would then pick an id the matcher refuses.
    """
    used = vocab_size % _BITS
    if used:
        row[vocab_size // _BITS] &= (1 << used) - 1


def describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} {value.dtype} tensor on {value.device}"
    return f"{value!r} of type {type(value).__name__}"


def _check_bitmask_type(bitmask: object) -> torch.Tensor:
    if not isinstance(bitmask, torch.Tensor) or bitmask.dtype != torch.int32:
        raise InvalidArgumentTypeError(
            f"'bitmask' must be an int32 tensor (allocate_token_bitmask), got {describe(bitmask)}"
        )
    return bitmask


def check_row(bitmask: torch.Tensor, index: int, vocab_size: int) -> torch.Tensor:
    """Row ``index`` of a CPU bitmask as wide as ``vocab_size`` needs, checked."""
    _check_bitmask_type(bitmask)
    width = bitmask_width(vocab_size)
    if bitmask.dim() != 2 or bitmask.shape[1] != width or bitmask.device.type != "cpu":
        raise InvalidArgumentError(
            f"'bitmask' must be a CPU tensor shaped [batch, {width}] for {vocab_size} token ids, "
            f"got {describe(bitmask)}"
        )
    index = check_non_negative_int("index", index)
    if index >= bitmask.shape[0]:
        raise InvalidArgumentError(
            f"'index' must be < the bitmask's {bitmask.shape[0]} rows, got {shown(index)}"
        )
    row = bitmask[index]
    if not row.is_contiguous():
        raise InvalidArgumentError("'bitmask' rows must be contiguous")
    if bitmask.shape[0] > 1 and abs(bitmask.stride(0)) < width:
        # An expand() (stride 0) or overlapping rows: writing row ``index`` writes others.
        raise InvalidArgumentError(
            f"'bitmask' rows must not share memory (an expand() or overlapping strides), got "
            f"row stride {bitmask.stride(0)} for rows of {width} words"
        )
    return row
