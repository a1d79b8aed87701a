"""Checks of the torch pool's tensors: live state, intermediate buffers, owned memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import torch

from .._errors import InvalidArgumentError, InvalidArgumentTypeError, shown

__all__ = [
    "SUPPORTED_DTYPES",
    "Fingerprint",
    "check_intermediate_states",
    "check_live_states",
    "describe_memory",
    "fingerprint",
]

#: Dtypes a state tensor may have: the floating types SSM kernels keep state in.
SUPPORTED_DTYPES: Final = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def check_live_states(live_states: Sequence[torch.Tensor], batch_dim: int) -> int:
    """Validate the live state tensors; return their shared row count."""
    if isinstance(live_states, torch.Tensor) or not isinstance(live_states, Sequence):
        raise InvalidArgumentTypeError(
            f"'live_states' must be a sequence of torch tensors, got {type(live_states).__name__}"
        )
    if not live_states:
        raise InvalidArgumentError("'live_states' must hold at least one tensor, got none")
    rows: int | None = None
    device: torch.device | None = None
    for i, tensor in enumerate(live_states):
        if not isinstance(tensor, torch.Tensor):
            raise InvalidArgumentTypeError(
                f"'live_states[{i}]' must be a torch.Tensor, got {type(tensor).__name__}"
            )
        if tensor.dtype not in SUPPORTED_DTYPES:
            names = ", ".join(sorted(str(d) for d in SUPPORTED_DTYPES))
            raise InvalidArgumentError(
                f"'live_states[{i}]' must have one of the dtypes {names}, got {tensor.dtype}"
            )
        if tensor.dim() <= batch_dim:
            raise InvalidArgumentError(
                f"'live_states[{i}]' must have a dim {shown(batch_dim)} ('batch_dim'), got shape "
                f"{tuple(tensor.shape)}"
            )
        _check_no_overlap(f"live_states[{i}]", tensor)
        if device is None:
            device = tensor.device
        elif tensor.device != device:
            raise InvalidArgumentError(
                f"'live_states' must all be on one device, got {device} for live_states[0] "
                f"and {tensor.device} for live_states[{i}]"
            )
        if rows is None:
            rows = tensor.shape[batch_dim]
        elif tensor.shape[batch_dim] != rows:
            raise InvalidArgumentError(
                f"'live_states' must all have the same rows on batch_dim {batch_dim}, got "
                f"{rows} for live_states[0] and {tensor.shape[batch_dim]} for "
                f"live_states[{i}] (shape {tuple(tensor.shape)})"
            )
    assert rows is not None
    return rows


def _check_no_overlap(name: str, tensor: torch.Tensor) -> None:
    """Refuse a tensor whose elements share memory (an ``expand()``, an overlapping
    ``as_strided``): a copy into one row would change another.

    Dims by stride, each must step past everything the smaller ones span: sufficient for
    no overlap, and true of every layout a model allocates (dense, sliced, permuted).
    """
    spanned = 0
    for stride, size in sorted(
        (st, sz) for st, sz in zip(tensor.stride(), tensor.shape, strict=True) if sz > 1
    ):
        if stride <= spanned:
            raise InvalidArgumentError(
                f"'{name}' must not hold one element of memory in two places (an expand() or "
                f"overlapping strides), got shape {tuple(tensor.shape)} with strides "
                f"{tuple(tensor.stride())}: a copy into one row would change another"
            )
        spanned += stride * (size - 1)


def check_intermediate_states(
    intermediate: Sequence[torch.Tensor], live: Sequence[torch.Tensor], batch_dim: int
) -> int:
    """Validate the intermediate buffers against the live state; return the states per row.

    Buffer ``i`` is live tensor ``i`` with one more dim right after
    ``batch_dim``: ``[*lead, rows, k + 1, *rest]``, same dtype and device.
    """
    if isinstance(intermediate, torch.Tensor) or not isinstance(intermediate, Sequence):
        raise InvalidArgumentTypeError(
            f"'intermediate_states' must be a sequence of torch tensors, one per live tensor, "
            f"got {type(intermediate).__name__}"
        )
    if len(intermediate) != len(live):
        raise InvalidArgumentError(
            f"'intermediate_states' must hold one buffer per live tensor ({len(live)}), "
            f"got {len(intermediate)}"
        )
    depth: int | None = None
    for i, (buffer, state) in enumerate(zip(intermediate, live, strict=True)):
        if not isinstance(buffer, torch.Tensor):
            raise InvalidArgumentTypeError(
                f"'intermediate_states[{i}]' must be a torch.Tensor, got {type(buffer).__name__}"
            )
        lead, rest = state.shape[: batch_dim + 1], state.shape[batch_dim + 1 :]
        expected = f"{(*lead, 'k + 1', *rest)}"
        if (
            buffer.dim() != state.dim() + 1
            or buffer.shape[: batch_dim + 1] != lead
            or buffer.shape[batch_dim + 2 :] != rest
            or buffer.shape[batch_dim + 1] < 1
        ):
            raise InvalidArgumentError(
                f"'intermediate_states[{i}]' must have shape {expected} (live_states[{i}] with "
                f"the states per row after batch_dim), got {tuple(buffer.shape)}"
            )
        if buffer.dtype != state.dtype or buffer.device != state.device:
            raise InvalidArgumentError(
                f"'intermediate_states[{i}]' must have the dtype and device of live_states[{i}] "
                f"({state.dtype} on {state.device}), got {buffer.dtype} on {buffer.device}"
            )
        _check_no_overlap(f"intermediate_states[{i}]", buffer)
        states = buffer.shape[batch_dim + 1]
        if depth is None:
            depth = states
        elif states != depth:
            raise InvalidArgumentError(
                f"'intermediate_states' must all hold the same states per row, got {depth} "
                f"for intermediate_states[0] and {states} for intermediate_states[{i}]"
            )
    assert depth is not None
    for i, buffer in enumerate(intermediate):
        for j, state in enumerate(live):
            if _may_share_memory(buffer, state):
                raise InvalidArgumentError(
                    f"'intermediate_states[{i}]' must not share memory with live_states[{j}] "
                    f"(a live state that is one state of the per-draft buffer): an accept would "
                    f"copy the buffer into itself, got both in one storage at overlapping bytes"
                )
    return depth


def _may_share_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the bytes ``a`` and ``b`` span overlap in one storage (by shapes and strides
    alone, no copy and no device sync; interleaved views that share no element count too)."""
    if 0 in a.shape or 0 in b.shape or a.device != b.device:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    (a_start, a_end), (b_start, b_end) = _span(a), _span(b)
    return a_start < b_end and b_start < a_end


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    """The first byte ``tensor`` reads and the one past its last (non-negative strides)."""
    last = sum(st * (sz - 1) for st, sz in zip(tensor.stride(), tensor.shape, strict=True))
    start = tensor.data_ptr()
    return start, start + (last + 1) * tensor.element_size()


#: What makes a live tensor the memory the pool was built over: its address
#: (storage offset included), shape, strides, dtype and device.
Fingerprint = tuple[int, torch.Size, tuple[int, ...], torch.dtype, torch.device]


def fingerprint(tensor: torch.Tensor) -> Fingerprint:
    return (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device)


def describe_memory(fingerprint: Fingerprint) -> str:
    ptr, shape, stride, dtype, device = fingerprint
    return (
        f"{tuple(shape)} {str(dtype).removeprefix('torch.')} on {device}, "
        f"strides {stride}, at {ptr:#x}"
    )
