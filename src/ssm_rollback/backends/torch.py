"""The torch snapshot pool: batched copies of SSM state on any torch device.

Snapshot storage for every row and slot is allocated once, beside each live
state tensor: for a live tensor whose ``batch_dim`` has ``num_sequences``
rows, the storage tensor has ``num_sequences * slots_per_sequence`` rows on
that dim (snapshot ``(seq, slot)`` is row ``seq * slots_per_sequence +
slot``), same device, same dtype. A step's saves, and a step's restores, are
one batched op per state tensor (two off the CPU for scattered rows;
``_torch_copy`` says which): the work in torch calls depends on the number
of state tensors, never on the number of sequences or layers stacked in a
tensor, and once warm nothing is allocated per call.

No host-device synchronisation happens in ``save`` or ``restore``: every
decision is made on the host from the effects' Python ints (the position
tags included), and the index tensors are built on the host and sent to the
device with ``non_blocking=True`` from pinned memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import final

import torch

from .._core.effect_dict import SaveBatch, SsmSnapshotRestore, SsmSnapshotSave, SsmStateAccept
from .._errors import InvalidArgumentError, check_non_negative_int
from ..pool import SaveOutcome
from ..pool._base import PoolBase
from ._torch_checks import (
    SUPPORTED_DTYPES,
    check_intermediate_states,
    check_live_states,
    describe_memory,
    fingerprint,
)
from ._torch_copy import Copier, RowSet, row_views

__all__ = ["SUPPORTED_DTYPES", "TorchSnapshotPool"]


def _batch_dim(value: int) -> int:
    return check_non_negative_int("batch_dim", value)


@final
class TorchSnapshotPool(PoolBase):
    """A ``SnapshotPool`` over torch tensors holding the live SSM state, on any device.

    ``live_states`` are the engine's own state tensors (say a conv and an SSM
    state per layer, ``[B, ...]``, or layers stacked as ``[L, B, ...]`` with
    ``batch_dim=1``), all with ``num_sequences`` rows on ``batch_dim`` and on
    one device. They must stay the same tensor objects over the same memory,
    updated in place: the pool copies into and out of them, and a tensor
    that was resized, re-pointed (``set_``, ``.data =``) or moved makes
    ``save``, ``restore`` and ``accept`` raise ``InvalidArgumentError``
    naming it, with nothing copied. Storage is allocated here, once.

    ``intermediate_states`` (SPEC 9) are the engine's per-draft buffers of a
    verify step, one per live tensor, shaped like it with ``k + 1`` states
    per row right after ``batch_dim``; index ``j`` of a row is its state
    after ``first_position + j`` tokens. With them the pool also copies
    intermediate-sourced saves and ``SsmStateAccept``, batched.

    ``shared_slots`` (SPEC 13) allocates that many shared slots beside the
    ring slots, each one row of every live tensor: ``save_shared`` and
    ``restore_shared`` copy prefix snapshots to and from them, one batched
    copy per state tensor per call, as ring copies are.
    """

    def __init__(
        self,
        live_states: Sequence[torch.Tensor],
        slots_per_sequence: int,
        *,
        batch_dim: int = 0,
        intermediate_states: Sequence[torch.Tensor] | None = None,
        shared_slots: int = 0,
    ) -> None:
        batch_dim = _batch_dim(batch_dim)
        slots = check_non_negative_int("slots_per_sequence", slots_per_sequence)
        shared = check_non_negative_int("shared_slots", shared_slots)
        rows = check_live_states(live_states, batch_dim)
        super().__init__(rows, slots, shared)
        self._live: tuple[torch.Tensor, ...] = tuple(live_states)
        self._depth = 0
        self._intermediate: tuple[torch.Tensor, ...] = ()
        if intermediate_states is not None:
            self._depth = check_intermediate_states(intermediate_states, self._live, batch_dim)
            self._intermediate = tuple(intermediate_states)
        self._owned = (*self._live, *self._intermediate)
        self._memory = tuple(fingerprint(t) for t in self._owned)
        self._batch_dim = batch_dim
        self._device = self._live[0].device
        try:
            self._storage: tuple[torch.Tensor, ...] = tuple(
                torch.empty(_storage_shape(t, batch_dim, slots), dtype=t.dtype, device=t.device)
                for t in self._live
            )
            self._shared: tuple[torch.Tensor, ...] = tuple(
                torch.empty(_shared_shape(t, batch_dim, shared), dtype=t.dtype, device=t.device)
                for t in self._live
            )
        except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
            needed = _bytes_needed(self._live, batch_dim, slots, shared)
            raise InvalidArgumentError(
                f"'slots_per_sequence' and 'shared_slots' must leave snapshot storage that fits "
                f"on {self._device}, got {slots} slots per row and {shared} shared slots "
                f"needing {needed} bytes: {error}"
            ) from None
        views = [self._views(i, batch_dim) for i in range(len(self._live))]
        self._live_rows = RowSet([v[0] for v in views], batch_dim)
        self._storage_rows = RowSet([v[1] for v in views], batch_dim)
        # Shared storage joins the row views only when it has rows: an empty
        # tensor has no row view, and would make every tensor fall back to its own dtype.
        self._shared_rows = RowSet([v[2] for v in views] if shared else [], batch_dim)
        staged = 3 if shared else 2
        self._intermediate_rows = RowSet([v[staged] for v in views if len(v) > staged], batch_dim)
        self._copier = Copier(self._live_rows.tensors, batch_dim)
        # One context for every copy: making a ``no_grad`` costs about a
        # microsecond, as much as a small step's bookkeeping per row. Copies
        # never nest, so the one instance is never entered twice at once.
        self._no_grad = torch.no_grad()

    def _views(self, i: int, batch_dim: int) -> list[torch.Tensor]:
        tensors = [self._live[i], self._storage[i]]
        if self.shared_slots:
            tensors.append(self._shared[i])
        if self._intermediate:
            buffer = self._intermediate[i]
            shape = list(buffer.shape)
            shape[batch_dim : batch_dim + 2] = [shape[batch_dim] * shape[batch_dim + 1]]
            try:  # the k + 1 states of each row as consecutive rows: [*lead, rows * (k + 1), ...]
                tensors.append(buffer.view(shape))
            except RuntimeError:
                raise InvalidArgumentError(
                    f"'intermediate_states[{i}]' must let its row and state dims be viewed as "
                    f"one (contiguous there), got strides {buffer.stride()}"
                ) from None
        # Rows as the widest integer that divides them: bitwise the same,
        # several times fewer elements for the index kernels to move.
        return row_views(tensors, batch_dim)

    # -- sizes ---------------------------------------------------------------

    @staticmethod
    def bytes_needed(
        live_states: Sequence[torch.Tensor],
        slots_per_sequence: int,
        *,
        batch_dim: int = 0,
        shared_slots: int = 0,
    ) -> int:
        """Bytes a pool over ``live_states`` with these slots would allocate (plan first).

        A shared slot costs what one row's ring slot costs.
        """
        slots = check_non_negative_int("slots_per_sequence", slots_per_sequence)
        shared = check_non_negative_int("shared_slots", shared_slots)
        batch_dim = _batch_dim(batch_dim)
        check_live_states(live_states, batch_dim)
        return _bytes_needed(live_states, batch_dim, slots, shared)

    @property
    def nbytes(self) -> int:
        """Bytes of snapshot storage this pool allocated (ring and shared slots)."""
        return sum(s.numel() * s.element_size() for s in (*self._storage, *self._shared))

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

    @property
    def intermediate_states(self) -> tuple[torch.Tensor, ...]:
        """The intermediate buffers of a verify step (empty when the pool has none)."""
        return self._intermediate

    def __repr__(self) -> str:
        return (
            f"TorchSnapshotPool(num_sequences={self.num_sequences}, "
            f"slots_per_sequence={self.slots_per_sequence}, tensors={len(self._live)}, "
            f"batch_dim={self._batch_dim}, device={self._device}, nbytes={self.nbytes}, "
            f"intermediate_states={self._depth}"
            f"{f', shared_slots={self.shared_slots}' if self.shared_slots else ''})"
        )

    # -- copies ----------------------------------------------------------------

    def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
        """Copy each save's state (live, or its intermediate index) into its snapshot slot.

        One batched copy per tensor for the live-sourced saves and one for
        the intermediate-sourced ones. If torch raises during the copies, the
        slots of the whole batch are marked as holding nothing before the
        error propagates, so no restore can read a half-written snapshot.
        """
        return SaveOutcome(self._save_batch(saves))

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        """Copy each restore's snapshot back into its live row; stale restores copy nothing."""
        self._restore_batch(restores)

    def accept(self, accepts: Sequence[SsmStateAccept], /) -> None:
        """Make each accept's intermediate state its row's live state: one copy per tensor."""
        self._accept_batch(accepts)

    def _check_owned(self) -> None:
        for i, (tensor, memory) in enumerate(zip(self._owned, self._memory, strict=True)):
            now = fingerprint(tensor)
            if now != memory:
                live = len(self._live)
                name = f"live_states[{i}]" if i < live else f"intermediate_states[{i - live}]"
                raise InvalidArgumentError(
                    f"'{name}' must still be the memory the pool was built over "
                    f"({describe_memory(memory)}), got {describe_memory(now)}: it was "
                    f"resized, re-pointed or moved; copying nothing, make a new pool"
                )

    def _intermediate_count(self, seq: int) -> int:
        return self._depth

    def _copy_saves(self, rows: list[int], flat: list[int]) -> None:
        with self._no_grad:
            self._copier.move(self._live_rows, self._storage_rows, rows, flat)

    def _copy_restores(self, rows: list[int], flat: list[int]) -> None:
        with self._no_grad:
            self._copier.move(self._storage_rows, self._live_rows, flat, rows)

    def _copy_shared_saves(self, rows: list[int], slots: list[int]) -> None:
        with self._no_grad:
            self._copier.move(self._live_rows, self._shared_rows, rows, slots)

    def _copy_shared_restores(self, rows: list[int], slots: list[int]) -> None:
        # Several rows may read one shared slot: the source rows may repeat.
        unique = len(set(slots)) == len(slots)
        with self._no_grad:
            self._copier.move(self._shared_rows, self._live_rows, slots, rows, src_unique=unique)

    def _copy_intermediate_saves(
        self, rows: list[int], flat: list[int], indices: list[int]
    ) -> None:
        depth = self._depth
        staged = [seq * depth + j for seq, j in zip(rows, indices, strict=True)]
        with self._no_grad:
            self._copier.move(self._intermediate_rows, self._storage_rows, staged, flat)

    def _copy_accepts(self, rows: list[int], indices: list[int]) -> None:
        depth = self._depth
        staged = [seq * depth + j for seq, j in zip(rows, indices, strict=True)]
        with self._no_grad:
            self._copier.move(self._intermediate_rows, self._live_rows, staged, rows)


def _storage_shape(live: torch.Tensor, batch_dim: int, slots: int) -> tuple[int, ...]:
    shape = list(live.shape)
    shape[batch_dim] *= slots
    return tuple(shape)


def _shared_shape(live: torch.Tensor, batch_dim: int, shared: int) -> tuple[int, ...]:
    shape = list(live.shape)
    shape[batch_dim] = shared
    return tuple(shape)


def _bytes_needed(live: Sequence[torch.Tensor], batch_dim: int, slots: int, shared: int) -> int:
    """Bytes of ``slots`` ring slots per row and ``shared`` shared slots over ``live``."""
    total = 0
    for t in live:
        row = math.prod(size for dim, size in enumerate(t.shape) if dim != batch_dim)
        total += (slots * t.shape[batch_dim] + shared) * row * t.element_size()
    return total
