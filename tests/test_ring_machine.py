"""The ring agrees with the seed's list port on every observable, under random operations."""

from __future__ import annotations

import pickle

from ssm_rollback import SsmDecodeRing
from ssm_rollback.testing import SsmDecodeRingMachine

TestSsmDecodeRing = SsmDecodeRingMachine.TestCase


class PickledRingMachine(SsmDecodeRingMachine):
    """The same machine on a ring that went through pickle first (how users subclass it)."""

    def make_ring(self, capacity: int) -> SsmDecodeRing:
        ring = SsmDecodeRing(capacity)
        if capacity:
            ring.record(0)
            ring.clear()
        restored = pickle.loads(pickle.dumps(ring))
        assert isinstance(restored, SsmDecodeRing)
        return restored


TestPickledSsmDecodeRing = PickledRingMachine.TestCase
