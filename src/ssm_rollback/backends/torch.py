"""The torch snapshot pool: batched copies of SSM state on any torch device.

Snapshot storage for every row and slot is allocated once, beside each live
state tensor: for a live tensor whose ``batch_dim`` has ``num_sequences``
rows, the storage tensor has ``num_sequences * slots_per_sequence`` rows on
that dim (snapshot ``(seq, slot)`` is row ``seq * slots_per_sequence +
slot``), same device, same dtype. A step's saves, and a step's restores, are
one or two batched ops per state tensor (``_torch_copy`` says which): the
work in torch calls depends on the number of state tensors, never on the
number of sequences or layers stacked in a tensor, and once warm nothing is
allocated per call.

No host-device synchronisation happens in ``save`` or ``restore``: every
decision is made on the host from the effects' Python ints (the position
tags included), and the index tensors are built on the host and sent to the
device with ``non_blocking=True`` from pinned memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, final

import torch

from .._effects import SaveBatch, SsmSnapshotRestore, SsmSnapshotSave
from .._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int
from .._slots import PoolBase
from ..pool import SaveOutcome
from ._torch_copy import Copier

__all__ = ["SUPPORTED_DTYPES", "TorchSnapshotPool"]

#: Dtypes a state tensor may have: the floating types SSM kernels keep state in.
SUPPORTED_DTYPES: Final = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def _check_live_states(live_states: Sequence[torch.Tensor], batch_dim: int) -> int:
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
                f"'live_states[{i}]' must have a dim {batch_dim} ('batch_dim'), got shape "
                f"{tuple(tensor.shape)}"
            )
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


def _batch_dim(value: int) -> int:
    return check_non_negative_int("batch_dim", value)


#: What makes a live tensor the memory the pool was built over: its address
#: (storage offset included), shape, strides, dtype and device.
_Fingerprint = tuple[int, torch.Size, tuple[int, ...], torch.dtype, torch.device]


def _fingerprint(tensor: torch.Tensor) -> _Fingerprint:
    return (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype, tensor.device)


def _describe_memory(fingerprint: _Fingerprint) -> str:
    ptr, shape, stride, dtype, device = fingerprint
    return (
        f"{tuple(shape)} {str(dtype).removeprefix('torch.')} on {device}, "
        f"strides {stride}, at {ptr:#x}"
    )


@final
class TorchSnapshotPool(PoolBase):
    """A ``SnapshotPool`` over torch tensors holding the live SSM state, on any device.

    ``live_states`` are the engine's own state tensors (say a conv and an SSM
    state per layer, ``[B, ...]``, or layers stacked as ``[L, B, ...]`` with
    ``batch_dim=1``), all with ``num_sequences`` rows on ``batch_dim`` and on
    one device. They must stay the same tensor objects over the same memory,
    updated in place: the pool copies into and out of them, and a tensor
    that was resized, re-pointed (``set_``, ``.data =``) or moved makes
    ``save`` and ``restore`` raise ``InvalidArgumentError`` naming it, with
    nothing copied. Storage is allocated here, once.
    """

    def __init__(
        self,
        live_states: Sequence[torch.Tensor],
        slots_per_sequence: int,
        *,
        batch_dim: int = 0,
    ) -> None:
        batch_dim = _batch_dim(batch_dim)
        slots = check_non_negative_int("slots_per_sequence", slots_per_sequence)
        rows = _check_live_states(live_states, batch_dim)
        super().__init__(rows, slots)
        self._live: tuple[torch.Tensor, ...] = tuple(live_states)
        self._memory = tuple(_fingerprint(t) for t in self._live)
        self._batch_dim = batch_dim
        self._device = self._live[0].device
        try:
            self._storage: tuple[torch.Tensor, ...] = tuple(
                torch.empty(_storage_shape(t, batch_dim, slots), dtype=t.dtype, device=t.device)
                for t in self._live
            )
        except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
            needed = slots * sum(t.numel() * t.element_size() for t in self._live)
            raise InvalidArgumentError(
                f"'slots_per_sequence' must leave snapshot storage that fits on {self._device}, "
                f"got {slots} slots needing {needed} bytes: {error}"
            ) from None
        # The copies run on views of live and storage as rows of the widest
        # integer that divides a row: bitwise the same, several times fewer
        # elements for the index kernels to move one by one.
        self._copier = Copier(
            tuple(
                _row_views(live, storage, batch_dim)
                for live, storage in zip(self._live, self._storage, strict=True)
            ),
            batch_dim,
        )

    # -- sizes ---------------------------------------------------------------

    @staticmethod
    def bytes_needed(
        live_states: Sequence[torch.Tensor], slots_per_sequence: int, *, batch_dim: int = 0
    ) -> int:
        """Bytes a pool over ``live_states`` with this many slots would allocate (plan first)."""
        slots = check_non_negative_int("slots_per_sequence", slots_per_sequence)
        _check_live_states(live_states, _batch_dim(batch_dim))
        return slots * sum(t.numel() * t.element_size() for t in live_states)

    @property
    def nbytes(self) -> int:
        """Bytes of snapshot storage this pool allocated."""
        return sum(s.numel() * s.element_size() for s in self._storage)

    @property
    def num_sequences(self) -> int:
        """Rows: the size of every live state tensor on ``batch_dim``."""
        return self._tags.num_sequences

    @property
    def slots_per_sequence(self) -> int:
        """Snapshot slots per row."""
        return self._tags.slots_per_sequence

    @property
    def batch_dim(self) -> int:
        """The dim of every live tensor that indexes rows."""
        return self._batch_dim

    @property
    def device(self) -> torch.device:
        """The device of the live state and of the snapshots."""
        return self._device

    @property
    def live_states(self) -> tuple[torch.Tensor, ...]:
        """The live state tensors the pool copies from and into."""
        return self._live

    def __repr__(self) -> str:
        return (
            f"TorchSnapshotPool(num_sequences={self.num_sequences}, "
            f"slots_per_sequence={self.slots_per_sequence}, tensors={len(self._live)}, "
            f"batch_dim={self._batch_dim}, device={self._device}, nbytes={self.nbytes})"
        )

    # -- copies ----------------------------------------------------------------

    def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
        """Copy each save's live row into its snapshot slot: one ``index_copy_`` per tensor.

        If torch raises during the copies (out of memory, a device error),
        the slots of the whole batch are marked as holding nothing before the
        error propagates, so no restore can read a half-written snapshot.
        """
        return SaveOutcome(self._save_batch(saves))

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        """Copy each restore's snapshot back into its live row; stale restores copy nothing."""
        self._restore_batch(restores)

    def _check_owned(self) -> None:
        for i, (tensor, memory) in enumerate(zip(self._live, self._memory, strict=True)):
            now = _fingerprint(tensor)
            if now != memory:
                raise InvalidArgumentError(
                    f"'live_states[{i}]' must still be the memory the pool was built over "
                    f"({_describe_memory(memory)}), got {_describe_memory(now)}: it was "
                    f"resized, re-pointed or moved; copying nothing, make a new pool"
                )

    def _copy_saves(self, rows: list[int], flat: list[int]) -> None:
        with torch.no_grad():
            self._copier.save(rows, flat)

    def _copy_restores(self, rows: list[int], flat: list[int]) -> None:
        with torch.no_grad():
            self._copier.restore(rows, flat)


def _storage_shape(live: torch.Tensor, batch_dim: int, slots: int) -> tuple[int, ...]:
    shape = list(live.shape)
    shape[batch_dim] *= slots
    return tuple(shape)


_ROW_DTYPES: Final = (torch.int64, torch.int32, torch.int16, torch.uint8)


def _row_views(
    live: torch.Tensor, storage: torch.Tensor, batch_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``live`` and ``storage`` as ``[*lead, rows, row]`` of one wide integer dtype, if possible.

    Falls back to the tensors themselves when the dims after ``batch_dim``
    cannot be flattened into a view (a strided live tensor, say).
    """
    lead = batch_dim + 1
    try:
        live_rows = live.view(*live.shape[:lead], -1)
        storage_rows = storage.view(*storage.shape[:lead], -1)
    except RuntimeError:
        return live, storage
    row_bytes = live_rows.shape[-1] * live.element_size()
    for dtype in _ROW_DTYPES:
        width = torch.empty((), dtype=dtype).element_size()
        if row_bytes == 0 or row_bytes % width:
            continue
        try:
            return live_rows.view(dtype), storage_rows.view(dtype)
        except RuntimeError:
            continue
    return live_rows, storage_rows
