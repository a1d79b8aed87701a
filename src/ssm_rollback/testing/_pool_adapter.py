"""How the pool suites build a pool and read a row: ``PoolAdapter``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from ssm_rollback._core.effect_dict import SsmPrefixSave, SsmSnapshotSave
from ssm_rollback.pool import SnapshotPool

__all__ = ["PoolAdapter"]

P = TypeVar("P", bound=SnapshotPool)


class PoolAdapter(Generic[P]):
    """How the conformance suite and the pool state machine build a pool and read a row.

    Implement ``make_pool``, ``set_live`` and ``get_live``: a row's live
    state is set to (and read back as) a small int marker, below 200 so that
    every dtype holds it exactly; ``get_live`` must not return a marker for a
    row whose state is a mix of two. Implement ``fail_saves`` too if the
    backend can be made to fail saves; the failure tests are skipped
    otherwise. ``set_intermediate`` (verify buffers, SPEC 9) and
    ``make_shared_pool`` / ``fail_shared_saves`` (shared slots, SPEC 13)
    likewise.
    """

    def make_pool(self, num_sequences: int, slots_per_sequence: int) -> P:
        """A fresh pool with every row's live state set to some marker."""
        raise NotImplementedError

    def set_live(self, pool: P, seq: int, value: int) -> None:
        """Make row ``seq``'s live state the marker ``value``, in every state tensor."""
        raise NotImplementedError

    def get_live(self, pool: P, seq: int) -> int:
        """The marker row ``seq``'s live state holds (fail if it holds a mix)."""
        raise NotImplementedError

    def fail_saves(self, pool: P, predicate: Callable[[SsmSnapshotSave], bool]) -> bool:
        """Make saves for which ``predicate`` holds fail; return False if the backend can't."""
        return False

    def set_intermediate(self, pool: P, seq: int, values: list[int]) -> bool:
        """Make row ``seq``'s intermediate states the markers ``values`` (index ``j`` holds
        ``values[j]``); return False if the backend keeps no intermediate states (SPEC 9)."""
        return False

    def make_shared_pool(
        self, num_sequences: int, slots_per_sequence: int, shared_slots: int
    ) -> P | None:
        """A fresh pool with ``shared_slots`` shared slots (SPEC 13), or ``None`` if the
        backend keeps none: the shared-slot cases are skipped then."""
        return None

    def fail_shared_saves(self, pool: P, predicate: Callable[[SsmPrefixSave], bool]) -> bool:
        """Make shared saves for which ``predicate`` holds fail; False if the backend can't."""
        return False
